#!/usr/bin/env bash
# Resident memory of the heatsink sidecar (the sidecar) under the loads that
# used to make it grow without bound: 1,000 clients × 10k-deep pipelines,
# 100 clients that never read replies of 4 KB values, 5,000 idle
# connections, 8 clients reading a 64 MiB value at once, a 2M-distinct-key
# flood (with node agent reports on, so their
# aggregation is counted too). Once with the event loop (the default) and
# once with sessions only (--event-loop=false). The load generator is
# bench/proxyrss; RSS is read from /proc/<pid>/status every 20 ms.
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"

work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "${work}"
}
trap cleanup EXIT
for b in redis-server redis-cli python3; do
  command -v "$b" >/dev/null || { echo "bench: $b not installed" >&2; exit 1; }
done
# 5,000 client connections need as many descriptors, plus the proxy's own.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [[ "$(ulimit -n)" != unlimited && "$(ulimit -n)" -lt 12000 ]]; then
  echo "bench: ulimit -n is $(ulimit -n); the idle-connection row needs 12000" >&2
fi

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
waitport() {
  for _ in $(seq 1 600); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "bench: port $1 not answering" >&2; return 1
}

echo "bench: building heatsink and proxyrss" >&2
go build -o "${work}/heatsink" ./cmd/heatsink
(cd bench && go build -o "${work}/proxyrss" ./proxyrss)

RPORT=$(freeport)
redis-server --port "${RPORT}" --bind 127.0.0.1 --save '' --appendonly no --daemonize no --dir "${work}" \
  --maxclients 20000 >"${work}/redis.log" 2>&1 &
pids+=($!)
waitport "${RPORT}"

echo "## Proxy memory (RSS)"
echo
echo "Resident memory of \`heatsink sidecar\` (default settings, memory ceiling included; reports to a node agent address on) under each load, sampled every 20 ms. \"After\" is the lowest RSS within 10 s of the load's connections closing. Load generator: \`bench/proxyrss\`."
echo
for mode in loop sessions; do
  HPORT=$(freeport)
  flags=()
  [[ "${mode}" == sessions ]] && flags+=(--event-loop=false)
  "${work}/heatsink" sidecar --listen "127.0.0.1:${HPORT}" --http-address "127.0.0.1:$(freeport)" \
    --upstream "127.0.0.1:${RPORT}" --routing-file "" --node-agent "127.0.0.1:$(freeport)" "${flags[@]}" \
    >"${work}/proxy-${mode}.log" 2>&1 &
  ppid=$!
  pids+=("${ppid}")
  waitport "${HPORT}"
  echo "bench: proxy RSS, ${mode}" >&2
  if [[ "${mode}" == loop ]]; then
    echo "**Event loop** (the default):"
  else
    echo "**Sessions only** (\`--event-loop=false\`):"
  fi
  echo
  "${work}/proxyrss" -addr "127.0.0.1:${HPORT}" -pid "${ppid}" -redis "127.0.0.1:${RPORT}" ${PROXY_RSS_FLAGS:-}
  echo
  if ! kill -0 "${ppid}" 2>/dev/null; then
    echo "> the proxy exited during the run:"; echo; echo '```'; tail -5 "${work}/proxy-${mode}.log"; echo '```'; echo
  fi
  kill "${ppid}" 2>/dev/null || true
  wait "${ppid}" 2>/dev/null || true
  redis-cli -p "${RPORT}" FLUSHALL >/dev/null
done
