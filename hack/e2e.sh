#!/usr/bin/env bash
# make e2e: heatsink installed as users do, into a real one-node Kubernetes
# on this machine (hack/cluster), with real pods from images built here.
#   1. builds: cluster binaries (hack/setup-cluster.sh), helm, the heatsink
#      image (make image), the e2e's Redis and workload images, the test
#   2. hack/cluster up, images imported into containerd
#   3. test/e2e runs inside the cluster's network namespace
#   4. hack/cluster down, and the host's state compared with before
# Each phase's time is printed; the test's report is in out/e2e/report.md.
# E2E_KEEP_CLUSTER=1 leaves the cluster up after the test (for debugging;
# `hack/cluster down` removes it).
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
OUT="${ROOT}/out/e2e"
IMAGES="${ROOT}/out/images"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-2.4.2}"
K8S_VERSION="${K8S_VERSION:-1.37.2}"
DIR="${HEATSINK_CLUSTER_DIR:-/tmp/heatsink-cluster}"
REDIS_IMAGE=localhost/heatsink-e2e/redis:1
WORKLOAD_IMAGE=localhost/heatsink-e2e/workload:1
mkdir -p "${OUT}" "${IMAGES}"

declare -a timings=()
phase() { # name command...
  local name="$1" t0=${SECONDS}
  shift
  echo "e2e: ${name}" >&2
  "$@"
  timings+=("$(printf '%-58s %4ds' "${name}" $((SECONDS - t0)))")
}
summary() {
  echo "e2e: phases" >&2
  printf '  %s\n' "${timings[@]}" >&2
}

e2e_images() {
  CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "${IMAGES}/workload" ./test/e2e/workload
  go run ./images/heatsink-image app --binary "${IMAGES}/workload" --title workload \
    --tag "${WORKLOAD_IMAGE}" --out "${IMAGES}/workload.tar"
  go run ./images/heatsink-image redis --tag "${REDIS_IMAGE}" --out "${IMAGES}/redis.tar"
}

# A cluster left by an interrupted run is removed first: a run starts clean.
if [[ -e "${DIR}" ]]; then
  echo "e2e: removing a cluster left at ${DIR}" >&2
  hack/cluster down
fi
hack/cluster host-state >"${OUT}/host-before.txt"

phase "build: kubelet, containerd, CoreDNS... (hack/setup-cluster.sh)" hack/setup-cluster.sh
phase "build: helm" make -s helm
phase "build: heatsink image (make image)" make -s image
phase "build: e2e images (Redis, workload)" e2e_images
# The previous release (release.yaml's previous.commit), built from a git
# worktree of its commit: the upgrade scenario installs it, then upgrades.
previous_release() {
  local commit tag
  commit=$(sed -n 's/^  commit: *\([0-9a-f]*\).*/\1/p' release.yaml)
  tag=$(sed -n 's/^  version: *v\{0,1\}\([^ #]*\).*/\1/p' release.yaml)
  rm -rf "${OUT}/previous"
  git worktree prune
  git worktree add --detach "${OUT}/previous" "${commit}" >&2
  make -s -C "${OUT}/previous" image IMAGE_VERSION="${tag}" IMG="ghcr.io/heatsink-dev/heatsink:${tag}" \
    IMAGE_DIR="${IMAGES}/previous"
  # The image and the chart are all the scenario needs: a worktree left
  # in the tree would be read as part of it (test/repo's checks).
  rm -rf "${OUT}/previous-chart"
  cp -r "${OUT}/previous/charts/heatsink" "${OUT}/previous-chart"
  git worktree remove --force "${OUT}/previous"
  PREVIOUS_TAG="${tag}"
}
phase "build: the previous release's image (release.yaml)" previous_release
phase "build: the e2e test" go test -c -tags e2e -o "${OUT}/e2e.test" ./test/e2e

cleanup() {
  local rc=$?
  if [[ -z "${E2E_KEEP_CLUSTER:-}" ]]; then
    phase "hack/cluster down" hack/cluster down || rc=1
    hack/cluster host-state >"${OUT}/host-after.txt"
    if ! diff -u "${OUT}/host-before.txt" "${OUT}/host-after.txt" >"${OUT}/host-diff.txt"; then
      echo "e2e: the host's state changed:" >&2
      cat "${OUT}/host-diff.txt" >&2
      rc=1
    else
      echo "e2e: host state as before (sysctls, links, routes, iptables, mounts, netns, cgroups, paths)" >&2
    fi
  fi
  summary
  exit "${rc}"
}
trap cleanup EXIT

phase "hack/cluster up" env HEATSINK_CLUSTER_SKIP_SETUP=1 hack/cluster up
phase "images imported into containerd" hack/cluster load "${IMAGES}/heatsink.tar" "${IMAGES}/redis.tar" "${IMAGES}/workload.tar" \
  "${IMAGES}/previous/heatsink.tar"
phase "test/e2e (helm, then kustomize)" hack/cluster exec env \
  E2E_ROOT="${ROOT}" E2E_OUT="${OUT}" HELM_BIN="${HELM_BIN:-$(ls -d "${ROOT}"/bin/helm-v* | sort | tail -1)}" \
  E2E_CTR="${ROOT}/bin/containerd/${CONTAINERD_VERSION}/ctr" E2E_CTR_ADDRESS="${DIR}/containerd/containerd.sock" \
  E2E_REDIS_IMAGE="${REDIS_IMAGE}" E2E_WORKLOAD_IMAGE="${WORKLOAD_IMAGE}" \
  E2E_PREVIOUS_CHART="${OUT}/previous-chart" E2E_PREVIOUS_IMAGE_TAG="${PREVIOUS_TAG}" \
  "${OUT}/e2e.test" -test.v -test.timeout 70m
