#!/usr/bin/env bash
# Builds the control-plane binaries that envtest needs (kube-apiserver, etcd,
# kubectl) from the Go module proxy into bin/k8s/<version>/.
#
# Why build: prebuilt downloads (setup-envtest's default, GitHub releases) are
# not reachable from our CI machines, but the Go module proxy is; hack/lib.sh
# builds in throwaway modules and skips work already done.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"
K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
OUT="${ROOT}/bin/k8s/${K8S_VERSION}"
SRC="${ROOT}/bin/.tools-src"

etcd_module() {
  local dir="$1"
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
  (cd "${dir}" && GOFLAGS=-mod=mod go mod tidy >/dev/null)
}

# An API server built before the version was stamped is rebuilt once.
if [[ -x "${OUT}/kube-apiserver" ]] && ! "${OUT}/kube-apiserver" --version 2>/dev/null | grep -q "v${K8S_VERSION}"; then
  rm -f "${OUT}/kube-apiserver"
fi
build_go_tools "${SRC}/etcd-${ETCD_VERSION}" "${OUT}" "${ETCD_VERSION} (first time only, ~1 min)" \
  etcd_module -s heatsink.dev/tools/etcd
build_go_tools "${SRC}/kubernetes-${K8S_VERSION}" "${OUT}" "${K8S_VERSION} (first time only; kube-apiserver takes ~6 min on 2 cores)" \
  kube_module "$(kube_ldflags)" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl

# Print the directory for KUBEBUILDER_ASSETS.
echo "${OUT}"
