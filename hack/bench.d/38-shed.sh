#!/usr/bin/env bash
# Shedding at the key: a write-hot counter offered about 5 × its shard's
# declared capacity (split not allowed) through two sidecars (70 % / 30 %
# of the writers) in front of a real redis-server, side by side with the
# same load unshed and with the other keys' readers alone
# (BenchmarkShed, dataplane/sidecar); then the fleet simulation of 1,000
# and 10,000 sidecars' limiters (BenchmarkShedFleet, dataplane/engine).
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"

echo "bench: shedding at the key (about 40 s)" >&2
raw="$(go test -p 1 -run '^$' -bench '^BenchmarkShed(Fleet)?$' -benchtime 1x ./dataplane/sidecar/ ./dataplane/engine/ 2>&1)" || {
  echo "${raw}" >&2
  exit 1
}
echo "${raw}" | grep -E '^(pkg|Benchmark)' >&2

echo "## Shedding at the key"
echo
echo "A counter written by 40 writers at depth 1 (one INCR every 2 ms each, 20,000/s asked; *offered* is what the machine achieved) through two sidecars (28 and 12 writers), \`capacity.perShardWritesPerSecond\` 3,200, split off, \`mitigations.shed\` on with its defaults (budget 80 %: 2,560 INCR/s); 20 readers of 20 other keys of the same real redis-server (one GET every 2 ms each) through the first sidecar. The shed row's tables are the manager's decision (\`decide.Decide\`) for the attempts measured over the last second, republished every second. Peers: *rest* (the readers alone) and *unshed* (the same load without shedding). *key INCR/s* is the counter's own increase over the measured 5 s. Latencies in µs; $(nproc) cores shared with every client."
echo
echo "| case | offered INCR/s | offered ÷ capacity | key INCR/s at Redis | key ÷ budget | refused | refused p50 / p99 | admitted p50 / p99 | other keys p50 / p99 / p99.9 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
echo "${raw}" | awk '
  /^BenchmarkShed\// {
    c = $1; sub(/^BenchmarkShed\//, "", c); sub(/-[0-9]+$/, "", c)
    delete v
    for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
    if (c == "rest") { printf "| rest | | | | | | | | %s / %s / %s |\n", v["p50-us"], v["p99-us"], v["p99.9-us"]; next }
    printf "| %s | %.0f | %.2f | %.0f | %.3f | %.1f %% | %s / %s | %s / %s | %s / %s / %s |\n", c, v["offered/s"], v["offered/capacity"], v["key-INCR/s"], v["key/budget"], 100 * v["refused-fraction"], v["refused-p50-us"], v["refused-p99-us"], v["admitted-p50-us"], v["admitted-p99-us"], v["p50-us"], v["p99-us"], v["p99.9-us"]
  }'
echo
echo "Fleet simulation: the engine's own limiters on one simulated time line, 10 ms steps, 20 report intervals (12 in the benchmark); a key with a budget of 20,000/s offered 100,000/s (Zipf-like over the sidecars, a tenth idle), doubled halfway; 1 % of the busy sidecars restart every interval; the manager publishes the demand one interval late. *bound* is docs/engine.md's (Shedding): budget × max(1, attempts ÷ published demand) + the unmeasured sidecars' minimum + one command per sidecar."
echo
echo "| sidecars | steady admitted ÷ budget | spike interval ÷ budget | worst interval ÷ budget | worst interval ÷ bound |"
echo "|---:|---:|---:|---:|---:|"
echo "${raw}" | awk '
  /^BenchmarkShedFleet\// {
    c = $1; sub(/^BenchmarkShedFleet\/sidecars-/, "", c); sub(/-[0-9]+$/, "", c)
    delete v
    for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
    printf "| %s | %.3f | %.3f | %.3f | %.3f |\n", c, v["steady/budget"], v["spike-interval/budget"], v["worst-interval/budget"], v["worst-interval/bound"]
  }'
echo
