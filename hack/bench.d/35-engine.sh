#!/usr/bin/env bash
# Engine micro-benchmarks: the proxy's per-command Lookup on the
# no-mitigation path (vs a plain Go map), a hot GET answered by the local
# cache or coalesced (vs go-redis straight to a real redis-server), and INCR
# on a split or pre-aggregated counter (vs straight INCR). 50 concurrent
# callers; every row of a group runs in the same `go test` process.
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"

BENCHTIME="${ENGINE_BENCHTIME:-50000x}"
echo "bench: engine benchmarks (-benchtime=${BENCHTIME})" >&2
raw="$(go test -run '^$' -bench '^Benchmark(Lookup|Get|Incr)$' -benchtime="${BENCHTIME}" -count=1 ./engine/ 2>&1)" || {
  echo "${raw}" >&2
  exit 1
}
echo "${raw}" >&2

echo "## Engine (routing engine, in-process)"
echo
echo "Lookup runs on one goroutine; Get and Incr run 50 concurrent callers (\`b.SetParallelism\`) against a real redis-server on loopback, $(nproc) cores shared with it. The peer of each group is its \`peer-go-map-miss\` or \`direct-redis\` row; ratio = peer ns/op ÷ row ns/op (above 1 is faster than the peer)."
echo
echo "| benchmark | case | ns/op | ratio vs peer |"
echo "|---|---|---:|---:|"
echo "${raw}" | awk '
  /^Benchmark/ {
    split($1, p, "/"); group = p[1]; sub(/^Benchmark/, "", group)
    c = p[2]; sub(/-[0-9]+$/, "", c)
    ns = $3
    rows[++n] = group "|" c "|" ns
    if (c ~ /^peer-/ || c == "direct-redis") peers[group] = ns
  }
  END {
    for (i = 1; i <= n; i++) {
      split(rows[i], r, "|")
      ratio = (r[3] > 0 && peers[r[1]] > 0) ? sprintf("%.2f", peers[r[1]] / r[3]) : "n/a"
      printf "| %s | %s | %s | %s |\n", r[1], r[2], r[3], ratio
    }
  }'
echo
