#!/usr/bin/env bash
# What the sidecar adds: direct Redis vs the heatsink sidecar vs twemproxy
# (nutcracker) with redis-benchmark GET on random keys, in the same
# interleaved repeats (target order rotated each repeat):
#  - one client at pipeline depth 1 (closed loop: each command waits for the
#    reply to the one before): the latency the proxy adds, p50 and p99,
#    heatsink - direct and twemproxy - direct, next to the proxy's own
#    measure of it (heatsink_proxy_command_overhead_seconds, scraped around
#    the heatsink run, quantiles of the difference);
#  - 50 clients at depth 1 and 16: throughput over direct, and the added
#    latency.
# Every repeat is a row: the targets hold in every repeat or they do not.
# Placement: each repeat runs pinned (redis-benchmark on CPU 0, the servers on
# the others, as 30-proxy.sh's main table) and unpinned (the scheduler's
# choice), unless PROXY_OVERHEAD_PLACEMENTS says otherwise.
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"

REPEATS="${PROXY_OVERHEAD_REPEATS:-5}"
N1="${PROXY_OVERHEAD_N1:-20000}"    # requests of the one-client run
N50="${PROXY_OVERHEAD_N50:-100000}" # requests of a 50-client run, depth 1
N16="${PROXY_OVERHEAD_N16:-300000}" # requests of a 50-client run, depth 16
PLACEMENTS="${PROXY_OVERHEAD_PLACEMENTS:-pinned unpinned}"
TARGETS=(direct heatsink twemproxy)
work="$(mktemp -d)"
pids=()
trap bench_cleanup EXIT
require_tools redis-server redis-benchmark redis-cli nutcracker python3 taskset
NCPU=$(nproc)
GEN=()
servers=()
place() { # pinned|unpinned
  local cpus="0-$((NCPU - 1))"
  GEN=()
  if [[ "$1" == pinned && ${NCPU} -ge 2 ]]; then
    cpus="1-$((NCPU - 1))"
    GEN=(taskset -c 0)
  fi
  for p in "${servers[@]}"; do taskset -a -pc "${cpus}" "$p" >/dev/null; done
}
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
waitport() {
  for _ in $(seq 1 600); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "bench: port $1 not answering" >&2; return 1
}

echo "bench: building heatsink" >&2
go build -o "${work}/heatsink" ./cmd/heatsink
RPORT=$(freeport)
redis-server --port "${RPORT}" --bind 127.0.0.1 --save '' --appendonly no --daemonize no --dir "${work}" \
  >"${work}/redis.log" 2>&1 &
pids+=($!); servers+=($!)
waitport "${RPORT}"
HPORT=$(freeport); MPORT=$(freeport)
"${work}/heatsink" sidecar --listen "127.0.0.1:${HPORT}" --http-address "127.0.0.1:${MPORT}" \
  --upstream "127.0.0.1:${RPORT}" --routing-file "" >"${work}/heatsink.log" 2>&1 &
pids+=($!); servers+=($!)
waitport "${HPORT}"
TPORT=$(freeport)
twemproxy_conf "${TPORT}" "${RPORT}" >"${work}/nutcracker.yml"
nutcracker -c "${work}/nutcracker.yml" -s "$(freeport)" -o "${work}/nutcracker.log" &
pids+=($!); servers+=($!)
waitport "${TPORT}"
declare -A PORT=([direct]=$RPORT [heatsink]=$HPORT [twemproxy]=$TPORT)

# scrape FILE: the proxy's overhead histogram, "le count" lines.
scrape() {
  python3 - "http://127.0.0.1:${MPORT}/metrics" >"$1" <<'PY'
import sys, urllib.request
for line in urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().splitlines():
    if line.startswith("heatsink_proxy_command_overhead_seconds_bucket"):
        le = line.split('le="')[1].split('"')[0]
        print(le, line.rsplit(" ", 1)[1])
PY
}
# own BEFORE AFTER -> "p50 p99 samples" in ms of the samples between two
# scrapes (linear within a bucket, as Prometheus' histogram_quantile).
own() {
  python3 - "$1" "$2" <<'PY'
import sys
def read(f):
    return [(float("inf") if le == "+Inf" else float(le), float(c)) for le, c in (l.split() for l in open(f))]
a, b = read(sys.argv[1]), read(sys.argv[2])
d = [(le, cb - ca) for (le, ca), (_, cb) in zip(a, b)]
n = d[-1][1]
def q(p):
    if n == 0:
        return float("nan")
    rank, lo, prev = p * n, 0.0, 0.0
    for le, c in d:
        if c >= rank:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * (rank - prev) / max(c - prev, 1e-9)
        lo, prev = le, c
    return lo
print("%.3f %.3f %d" % (q(0.5) * 1e3, q(0.99) * 1e3, n))
PY
}
# run TARGET CLIENTS DEPTH N -> "rps p50 p99"
run() {
  "${GEN[@]}" redis-benchmark -h 127.0.0.1 -p "${PORT[$1]}" -c "$2" -P "$3" -n "$4" -r 1000000 -t get --csv 2>/dev/null |
    awk -F, '/^"/ && !/^"test"/ { gsub(/"/,""); print $2, $5, $7; exit }'
}

# Warm-up: every target serves a first burst (connections, buffers, the
# proxy's upstream connection) before anything is measured.
for target in "${TARGETS[@]}"; do run "${target}" 50 16 20000 >/dev/null; done
load0=$(cut -d' ' -f1 /proc/loadavg)
start=$(date +%s)
declare -A R OWN
CONFIGS=("1 1 ${N1}" "50 1 ${N50}" "50 16 ${N16}")
for placement in ${PLACEMENTS}; do
  place "${placement}"
  order=("${TARGETS[@]}")
  for rep in $(seq 1 "${REPEATS}"); do
    echo "bench: overhead ${placement} repeat ${rep}" >&2
    for cfg in "${CONFIGS[@]}"; do
      read -r clients depth n <<<"${cfg}"
      for target in "${order[@]}"; do
        [[ ${target} == heatsink ]] && scrape "${work}/before"
        R[${placement}/${rep}/${clients}/${depth}/${target}]="$(run "${target}" "${clients}" "${depth}" "${n}")"
        if [[ ${target} == heatsink ]]; then
          scrape "${work}/after"
          OWN[${placement}/${rep}/${clients}/${depth}]="$(own "${work}/before" "${work}/after")"
        fi
      done
    done
    order=("${order[@]:1}" "${order[0]}")
  done
done
secs=$(($(date +%s) - start))
load1=$(cut -d' ' -f1 /proc/loadavg)

sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f %%", 100 * a / b; else print "n/a" }'; }
x() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

echo "## Proxy overhead: what the sidecar adds"
echo
echo "redis-benchmark GET, random keys (-r 1000000); direct Redis, the heatsink sidecar (default settings) and twemproxy (server_connections ${TWEMPROXY_CONNS:-4}) in the same repeats, target order rotated each repeat; ${REPEATS} repeats per placement (${PLACEMENTS}); ${N1} requests with one client, ${N50} with 50 clients at depth 1, ${N16} at depth 16; ${secs} s in all on $(nproc) shared cores (1-minute load average ${load0} before, ${load1} after$(awk -v a="${load0}" -v n="$(nproc)" 'BEGIN { if (a > n) print ": other work shared the CPUs" }')). Pinned: redis-benchmark on CPU 0, the servers on the others; unpinned: the scheduler's choice. Latencies in ms; *added* is the target's percentile minus direct's in the same repeat; *own* is the proxy's own time per sampled command from heatsink_proxy_command_overhead_seconds over the heatsink run (1 in 64 sampled; quantiles interpolated in the histogram's buckets, about ±25 %)."
echo
echo "**One client, depth 1** (closed loop). Target: heatsink's added p50 ≤ 0.8 × twemproxy's."
echo
echo "| placement | repeat | direct p50/p99 | heatsink p50/p99 | twemproxy p50/p99 | heatsink added p50/p99 | twemproxy added p50/p99 | added p50 heatsink / twemproxy | heatsink own p50/p99 (samples) |"
echo "|---|---:|---|---|---|---|---|---:|---|"
ok1=yes; ok50=yes
for placement in ${PLACEMENTS}; do
  for rep in $(seq 1 "${REPEATS}"); do
    k="${placement}/${rep}/1/1"
    read -r _ d50 d99 <<<"${R[$k/direct]}"
    read -r _ h50 h99 <<<"${R[$k/heatsink]}"
    read -r _ t50 t99 <<<"${R[$k/twemproxy]}"
    read -r o50 o99 on <<<"${OWN[$k]}"
    ha=$(sub "$h50" "$d50"); ta=$(sub "$t50" "$d50")
    rt=$(x "$ha" "$ta")
    awk -v r="$rt" 'BEGIN { exit !(r != "n/a" && r <= 0.8) }' || ok1=no
    echo "| ${placement} | ${rep} | ${d50}/${d99} | ${h50}/${h99} | ${t50}/${t99} | ${ha}/$(sub "$h99" "$d99") | ${ta}/$(sub "$t99" "$d99") | ${rt} | ${o50}/${o99} (${on}) |"
  done
done
echo
echo "**50 clients.** Target: heatsink / direct ≥ 95 % at depth 1 and ≥ 80 % at depth 16, in every repeat."
echo
echo "| placement | repeat | depth | direct ops/s | heatsink / direct | twemproxy / direct | direct p50/p99 | heatsink added p50/p99 | twemproxy added p50/p99 | heatsink own p50/p99 |"
echo "|---|---:|---:|---:|---:|---:|---|---|---|---|"
for placement in ${PLACEMENTS}; do
  for rep in $(seq 1 "${REPEATS}"); do
    for depth in 1 16; do
      k="${placement}/${rep}/50/${depth}"
      read -r dr d50 d99 <<<"${R[$k/direct]}"
      read -r hr h50 h99 <<<"${R[$k/heatsink]}"
      read -r tr t50 t99 <<<"${R[$k/twemproxy]}"
      read -r o50 o99 _ <<<"${OWN[$k]}"
      want=0.95; [[ ${depth} == 16 ]] && want=0.80
      awk -v a="$hr" -v b="$dr" -v w="$want" 'BEGIN { exit !(b > 0 && a / b >= w) }' || ok50=no
      echo "| ${placement} | ${rep} | ${depth} | ${dr} | $(pct "$hr" "$dr") | $(pct "$tr" "$dr") | ${d50}/${d99} | $(sub "$h50" "$d50")/$(sub "$h99" "$d99") | $(sub "$t50" "$d50")/$(sub "$t99" "$d99") | ${o50}/${o99} |"
    done
  done
done
echo
echo "Targets in every repeat: one client, added p50 ≤ 0.8 × twemproxy's: **$([[ ${ok1} == yes ]] && echo met || echo not met)**; 50 clients, ≥ 95 % of direct at depth 1 and ≥ 80 % at depth 16: **$([[ ${ok50} == yes ]] && echo met || echo not met)**."
echo
