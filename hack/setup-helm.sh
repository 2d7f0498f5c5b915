#!/usr/bin/env bash
# Builds helm from the Go module proxy into the path given (skipped when present).
set -o errexit -o nounset -o pipefail
version="$1" out="$2"
[[ -x "${out}" ]] && exit 0
# The build runs in another directory: make the output path absolute.
[[ "${out}" = /* ]] || out="${PWD}/${out}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${ROOT}/bin/.tools-src/helm-${version}"
mkdir -p "${dir}"
cat >"${dir}/go.mod" <<MOD
module heatsink.dev/tools/helm

go 1.26.0
MOD
cat >"${dir}/tools.go" <<'GO'
//go:build tools

package tools

import _ "helm.sh/helm/v3/cmd/helm"
GO
echo "setup-helm: building helm ${version} (first time only, ~2 min)" >&2
(
  cd "${dir}"
  GOFLAGS=-mod=mod go get "helm.sh/helm/v3@${version}"
  GOFLAGS=-mod=mod go mod tidy
  # helm reports its version from this variable; without it `helm version` says v3.22.
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
    -ldflags="-s -X helm.sh/helm/v3/internal/version.version=${version}" \
    -o "${out}.tmp" helm.sh/helm/v3/cmd/helm
)
mv "${out}.tmp" "${out}"
