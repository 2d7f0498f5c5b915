#!/usr/bin/env bash
# The node agent's packet capture (pods without a sidecar, docs/capture.md):
# redis-benchmark SET+GET from a client network namespace to redis-server
# in another, through an observer namespace where bench/capturebench runs
# the capture on every interface. Per round, the same load with the capture
# off and on: client throughput either way (ratio), and the capturing
# process's CPU per 100,000 observed commands/s (getrusage; target ≤ 5 % of
# one core). At pipeline depth 1 (a packet per command, the worst case) and
# 16, on 100,000 random keys (and at depth 1 counted as for a Redis Cluster target) (most keys new in each 100 ms interval: the
# aggregation's worst case) and on 1,000. Then the reaction: a key from cold
# to 1.5 × its threshold, sent by a pod without the sidecar (captured) and
# through a sidecar at the same instant, timed to the manager's view over the
# threshold; again with 1-in-4 sampling (what sampling does to detection).
# And the CPU of following replies (headers of the replies of 1 connection
# in 8 by default) beside not following them, at pipeline 1 and 16.
# Needs root and iproute2 (network namespaces); otherwise says so.
#
# CAPTURE_BENCH_FLAGS passes flags to capturebench (e.g. "-rounds 5 -sample 4").
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
if [[ "$(id -u)" != 0 ]] || ! command -v ip >/dev/null || ! command -v redis-benchmark >/dev/null; then
  echo "### Packet capture (node agent, pods without a sidecar)"
  echo
  echo "Not measured: needs root, iproute2 and redis-benchmark (network namespaces)."
  echo
  exit 0
fi
echo "bench: capture: building capturebench" >&2
(cd bench && go build -o "${tmp}/capturebench" ./capturebench)
# shellcheck disable=SC2086
"${tmp}/capturebench" -n 100000 -P 1 -r 100000 ${CAPTURE_BENCH_FLAGS:-}
# The same, counted as for a Redis Cluster target (the slot of every command looked up).
# shellcheck disable=SC2086
"${tmp}/capturebench" -n 100000 -P 1 -r 100000 -cluster ${CAPTURE_BENCH_FLAGS:-} | sed 1,2d
# shellcheck disable=SC2086
"${tmp}/capturebench" -n 400000 -P 16 -r 100000 ${CAPTURE_BENCH_FLAGS:-} | sed 1,2d
# shellcheck disable=SC2086
"${tmp}/capturebench" -n 400000 -P 16 -r 1000 ${CAPTURE_BENCH_FLAGS:-} | sed 1,2d
# Following replies (big keys by read size): the capture with replies off,
# at the default reply sampling and on every connection, side by side, at
# pipeline 1 and 16.
# shellcheck disable=SC2086
"${tmp}/capturebench" -replies -n 100000 -P 1 -r 100000 ${CAPTURE_BENCH_FLAGS:-}
# shellcheck disable=SC2086
"${tmp}/capturebench" -replies -n 400000 -P 16 -r 100000 ${CAPTURE_BENCH_FLAGS:-}
# The reaction, captured and through a sidecar side by side; then sampled.
# shellcheck disable=SC2086
"${tmp}/capturebench" ${CAPTURE_BENCH_FLAGS:-} -rounds 0 -reaction 5
# shellcheck disable=SC2086
"${tmp}/capturebench" ${CAPTURE_BENCH_FLAGS:-} -rounds 0 -reaction 8 -sample 4
