#!/usr/bin/env bash
# What TLS to Redis costs through the sidecar: one redis-server serving a
# plaintext port and a TLS port that verifies clients (tls-auth-clients yes),
# and redis-benchmark (50 clients, random keys, GET/SET at depth 1 and 16)
# against
#   direct      Redis' plaintext port,
#   direct-tls  Redis' TLS port (redis-benchmark's own TLS, with a client
#               certificate),
#   plain       the sidecar in front of the plaintext port,
#   tls         the sidecar in front of the TLS port, with a client
#               certificate (the event loop, running crypto/tls itself),
#   tls-sess    the same with --event-loop=false (a goroutine per client:
#               how every client of a TLS upstream was served before).
# The clients reach the sidecar in plaintext in every case, so tls / plain is
# what TLS to Redis costs a sidecar's clients; direct-tls / direct is what it
# costs Redis itself (its own TLS work), a floor no proxy can beat.
# Every row is the median of ROUNDS interleaved rounds (target order rotated
# each round), with the load generator on CPU 0 and the servers on the other
# CPUs (PROXY_BENCH_PIN=0 turns it off), as in 30-proxy.sh.
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"

REQUESTS="${PROXY_BENCH_REQUESTS:-100000}"
ROUNDS="${PROXY_BENCH_ROUNDS:-5}"
CLIENTS=50
work="$(mktemp -d)"
pids=()
trap bench_cleanup EXIT
require_tools redis-server redis-benchmark redis-cli openssl python3 taskset

NCPU=$(nproc)
PIN="${PROXY_BENCH_PIN:-1}"
[[ ${NCPU} -ge 2 ]] || PIN=0
GEN=()
SRV=()
if [[ "${PIN}" == 1 ]]; then
  GEN=(taskset -c 0)
  SRV=(taskset -c "1-$((NCPU - 1))")
fi

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
waitport() {
  for _ in $(seq 1 600); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "bench: port $1 not answering" >&2
  return 1
}
median() { sort -g | awk '{a[NR]=$1} END { if (NR == 0) print 0; else print a[int((NR+1)/2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f %%", 100*a/b; else print "n/a" }'; }

# A CA, a server certificate for 127.0.0.1 and a client certificate.
pki="${work}/pki"
mkdir -p "${pki}"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout "${pki}/ca.key" -out "${pki}/ca.crt" -days 1 -subj /CN=bench-ca 2>/dev/null
for who in server client; do
  openssl req "${ec[@]}" -keyout "${pki}/${who}.key" -out "${pki}/${who}.csr" -subj "/CN=bench-${who}" 2>/dev/null
  ext="subjectAltName=IP:127.0.0.1"
  [[ ${who} == client ]] && ext="extendedKeyUsage=clientAuth"
  openssl x509 -req -in "${pki}/${who}.csr" -CA "${pki}/ca.crt" -CAkey "${pki}/ca.key" -CAcreateserial \
    -out "${pki}/${who}.crt" -days 1 -extfile <(echo "${ext}") 2>/dev/null
done

RPORT=$(freeport)
TLSPORT=$(freeport)
"${SRV[@]}" redis-server --port "${RPORT}" --bind 127.0.0.1 --save '' --appendonly no --daemonize no --dir "${work}" \
  --tls-port "${TLSPORT}" --tls-cert-file "${pki}/server.crt" --tls-key-file "${pki}/server.key" \
  --tls-ca-cert-file "${pki}/ca.crt" --tls-auth-clients yes >"${work}/redis.log" 2>&1 &
pids+=($!)
waitport "${RPORT}"

echo "bench: building heatsink" >&2
go build -o "${work}/heatsink" ./cmd/heatsink
heatsink() { # NAME PORT FLAGS...
  local name=$1 port=$2
  shift 2
  "${SRV[@]}" "${work}/heatsink" sidecar --listen "127.0.0.1:${port}" --http-address "127.0.0.1:$(freeport)" \
    --routing-file "" "$@" >"${work}/${name}.log" 2>&1 &
  pids+=($!)
  waitport "${port}"
}
TLSFLAGS=(--upstream "127.0.0.1:${TLSPORT}" --tls --tls-ca-file "${pki}/ca.crt"
  --tls-cert-file "${pki}/client.crt" --tls-key-file "${pki}/client.key")
PPORT=$(freeport)
heatsink plain "${PPORT}" --upstream "127.0.0.1:${RPORT}"
TPORT=$(freeport)
heatsink tls "${TPORT}" "${TLSFLAGS[@]}"
SPORT=$(freeport)
heatsink tls-sess "${SPORT}" "${TLSFLAGS[@]}" --event-loop=false

TARGETS=(direct direct-tls plain tls tls-sess)
declare -A PORT=([direct]=$RPORT [direct-tls]=$TLSPORT [plain]=$PPORT [tls]=$TPORT [tls-sess]=$SPORT)
# bench TARGET DEPTH TEST -> ops/s
bench() {
  local extra=()
  [[ $1 == direct-tls ]] && extra=(--tls --cacert "${pki}/ca.crt" --cert "${pki}/client.crt" --key "${pki}/client.key")
  "${GEN[@]}" redis-benchmark -h 127.0.0.1 -p "${PORT[$1]}" "${extra[@]}" -c "${CLIENTS}" -n "${REQUESTS}" -P "$2" \
    -r 1000000 -t "$3" --csv 2>/dev/null | awk -F, '/^"/ && !/^"test"/ { gsub(/"/,""); print $2; exit }'
}
declare -A R
for depth in 1 16; do
  for test in get set; do
    order=("${TARGETS[@]}")
    for round in $(seq 1 "${ROUNDS}"); do
      echo "bench: tls ${test} -P ${depth} round ${round}" >&2
      for target in "${order[@]}"; do bench "${target}" "${depth}" "${test}" >>"${work}/m.${target}.${depth}.${test}"; done
      order=("${order[@]:1}" "${order[0]}")
    done
    for target in "${TARGETS[@]}"; do R[${target}/${depth}/${test}]=$(median <"${work}/m.${target}.${depth}.${test}"); done
  done
done

echo "## Proxy: TLS to Redis"
echo
echo "One redis-server with a plaintext port and a TLS port that verifies clients (\`tls-auth-clients yes\`, ECDSA P-256 certificates, TLS 1.3); redis-benchmark, ${CLIENTS} clients, ${REQUESTS} requests per run, random keys (-r 1000000); ops/s, each the median of ${ROUNDS} interleaved rounds. $(if [[ ${PIN} == 1 ]]; then echo "redis-benchmark on CPU 0, Redis and the sidecars on CPUs 1-$((NCPU - 1))."; else echo "No CPU pinning."; fi) Clients reach the sidecar in plaintext; *tls* is the sidecar in front of the TLS port with a client certificate (its event loop, running crypto/tls itself), *tls sessions* the same with \`--event-loop=false\` (a goroutine per client). *direct TLS / direct* is what TLS costs Redis itself."
echo
echo "| test | depth | direct | direct TLS | heatsink plain | heatsink tls | heatsink tls sessions | tls / plain | tls sessions / plain | direct TLS / direct |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for depth in 1 16; do
  for test in get set; do
    d=${R[direct/$depth/$test]} dt=${R[direct-tls/$depth/$test]} p=${R[plain/$depth/$test]}
    t=${R[tls/$depth/$test]} s=${R[tls-sess/$depth/$test]}
    echo "| ${test^^} | ${depth} | ${d} | ${dt} | ${p} | ${t} | ${s} | $(ratio "$t" "$p") | $(ratio "$s" "$p") | $(ratio "$dt" "$d") |"
  done
done
echo
echo "Target: heatsink tls / heatsink plain ≥ 90 % in every row."
echo
