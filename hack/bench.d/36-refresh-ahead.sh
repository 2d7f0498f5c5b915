#!/usr/bin/env bash
# Refresh ahead of expiry: what a cached hot key's expiries cost its readers,
# 50 readers at depth 1 (one GET every 2 ms each) over 100 expiries of a
# 100 ms TTL against a real redis-server, with refresh off, at the default
# refreshAheadPercent 10 and at 50 (the ceilings of the window the engine
# measures per key), at the policy's defaults (refreshAheadPercent 10 and
# jitterPercent 10), next to the same load on a key that never
# expires (every read a cache hit). Two paths, each one `go test` process
# (BenchmarkRefreshAhead): through one sidecar (dataplane/sidecar: 50 client
# connections) and in process through the go-redis hook (dataplane/redishook:
# one client, a hit costs no network). The rows of a path run one after
# another on the same server. Prints one Markdown section to stdout;
# progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"

echo "bench: refresh ahead of expiry (about 2 minutes)" >&2
raw="$(go test -p 1 -run '^$' -bench '^BenchmarkRefreshAhead$' -benchtime 1x ./dataplane/sidecar/ ./dataplane/redishook/ 2>&1)" || {
  echo "${raw}" >&2
  exit 1
}
echo "${raw}" | grep -E '^(pkg|Benchmark)' >&2

echo "## Refresh ahead of expiry (local cache)"
echo
echo "One hot key read by 50 readers at depth 1 (one GET every 2 ms each: 25,000 GET/s) for 100 TTLs of 100 ms with jitter 0 (but in \`refresh-10-jitter-10\`: the policy's defaults, refreshAheadPercent 10 and jitterPercent 10), so 100 expiries; a real redis-server on loopback, $(nproc) cores shared with the readers. *sidecar*: 50 client connections to one sidecar; *hook*: one go-redis client with the hook, in process. Peer: \`no-expiry\`, the same load on a key cached for 1 h (every read a cache hit). Latencies are the readers' (µs). *Waited* counts the reads that found no fresh cached value and waited for Redis (the engine's \`heatsink_engine_cache_misses_total\`, exact); upstream GETs are Redis' own count (\`INFO commandstats\`)."
echo
echo "| path | case | p50 | p99 | p99.9 | max | slowest read of a TTL, median | reads waited / TTL | upstream GETs / TTL | refreshes / TTL |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
echo "${raw}" | awk '
  /^pkg: / { path = ($2 ~ /redishook$/) ? "hook" : "sidecar" }
  /^BenchmarkRefreshAhead\// {
    c = $1; sub(/^BenchmarkRefreshAhead\//, "", c); sub(/-[0-9]+$/, "", c)
    delete v
    for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", path, c, v["p50-us"], v["p99-us"], v["p99.9-us"], v["max-us"], v["period-max-p50-us"], v["waited/TTL"], v["upstream-GETs/TTL"], v["refreshes/TTL"]
  }'
echo
