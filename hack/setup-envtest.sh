#!/usr/bin/env bash
# Builds the control-plane binaries that envtest needs (kube-apiserver, etcd,
# kubectl) from the Go module proxy into bin/k8s/<version>/.
#
# Why build: prebuilt downloads (setup-envtest's default, GitHub releases) are
# not reachable from our CI machines, but the Go module proxy is. The build
# modules live under bin/ (git-ignored) so they never touch the product's
# go.mod. Work already done is skipped, so a warm machine pays nothing.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
OUT="${ROOT}/bin/k8s/${K8S_VERSION}"
SRC="${ROOT}/bin/.tools-src"

mkdir -p "${OUT}" "${SRC}"

# Staging modules that k8s.io/kubernetes replaces with ./staging paths. A
# module outside that tree cannot follow those replaces, so we point each one
# at its published v0.x tag instead.
staging_modules() {
  local mod
  mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v${K8S_VERSION}.mod"
  [[ -f "${mod}" ]] || go mod download "k8s.io/kubernetes@v${K8S_VERSION}" >/dev/null
  sed -n '/^replace (/,/^)/p' "${mod}" | awk '/=>/ {print $1}'
}

build_kube() {
  local dir="${SRC}/kubernetes-${K8S_VERSION}" staging_version="v0.${K8S_VERSION#1.}"
  mkdir -p "${dir}"
  {
    echo "module heatsink.dev/tools/kubernetes"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    echo
    echo "replace ("
    staging_modules | while read -r m; do echo "	${m} => ${m} ${staging_version}"; done
    echo ")"
  } >"${dir}/go.mod"
  cat >"${dir}/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  (cd "${dir}" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  (cd "${dir}" && GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kube-apiserver@v${K8S_VERSION}" >/dev/null)
  # Stamp the version as Kubernetes' own build does: without it the API
  # server reports v0.0.0-master, and clients that check the server's
  # version (helm install of a chart with kubeVersion) refuse it.
  local minor="${K8S_VERSION#1.}"
  minor="${minor%%.*}"
  local ldflags="-s"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=v${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
  done
  for cmd in "$@"; do
    echo "setup-envtest: building ${cmd} ${K8S_VERSION} (first time only; kube-apiserver takes ~6 min on 2 cores)" >&2
    (cd "${dir}" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="${ldflags}" -o "${OUT}/${cmd}.tmp" "k8s.io/kubernetes/cmd/${cmd}")
    mv "${OUT}/${cmd}.tmp" "${OUT}/${cmd}"
  done
}

build_etcd() {
  local dir="${SRC}/etcd-${ETCD_VERSION}"
  mkdir -p "${dir}"
  cat >"${dir}/go.mod" <<MOD
module heatsink.dev/tools/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 v${ETCD_VERSION}
MOD
  cat >"${dir}/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  echo "setup-envtest: building etcd ${ETCD_VERSION} (first time only, ~1 min)" >&2
  (cd "${dir}" && GOFLAGS=-mod=mod go mod tidy >/dev/null && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "${OUT}/etcd.tmp" .)
  mv "${OUT}/etcd.tmp" "${OUT}/etcd"
}

missing=()
for b in kube-apiserver kubectl; do [[ -x "${OUT}/${b}" ]] || missing+=("${b}"); done
# An API server built before the version was stamped is rebuilt once.
if [[ -x "${OUT}/kube-apiserver" ]] && ! "${OUT}/kube-apiserver" --version 2>/dev/null | grep -q "v${K8S_VERSION}"; then
  missing+=(kube-apiserver)
fi
[[ -x "${OUT}/etcd" ]] || build_etcd
((${#missing[@]} == 0)) || build_kube "${missing[@]}"

# Print the directory for KUBEBUILDER_ASSETS.
echo "${OUT}"
