#!/usr/bin/env bash
# Proxy throughput: direct Redis vs the heatsink proxy vs twemproxy
# (nutcracker), side by side in one run, with redis-benchmark (50 clients,
# GET/SET/INCR, pipeline depth 1 and 16), plus the one-upstream-command-per-
# client-command check on random keys (INFO commandstats).
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"

REQUESTS="${PROXY_BENCH_REQUESTS:-200000}"
CLIENTS=50
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "${work}"
}
trap cleanup EXIT

for b in redis-server redis-benchmark redis-cli nutcracker; do
  command -v "$b" >/dev/null || { echo "bench: $b not installed" >&2; exit 1; }
done

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
waitport() { for _ in $(seq 1 100); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "bench: port $1 not answering" >&2; return 1; }

echo "bench: building heatsink" >&2
go build -o "${work}/heatsink" ./cmd/heatsink

RPORT=$(freeport)
redis-server --port "${RPORT}" --bind 127.0.0.1 --save '' --appendonly no --daemonize no --dir "${work}" >"${work}/redis.log" 2>&1 &
pids+=($!)
waitport "${RPORT}"

HPORT=$(freeport)
HEATSINK_HTTP_ADDRESS="127.0.0.1:$(freeport)" "${work}/heatsink" proxy --listen "127.0.0.1:${HPORT}" --upstream "127.0.0.1:${RPORT}" \
  --routing-file "" >"${work}/heatsink.log" 2>&1 &
pids+=($!)
waitport "${HPORT}"

TPORT=$(freeport)
# twemproxy: server_connections is what lets it pipeline to Redis over
# several connections; 2 matches the 2 cores (more only adds contention
# here, where Redis, the load generator and the proxy share them).
cat >"${work}/nutcracker.yml" <<YML
bench:
  listen: 127.0.0.1:${TPORT}
  hash: fnv1a_64
  distribution: ketama
  redis: true
  server_connections: 2
  auto_eject_hosts: false
  timeout: 5000
  servers:
   - 127.0.0.1:${RPORT}:1
YML
nutcracker -c "${work}/nutcracker.yml" -s "$(freeport)" -o "${work}/nutcracker.log" &
pids+=($!)
waitport "${TPORT}"

# run PORT PIPELINE -> lines "TEST rps p50 p99" for GET, SET, INCR
run() {
  redis-benchmark -h 127.0.0.1 -p "$1" -c "${CLIENTS}" -n "${REQUESTS}" -P "$2" -r 1000000 -t get,set,incr --csv 2>/dev/null |
    awk -F, 'NR>1 { gsub(/"/,""); print $1, $2, $5, $7 }'
}

declare -A R
for depth in 1 16; do
  for target in direct heatsink twemproxy; do
    case $target in direct) port=$RPORT;; heatsink) port=$HPORT;; twemproxy) port=$TPORT;; esac
    echo "bench: ${target} -P ${depth}" >&2
    while read -r test rps p50 p99; do
      R["$target/$depth/$test"]="$rps $p50 $p99"
    done < <(run "$port" "$depth")
  done
done

# Exactly one upstream command per client command on random keys.
redis-cli -p "${RPORT}" CONFIG RESETSTAT >/dev/null
N=100000
redis-benchmark -h 127.0.0.1 -p "${HPORT}" -c "${CLIENTS}" -n "${N}" -P 16 -r 1000000 -t get >/dev/null 2>&1
upstream_gets=$(redis-cli -p "${RPORT}" INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_get:/ {print $3}')
total_cmds=$(redis-cli -p "${RPORT}" INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_/ && !/cmdstat_(info|config)/ {s+=$3} END {print s}')

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f %%", 100*a/b; else print "n/a" }'; }

echo "## Proxy: direct Redis vs heatsink proxy vs twemproxy"
echo
echo "redis-benchmark, ${CLIENTS} clients, ${REQUESTS} requests per row, random keys (-r 1000000), one run, same machine ($(nproc) cores shared by Redis, the proxy and the load generator). Latencies in ms. twemproxy: nutcracker with server_connections 2."
echo
echo "| test | depth | direct ops/s | heatsink ops/s | twemproxy ops/s | heatsink / direct | twemproxy / direct | direct p50/p99 | heatsink p50/p99 | twemproxy p50/p99 |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for depth in 1 16; do
  for test in GET SET INCR; do
    read -r dr dp50 dp99 <<<"${R[direct/$depth/$test]:-0 - -}"
    read -r hr hp50 hp99 <<<"${R[heatsink/$depth/$test]:-0 - -}"
    read -r tr tp50 tp99 <<<"${R[twemproxy/$depth/$test]:-0 - -}"
    echo "| ${test} | ${depth} | ${dr} | ${hr} | ${tr} | $(ratio "$hr" "$dr") | $(ratio "$tr" "$dr") | ${dp50}/${dp99} | ${hp50}/${hp99} | ${tp50}/${tp99} |"
  done
done
echo
echo "Targets: heatsink / direct ≥ 90 % at depth 1 and ≥ 60 % at depth 16, ahead of twemproxy in every row."
echo
echo "Upstream commands for ${N} client GETs on random keys through the proxy (INFO commandstats): GET ${upstream_gets:-0}, all commands ${total_cmds:-0} (want exactly ${N})."
echo
