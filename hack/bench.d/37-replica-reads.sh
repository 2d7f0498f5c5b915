#!/usr/bin/env bash
# Replica reads (mitigations.replicaReads): a read-hot key at twice its
# master's declared capacity on a real 3-master Redis Cluster with 2 replicas
# per master, through the routing engine, side by side with the same
# workload without the move (bench/replicabench): each node's share of the
# key's reads, busiest node ÷ mean, read latency, and the staleness after a
# write (p50/p99 until every replica answers the new value).
#
# REPLICA_BENCH_FLAGS passes flags to replicabench (e.g. "-duration 20s -repeats 5").
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

echo "bench: replica reads: building replicabench" >&2
(cd bench && go build -o "${tmp}/replicabench" ./replicabench)
# shellcheck disable=SC2086
"${tmp}/replicabench" ${REPLICA_BENCH_FLAGS:-}
