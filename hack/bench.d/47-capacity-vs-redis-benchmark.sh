#!/usr/bin/env bash
# What the learned capacity means (issue 26): the manager learns a master's
# capacity as commands per main-thread CPU-second (INFO stats and cpu, see
# docs/manager.md). That number depends on how the clients load the server,
# not only on the command mix: at low concurrency each command pays an event
# loop wake-up that a busy loop shares among many. One redis-server on a
# loopback port, `GET` from redis-benchmark at 1, 4 and 50 connections and at
# 50 connections pipelined 16 deep, each step read as the manager reads it
# (Δ total_commands_processed ÷ Δ main-thread CPU). Prints one Markdown section
# to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
work="$(mktemp -d)"
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT="$(freeport)"
redis-server --port "${PORT}" --bind 127.0.0.1 --save '' --appendonly no >"${work}/redis.log" 2>&1 &
RPID=$!
trap 'kill "${RPID}" 2>/dev/null || true; wait "${RPID}" 2>/dev/null || true; rm -rf "${work}"' EXIT
for _ in $(seq 50); do redis-cli -p "${PORT}" ping >/dev/null 2>&1 && break; sleep 0.1; done
snap() { # commands, main-thread CPU-seconds
  redis-cli -p "${PORT}" info all | tr -d '\r' |
    awk -F: '$1 == "total_commands_processed" { n = $2 } $1 ~ /^used_cpu_(user|sys)_main_thread$/ { c += $2 } END { print n, c }'
}
echo "## Learned capacity and the clients' concurrency"
echo
echo "One redis-server $(redis-server --version | awk '{ print $3 }' | tr -d 'v='), \`GET\` of a missing key from redis-benchmark on $(nproc) shared cores; each row read as the manager reads a master (Δ total_commands_processed ÷ Δ main-thread CPU-seconds)."
echo
echo "| clients | commands | main-thread CPU-s | busy (of one core) | ops per main-thread CPU-second |"
echo "|---|---:|---:|---:|---:|"
for args in "-c 1 -n 30000" "-c 4 -n 60000" "-c 50 -n 200000" "-c 50 -n 400000 -P 16"; do
  echo "bench: redis-benchmark ${args}" >&2
  read -r n0 c0 < <(snap)
  t0="$(date +%s.%N)"
  # shellcheck disable=SC2086
  redis-benchmark -p "${PORT}" -t get -q ${args} >/dev/null 2>&1
  t1="$(date +%s.%N)"
  read -r n1 c1 < <(snap)
  awk -v a="${args}" -v n="$((n1 - n0))" -v c0="${c0}" -v c1="${c1}" -v t0="${t0}" -v t1="${t1}" \
    'BEGIN { c = c1 - c0; printf "| redis-benchmark %s | %d | %.3f | %.0f %% | %.0f |\n", a, n, c, 100 * c / (t1 - t0), n / c }'
done
echo
