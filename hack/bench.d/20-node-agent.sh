#!/usr/bin/env bash
# Node agent benchmarks: the heavy-hitter sketch side by side with an exact map,
# go-kratos/aegis HeavyKeeper and BoomFilters' Count-Min top-K on one Zipf(1.0)
# stream (bench/nodeagentbench, a separate module holding the comparison-only
# dependencies), the memory-budget curve, a flood of unique keys, ingest
# (decode + filter + sketch) throughput, and the reaction time of a real
# node agent writing to a real API server. One-core numbers: GOMAXPROCS=1.
#
# NODE_AGENT_BENCH_FLAGS passes flags to nodeagentbench (e.g. "-n 1000000 -reaction 2").
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

echo "bench: node agent: building nodeagentbench" >&2
(cd bench && go build -o "${tmp}/nodeagentbench" ./nodeagentbench)
# shellcheck disable=SC2086
GOMAXPROCS=1 "${tmp}/nodeagentbench" ${NODE_AGENT_BENCH_FLAGS:-}

echo "bench: node agent: ingest" >&2
go test -run '^$' -bench '^BenchmarkIngest$' -benchtime 30000x -count 3 -cpu 1 ./nodeagent/ >"${tmp}/ingest.txt"
echo "### Ingest: decode + key filter + sketch (+ top keys by size)"
echo
echo "Batches of 100 entries of the same Zipf(1.0) stream over 1M keys, as sidecars send them (\`go test -bench BenchmarkIngest -cpu 1 ./nodeagent\`, 3 runs each): \`sized\` entries carry an access size (64 B to 4 KiB), so the top-N by size is kept too; \`unsized\` ones (version 1 batches) skip it. Target ≥ 1 M obs/s on one core."
echo
echo "| batches | run | M obs per CPU-second | M obs per wall second | allocs/op |"
echo "|---|---:|---:|---:|---:|"
awk '/^BenchmarkIngest/ {
  cpu=""; wall=""; allocs=""; v=$1; sub(/^BenchmarkIngest\//, "", v); sub(/-[0-9]+$/, "", v);
  for (i = 1; i <= NF; i++) {
    if ($i == "Mobs/cpu-s") cpu = $(i-1);
    if ($i == "Mobs/s") wall = $(i-1);
    if ($i == "allocs/op") allocs = $(i-1);
  }
  n[v]++; printf "| %s | %d | %s | %s | %s |\n", v, n[v], cpu, wall, allocs
}' "${tmp}/ingest.txt"
echo
