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
# Go module proxy is. Debian's containerd (1.6) is too old for kubelet 1.37.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
K8S_VERSION="${K8S_VERSION:-1.37.2}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-2.4.2}"
COREDNS_VERSION="${COREDNS_VERSION:-1.15.0}"
OUT="${ROOT}/bin/cluster/${K8S_VERSION}"
CTRD_OUT="${ROOT}/bin/containerd/${CONTAINERD_VERSION}"
DNS_OUT="${ROOT}/bin/coredns/${COREDNS_VERSION}"
SRC="${ROOT}/bin/.tools-src"

mkdir -p "${OUT}" "${CTRD_OUT}" "${DNS_OUT}" "${SRC}"

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

# Staging modules that k8s.io/kubernetes replaces with ./staging paths; the
# same recipe as hack/setup-envtest.sh.
staging_modules() {
  local mod
  mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v${K8S_VERSION}.mod"
  [[ -f "${mod}" ]] || go mod download "k8s.io/kubernetes@v${K8S_VERSION}" >/dev/null
  sed -n '/^replace (/,/^)/p' "${mod}" | awk '/=>/ {print $1}'
}

build_kube() {
  local dir="${SRC}/cluster-kubernetes-${K8S_VERSION}" staging_version="v0.${K8S_VERSION#1.}"
  local major="${K8S_VERSION%%.*}" minor
  minor="$(echo "${K8S_VERSION}" | cut -d. -f2)"
  mkdir -p "${dir}"
  {
    echo "module heatsink.dev/tools/cluster-kubernetes"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    echo
    echo "replace ("
    staging_modules | while read -r m; do echo "	${m} => ${m} ${staging_version}"; done
    echo ")"
  } >"${dir}/go.mod"
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    for cmd in "$@"; do echo "	_ \"k8s.io/kubernetes/cmd/${cmd}\""; done
    echo ")"
  } >"${dir}/tools.go"
  (cd "${dir}" && GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kube-apiserver@v${K8S_VERSION}" >/dev/null)
  (cd "${dir}" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  local v="k8s.io/component-base/version"
  local ldflags="-s -X ${v}.gitVersion=v${K8S_VERSION} -X ${v}.gitMajor=${major} -X ${v}.gitMinor=${minor} -X ${v}.gitTreeState=clean -X ${v}.buildDate=1970-01-01T00:00:00Z"
  for cmd in "$@"; do
    echo "setup-cluster: building ${cmd} ${K8S_VERSION} (first time only; 2-6 min each on 2 cores)" >&2
    (cd "${dir}" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="${ldflags}" -o "${OUT}/${cmd}.tmp" "k8s.io/kubernetes/cmd/${cmd}")
    mv "${OUT}/${cmd}.tmp" "${OUT}/${cmd}"
  done
}

build_containerd() {
  local dir="${SRC}/containerd-${CONTAINERD_VERSION}"
  mkdir -p "${dir}"
  cat >"${dir}/go.mod" <<MOD
module heatsink.dev/tools/containerd

go 1.26.0
MOD
  cat >"${dir}/tools.go" <<GO
//go:build tools

package tools

import (
$(for cmd in "$@"; do echo "	_ \"github.com/containerd/containerd/v2/cmd/${cmd}\""; done)
)
GO
  (cd "${dir}" && GOFLAGS=-mod=mod go get "github.com/containerd/containerd/v2@v${CONTAINERD_VERSION}" >/dev/null)
  (cd "${dir}" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  local ldflags="-s -X github.com/containerd/containerd/v2/version.Version=v${CONTAINERD_VERSION}"
  for cmd in "$@"; do
    echo "setup-cluster: building ${cmd} ${CONTAINERD_VERSION} (first time only; containerd ~3 min)" >&2
    (cd "${dir}" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="${ldflags}" -o "${CTRD_OUT}/${cmd}.tmp" "github.com/containerd/containerd/v2/cmd/${cmd}")
    mv "${CTRD_OUT}/${cmd}.tmp" "${CTRD_OUT}/${cmd}"
  done
}

# CoreDNS with only the plugins the Corefile of hack/cluster uses: its own
# main (as CoreDNS documents for custom builds) compiles a fraction of the
# full build's dependencies.
build_coredns() {
  local dir="${SRC}/coredns-${COREDNS_VERSION}"
  mkdir -p "${dir}"
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
  echo "setup-cluster: building coredns ${COREDNS_VERSION} (first time only, ~2 min)" >&2
  (cd "${dir}" && GOFLAGS=-mod=mod go get "github.com/coredns/coredns@v${COREDNS_VERSION}" >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 &&
    CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "${DNS_OUT}/coredns.tmp" .)
  mv "${DNS_OUT}/coredns.tmp" "${DNS_OUT}/coredns"
}

[[ -x "${DNS_OUT}/coredns" ]] || build_coredns

missing=()
for b in containerd containerd-shim-runc-v2 ctr; do [[ -x "${CTRD_OUT}/${b}" ]] || missing+=("${b}"); done
((${#missing[@]} == 0)) || build_containerd "${missing[@]}"

missing=()
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do [[ -x "${OUT}/${b}" ]] || missing+=("${b}"); done
((${#missing[@]} == 0)) || build_kube "${missing[@]}"

# etcd and kubectl: envtest's.
"${ROOT}/hack/setup-envtest.sh" >/dev/null
echo "${OUT}"
