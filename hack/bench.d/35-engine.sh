#!/usr/bin/env bash
# Engine micro-benchmarks: the proxy's per-command Lookup on the
# no-mitigation path (vs a plain Go map), a hot GET answered by the local
# cache or coalesced (vs go-redis straight to a real redis-server), and INCR
# on a split or pre-aggregated counter (vs straight INCR), and the go-redis
# hook on unmitigated keys (vs the same client without it). 50 concurrent
# callers; every row of a group runs in the same `go test` process.
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"

BENCHTIME="${ENGINE_BENCHTIME:-50000x}"
COUNT="${ENGINE_BENCH_COUNT:-3}"
echo "bench: engine benchmarks (-benchtime=${BENCHTIME})" >&2
raw="$(go test -run '^$' -bench '^Benchmark(Lookup|Get|Incr|HookUnmitigatedGet)$' -benchtime="${BENCHTIME}" -count="${COUNT}" ./dataplane/engine/ ./dataplane/redishook/ 2>&1)" || {
  echo "${raw}" >&2
  exit 1
}
echo "${raw}" >&2

echo "## Engine (routing engine, in-process)"
echo
echo "Median of ${COUNT} runs. Lookup runs on one goroutine; the others run 50 concurrent callers (\`b.SetParallelism\`) against a real redis-server on loopback, $(nproc) cores shared with it. The peer of each group is its \`peer-…\` or \`direct-redis\` row; ratio = peer ns/op ÷ row ns/op (above 1 is faster than the peer)."
echo
echo "| benchmark | case | ns/op | ratio vs peer |"
echo "|---|---|---:|---:|"
echo "${raw}" | awk '
  /^Benchmark/ {
    split($1, p, "/"); group = p[1]; sub(/^Benchmark/, "", group)
    c = p[2]; sub(/-[0-9]+$/, "", c)
    id = group "|" c
    if (!(id in cnt)) order[++n] = id
    vals[id, ++cnt[id]] = $3
  }
  function median(id,   k, m, i, j, t, a) {
    m = cnt[id]
    for (i = 1; i <= m; i++) a[i] = vals[id, i] + 0
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return a[int((m + 1) / 2)]
  }
  END {
    for (i = 1; i <= n; i++) {
      split(order[i], r, "|")
      med[order[i]] = median(order[i])
      if (r[2] ~ /^peer-/ || r[2] == "direct-redis") peers[r[1]] = med[order[i]]
    }
    for (i = 1; i <= n; i++) {
      split(order[i], r, "|")
      v = med[order[i]]
      ratio = (v > 0 && peers[r[1]] > 0) ? sprintf("%.2f", peers[r[1]] / v) : "n/a"
      printf "| %s | %s | %s | %s |\n", r[1], r[2], v, ratio
    }
  }'
echo
