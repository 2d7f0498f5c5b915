#!/usr/bin/env bash
# Builds and installs what hack/cluster needs for a one-node Kubernetes on
# this machine, skipping work already done:
#   bin/cluster/<k8s>/   kube-apiserver, kube-controller-manager, kube-scheduler,
#                        kubelet, kube-proxy (built from the Go module proxy,
#                        version-stamped: helm checks the chart's kubeVersion
#                        against the API server's, and envtest's unstamped
#                        kube-apiserver reports v0.0.0)
#   bin/containerd/<v>/  containerd, containerd-shim-runc-v2, ctr
#   bin/coredns/<v>/     coredns with the plugins the cluster's DNS needs only
#   Debian packages      runc, containernetworking-plugins (/usr/lib/cni),
#                        iptables, redis-server and redis-tools (their files go
#                        into the e2e's Redis image)
# etcd and kubectl come from bin/k8s/<k8s>/ (hack/setup-envtest.sh).
#
# Why build: prebuilt downloads are not reachable from our CI machines, the
# Go module proxy is (hack/lib.sh builds, skipping work already done).
# Debian's containerd (1.6) is too old for kubelet 1.37.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"
K8S_VERSION="${K8S_VERSION:-1.37.2}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-2.4.2}"
COREDNS_VERSION="${COREDNS_VERSION:-1.15.0}"
OUT="${ROOT}/bin/cluster/${K8S_VERSION}"
CTRD_OUT="${ROOT}/bin/containerd/${CONTAINERD_VERSION}"
DNS_OUT="${ROOT}/bin/coredns/${COREDNS_VERSION}"
SRC="${ROOT}/bin/.tools-src"

debs=(runc containernetworking-plugins iptables redis-server redis-tools)
missing_debs=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q "install ok installed" || missing_debs+=("${p}")
done
if ((${#missing_debs[@]} > 0)); then
  echo "setup-cluster: installing ${missing_debs[*]} from Debian" >&2
  SUDO=""
  ((EUID == 0)) || SUDO=sudo
  ${SUDO} apt-get update -qq
  DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y -qq --no-install-recommends "${missing_debs[@]}" >/dev/null
fi

containerd_module() {
  local dir="$1"
  shift
  cat >"${dir}/go.mod" <<MOD
module heatsink.dev/tools/containerd

go 1.26.0
MOD
  write_tools_go "${dir}" "$@"
  (cd "${dir}" && GOFLAGS=-mod=mod go get "github.com/containerd/containerd/v2@v${CONTAINERD_VERSION}" >/dev/null)
  (cd "${dir}" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
}

# CoreDNS with only the plugins the Corefile of hack/cluster uses: its own
# main (as CoreDNS documents for custom builds) compiles a fraction of the
# full build's dependencies.
coredns_module() {
  local dir="$1"
  cat >"${dir}/go.mod" <<MOD
module heatsink.dev/tools/coredns

go 1.26.0
MOD
  cat >"${dir}/main.go" <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The directives this build knows, in CoreDNS's execution order.
func init() { dnsserver.Directives = []string{"bind", "ready", "errors", "cache", "kubernetes"} }

func main() { coremain.Run() }
GO
  (cd "${dir}" && GOFLAGS=-mod=mod go get "github.com/coredns/coredns@v${COREDNS_VERSION}" >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1)
}

build_go_tools "${SRC}/coredns-${COREDNS_VERSION}" "${DNS_OUT}" "${COREDNS_VERSION} (first time only, ~2 min)" \
  coredns_module -s heatsink.dev/tools/coredns

ctrd=github.com/containerd/containerd/v2
build_go_tools "${SRC}/containerd-${CONTAINERD_VERSION}" "${CTRD_OUT}" "${CONTAINERD_VERSION} (first time only; containerd ~3 min)" \
  containerd_module "-s -X ${ctrd}/version.Version=v${CONTAINERD_VERSION}" \
  "${ctrd}/cmd/containerd" "${ctrd}/cmd/containerd-shim-runc-v2" "${ctrd}/cmd/ctr"

kube=k8s.io/kubernetes/cmd
build_go_tools "${SRC}/cluster-kubernetes-${K8S_VERSION}" "${OUT}" "${K8S_VERSION} (first time only; 2-6 min each on 2 cores)" \
  kube_module "$(kube_ldflags)" \
  "${kube}/kube-apiserver" "${kube}/kube-controller-manager" "${kube}/kube-scheduler" "${kube}/kubelet" "${kube}/kube-proxy"

# etcd and kubectl: envtest's.
"${ROOT}/hack/setup-envtest.sh" >/dev/null
echo "${OUT}"
