#!/usr/bin/env bash
# Shedding at the key: a hot key written by SUNIONSTORE (about 1 ms of
# the server's main thread each, so the shard really saturates) asked 5 ×
# its shard's learned capacity (split not allowed) through two sidecars
# (70 % / 30 % of the writers) in front of a real redis-server, side by
# side with the readers of other keys alone, the writers asking only the
# budget, the same load unshed, and shed at the default budget (80 %) and
# at 50 %, interleaved over 2 rounds (BenchmarkShed, dataplane/sidecar).
# The fleet simulation of 1,000 and 10,000 sidecars' limiters
# (BenchmarkShedFleet) is 50-fleet.sh's.
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"

echo "bench: shedding at the key (about 2 min)" >&2
raw="$(go test -p 1 -run '^$' -bench '^BenchmarkShed$' -benchtime 1x ./dataplane/sidecar/ 2>&1)" || {
  echo "${raw}" >&2
  exit 1
}
echo "${raw}" | grep -E '^(pkg|Benchmark)' >&2

echo "## Shedding at the key"
echo
echo "A set written by 40 writers at depth 1 with \`SUNIONSTORE hot:set src:set\` (3,000 members: about 1 ms of the server's one main thread each), asking 5 × the shard's capacity, through two sidecars (28 and 12 writers); the capacity is learned in the run as the manager learns it (calls per CPU-second of the server, \`controllers/capacity\`) and declared as \`capacity.perShardWritesPerSecond\`, split off, \`mitigations.shed\` on (budget 80 % by default, 50 % in *shed-50*); 20 readers of 20 other keys of the same real redis-server (one GET every 5 ms each) through the first sidecar. Rows interleaved over 2 rounds: *rest* (the readers alone), *budget* (the writers ask only the default budget, nothing shed: the shard takes exactly what shedding admits), *unshed* (5 × the capacity, nothing shed), *shed*, *shed-50*. The shed rows' tables are the manager's decision (\`decide.Decide\`) for the attempts measured over the last second, republished every second. *key writes/s* is the server's own count (INFO commandstats) over the measured 5 s. Latencies in µs; *cores*: CPU over the measured 5 s of this process (clients and both sidecars) / redis-server / the rest of the machine (other work); $(nproc) cores."
echo
echo "${raw}" | awk '/^BenchmarkShed\/budget/ { for (i = 3; i < NF; i += 2) if ($(i+1) == "capacity/s") c = $i; else if ($(i+1) == "budget/s") b = $i } END { printf "Learned capacity %.0f writes/s, default budget %.0f/s.\n\n", c, b }'
echo "| case | offered ÷ capacity | key writes/s at Redis | key ÷ budget | refused | refused p50 / p99 | admitted p50 / p99 | other keys p50 / p99 / p99.9 | cores: process / redis / others |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
echo "${raw}" | awk '
  /^BenchmarkShed\// {
    c = $1; sub(/^BenchmarkShed\//, "", c); sub(/-[0-9]+$/, "", c); sub(/\/round-/, " (round ", c); c = c ")"
    delete v
    for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
    cores = sprintf("%.2f / %.2f / %.2f", v["proc-cores"], v["redis-cores"], v["others-cores"])
    if (c ~ /^rest/) { printf "| %s | | | | | | | %s / %s / %s | %s |\n", c, v["p50-us"], v["p99-us"], v["p99.9-us"], cores; next }
    printf "| %s | %.2f | %.0f | %.3f | %.1f %% | %s / %s | %s / %s | %s / %s / %s | %s |\n", c, v["offered/capacity"], v["key-writes/s"], v["key/budget"], 100 * v["refused-fraction"], v["refused-p50-us"], v["refused-p99-us"], v["admitted-p50-us"], v["admitted-p99-us"], v["p50-us"], v["p99-us"], v["p99.9-us"], cores
  }'
echo
echo "The fleet simulation of 1,000 and 10,000 sidecars' limiters is in the fleet section (\`hack/bench.d/50-fleet.sh\`)."
echo
