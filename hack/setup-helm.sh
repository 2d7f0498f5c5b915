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
  # The variables helm's own Makefile sets: its version, and the Kubernetes
  # version it assumes without a cluster (that of its client-go, else 1.20).
  k8s_minor="$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)"
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
    -ldflags="-s -X helm.sh/helm/v3/internal/version.version=${version} \
      -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${k8s_minor} \
      -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${k8s_minor}" \
    -o "${out}.tmp" helm.sh/helm/v3/cmd/helm
)
mv "${out}.tmp" "${out}"
