# shellcheck shell=bash
# Sourced by the hack/setup-*.sh scripts that build their tools from the Go
# module proxy (prebuilt downloads are not reachable from our CI machines,
# the module proxy is). Each tool is built in a throwaway module under
# bin/.tools-src (git-ignored), so it never touches the product's go.mod.

# build_go_tools DIR OUTDIR NOTE SETUP LDFLAGS PKG...
#
# Builds each main package PKG (an import path; a main.go at DIR's root is
# the module's own path) into OUTDIR/<last element of PKG>, skipping those
# already there: when none is missing it returns at once, without touching
# the network or the compiler, so a warm machine pays nothing. Otherwise it
# creates DIR and calls SETUP DIR PKG... with the missing packages, which
# writes the module (go.mod, a tools.go or main.go) and resolves it (go get,
# go mod tidy); then it builds each missing package with CGO off, -trimpath
# and LDFLAGS, into a .tmp file moved into place, so an interrupted build
# never leaves a tool that looks built. NOTE follows the tool's name in the
# progress line: its version and how long the first build takes.
build_go_tools() {
  local dir="$1" outdir="$2" note="$3" setup="$4" ldflags="$5"
  shift 5
  local self="${0##*/}" pkg missing=()
  for pkg in "$@"; do
    [[ -x "${outdir}/${pkg##*/}" ]] || missing+=("${pkg}")
  done
  ((${#missing[@]} > 0)) || return 0
  mkdir -p "${dir}" "${outdir}"
  "${setup}" "${dir}" "${missing[@]}"
  for pkg in "${missing[@]}"; do
    echo "${self%.sh}: building ${pkg##*/} ${note}" >&2
    (cd "${dir}" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="${ldflags}" -o "${outdir}/${pkg##*/}.tmp" "${pkg}")
    mv "${outdir}/${pkg##*/}.tmp" "${outdir}/${pkg##*/}"
  done
}

# write_tools_go DIR PKG... makes the module at DIR require the packages, by
# importing them from a file only the "tools" build tag compiles.
write_tools_go() {
  local dir="$1" pkg
  shift
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    for pkg in "$@"; do echo "	_ \"${pkg}\""; done
    echo ")"
  } >"${dir}/tools.go"
}

# Kubernetes binaries (hack/setup-envtest.sh and hack/setup-cluster.sh), at
# K8S_VERSION.

# kube_staging_modules lists the staging modules that k8s.io/kubernetes
# replaces with ./staging paths. A module outside that tree cannot follow
# those replaces, so kube_module points each one at its published v0.x tag.
kube_staging_modules() {
  local mod
  mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v${K8S_VERSION}.mod"
  [[ -f "${mod}" ]] || go mod download "k8s.io/kubernetes@v${K8S_VERSION}" >/dev/null
  sed -n '/^replace (/,/^)/p' "${mod}" | awk '/=>/ {print $1}'
}

# kube_module DIR PKG... is build_go_tools' SETUP for k8s.io/kubernetes
# commands. go mod tidy may fail on test-only dependencies of the staging
# modules; what the build needs is resolved, and go build reports the rest.
kube_module() {
  local dir="$1" staging_version="v0.${K8S_VERSION#1.}" m
  shift
  {
    echo "module heatsink.dev/tools/kubernetes"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    echo
    echo "replace ("
    kube_staging_modules | while read -r m; do echo "	${m} => ${m} ${staging_version}"; done
    echo ")"
  } >"${dir}/go.mod"
  write_tools_go "${dir}" "$@"
  (cd "${dir}" && GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kube-apiserver@v${K8S_VERSION}" >/dev/null)
  (cd "${dir}" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
}

# kube_ldflags stamps the version as Kubernetes' own build does: without it
# the API server reports v0.0.0-master, and clients that check the server's
# version (helm install of a chart with kubeVersion) refuse it.
kube_ldflags() {
  local major="${K8S_VERSION%%.*}" minor pkg flags="-s"
  minor="$(echo "${K8S_VERSION}" | cut -d. -f2)"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${pkg}.gitVersion=v${K8S_VERSION} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    flags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  echo "${flags}"
}

# twemproxy_conf LISTEN_PORT REDIS_PORT: nutcracker's configuration for the
# benchmarks' peer, in front of one Redis. server_connections lets it
# pipeline to Redis over several connections; a spot check of 1, 2 and 4 on a
# 2-core machine had 4 best or equal (depth 16 gains most), so it gets 4
# (TWEMPROXY_CONNS overrides).
twemproxy_conf() {
  cat <<YML
bench:
  listen: 127.0.0.1:$1
  hash: fnv1a_64
  distribution: ketama
  redis: true
  server_connections: ${TWEMPROXY_CONNS:-4}
  auto_eject_hosts: false
  timeout: 5000
  servers:
   - 127.0.0.1:$2:1
YML
}

# require_tools TOOL...: exits with a message naming the first tool missing.
require_tools() {
  local b
  for b in "$@"; do
    command -v "$b" >/dev/null || { echo "bench: $b not installed" >&2; exit 1; }
  done
}

# bench_cleanup: a benchmark's EXIT trap: stops the processes it started
# (the caller's pids array) and removes its work folder (${work}).
bench_cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "${work}"
}
