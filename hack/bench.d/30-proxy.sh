#!/usr/bin/env bash
# Proxy benchmarks, side by side in one run with redis-benchmark:
#  1. direct Redis vs the heatsink sidecar vs twemproxy (nutcracker): 50
#     clients, GET/SET/INCR, pipeline depth 1 and 16, random keys;
#  2. one upstream command per client command on random keys (INFO
#     commandstats);
#  3. a hot key read through the engine's local cache (upstream GETs per
#     client GET), the same for a read-hot hash, set and sorted set
#     (HGETALL, HGET, SISMEMBER, SMEMBERS, ZREVRANGE 0 9 WITHSCORES, ZSCORE;
#     RESP2 and RESP3: upstream calls per client call), and SET on that
#     cached key vs direct;
#  4. a write-hot counter on a 3-master cluster, before and after split:
#     busiest master's ops over the mean of the three;
#  5. cluster mode: the proxy against redis-benchmark --cluster straight to
#     the three masters.
# The main table also runs the proxy as built at PROXY_BENCH_BEFORE (a git
# ref; default 3d32aba, the tree whose numbers docs/benchmarks.md's snapshot
# shows; empty: none) as a fourth target, interleaved with the others: a
# regression shows as heatsink / before under 100 % in the same run, whatever
# the machine's state.
# The machine's cores are shared (with Redis, the load generator and other
# work), so every row is measured in ROUNDS interleaved rounds, rotating the
# order of the targets, and the median is reported.
# CPU placement: the load generator runs on CPU 0 and every server (Redis,
# heatsink, twemproxy) on the other CPUs, the same for every target, as a
# load test is run when the generator must not steal the servers' CPU
# (PROXY_BENCH_PIN=0 turns it off). Left to the Linux scheduler, a 2-core
# machine sometimes puts the proxy on the generator's core and sometimes on
# Redis'; the main table is then bimodal from run to run, so a second table
# shows depth 1 unpinned.
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"

REQUESTS="${PROXY_BENCH_REQUESTS:-100000}"
ROUNDS="${PROXY_BENCH_ROUNDS:-5}"
# The main table gets more rounds: a 2-core machine's run lands in one of two
# modes (the proxy sharing a core with Redis or with the generator), 20 %
# apart, and the median of 5 can fall either way; 11 tell a regression from
# that noise.
MAIN_ROUNDS="${PROXY_BENCH_MAIN_ROUNDS:-11}"
CLIENTS=50
work="$(mktemp -d)"
pids=()
trap bench_cleanup EXIT
require_tools redis-server redis-benchmark redis-cli nutcracker python3 taskset

NCPU=$(nproc)
PIN="${PROXY_BENCH_PIN:-1}"
[[ ${NCPU} -ge 2 ]] || PIN=0
GEN=()
servers=() # pids of the servers to place
# place pinned|unpinned: sets the servers' CPUs (every thread) and the
# load generator's.
place() {
  local cpus="0-$((NCPU - 1))"
  GEN=()
  if [[ "$1" == pinned && "${PIN}" == 1 ]]; then
    cpus="1-$((NCPU - 1))"
    GEN=(taskset -c 0)
  fi
  for p in "${servers[@]}"; do taskset -a -pc "${cpus}" "$p" >/dev/null; done
}
# freeport [cluster]: a free loopback port; for a cluster node, one whose
# cluster bus port (port + 10000) is a valid port and free too.
freeport() {
  python3 - "$@" <<'PY'
import socket, sys
cluster = len(sys.argv) > 1
while True:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    ok = True
    if cluster:
        ok = p + 10000 <= 65535
        if ok:
            b = socket.socket()
            try:
                b.bind(("127.0.0.1", p + 10000))
            except OSError:
                ok = False
            b.close()
    s.close()
    if ok:
        print(p)
        break
PY
}
waitport() {
  for _ in $(seq 1 600); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "bench: port $1 not answering" >&2; return 1
}
median() { sort -g | awk '{a[NR]=$1} END { if (NR == 0) print 0; else print a[int((NR+1)/2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f %%", 100*a/b; else print "n/a" }'; }
# calls PORT: total commands served (INFO commandstats), INFO/CONFIG excluded.
calls() { redis-cli -p "$1" INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_/ && !/cmdstat_(info|config|cluster|ping)/ {s+=$3} END {print s+0}'; }
cmdcalls() { redis-cli -p "$1" INFO commandstats | tr -d '\r' | awk -F'[=,:]' -v c="cmdstat_$2" '$1==c {print $3} END {}' | head -1; }
redis() { # PORT [extra args...]
  local port=$1; shift
  redis-server --port "${port}" --bind 127.0.0.1 --save '' --appendonly no --daemonize no --dir "${work}" \
    --dbfilename "dump-${port}.rdb" "$@" >"${work}/redis-${port}.log" 2>&1 &
  pids+=($!); servers+=($!)
  waitport "${port}"
}

echo "bench: building heatsink" >&2
go build -o "${work}/heatsink" ./cmd/heatsink
BEFORE="${PROXY_BENCH_BEFORE-3d32aba}"
if [[ -n "${BEFORE}" ]]; then
  echo "bench: building heatsink at ${BEFORE}" >&2
  git worktree add --detach "${work}/before-src" "${BEFORE}" >/dev/null 2>&1
  (cd "${work}/before-src" && go build -o "${work}/heatsink-before" ./cmd/heatsink)
  git worktree remove --force "${work}/before-src" >/dev/null 2>&1 || true
  git worktree prune >/dev/null 2>&1 || true
fi
heatsink() { # LOGNAME PORT [flags...]
  local name=$1 port=$2; shift 2
  local bin="${work}/heatsink" sub=sidecar
  # a tree from before the subcommand was named sidecar calls it proxy
  [[ "${name}" == before ]] && bin="${work}/heatsink-before" && { "${bin}" sidecar --help >/dev/null 2>&1 || sub=proxy; }
  "${bin}" "${sub}" --listen "127.0.0.1:${port}" --http-address "127.0.0.1:$(freeport)" "$@" >"${work}/${name}.log" 2>&1 &
  pids+=($!); servers+=($!)
  waitport "${port}"
}

RPORT=$(freeport); redis "${RPORT}"
HPORT=$(freeport); heatsink heatsink "${HPORT}" --upstream "127.0.0.1:${RPORT}" --routing-file ""
MAIN=(direct heatsink twemproxy)
if [[ -n "${BEFORE}" ]]; then
  BPORT=$(freeport); heatsink before "${BPORT}" --upstream "127.0.0.1:${RPORT}" --routing-file ""
  MAIN=(direct heatsink before twemproxy)
fi
# The same, reporting every key access to a node agent address (UDP; nothing
# listens there, so this is the cost of aggregating and sending).
echo '{"schemaVersion":1,"policy":"bench/bench","version":1,"epochMillis":60000,"entries":[]}' >"${work}/empty.json"
OPORT=$(freeport); heatsink heatsink-reports "${OPORT}" --upstream "127.0.0.1:${RPORT}" --routing-file "${work}/empty.json" \
  --policy bench --namespace bench --node-agent "127.0.0.1:$(freeport)"
TPORT=$(freeport)
twemproxy_conf "${TPORT}" "${RPORT}" >"${work}/nutcracker.yml"
nutcracker -c "${work}/nutcracker.yml" -s "$(freeport)" -o "${work}/nutcracker.log" &
pids+=($!); servers+=($!)
waitport "${TPORT}"
place pinned

# bench PORT DEPTH ARGS... -> "rps p50 p99"
bench() {
  local port=$1 depth=$2; shift 2
  "${GEN[@]}" redis-benchmark -h 127.0.0.1 -p "${port}" -c "${CLIENTS}" -n "${REQUESTS}" -P "${depth}" --csv "$@" 2>/dev/null |
    awk -F, '/^"/ && !/^"test"/ { gsub(/"/,""); print $2, $5, $7; exit }'
}

# rows TARGETS... : fills R[target/depth/test] with median "rps p50 p99"
declare -A R
measure() { # KEY PORT DEPTH ARGS...
  local key=$1; shift
  bench "$@" >>"${work}/m.${key//\//_}"
}
finish() { # KEY
  local f="${work}/m.${1//\//_}"
  R[$1]="$(cut -d' ' -f1 "$f" | median) $(cut -d' ' -f2 "$f" | median) $(cut -d' ' -f3 "$f" | median)"
}

declare -A PORT=([direct]=$RPORT [heatsink]=$HPORT [twemproxy]=$TPORT [before]=${BPORT:-0})
for depth in 1 16; do
  for test in get set incr; do
    order=("${MAIN[@]}")
    for round in $(seq 1 "${MAIN_ROUNDS}"); do
      echo "bench: ${test} -P ${depth} round ${round}" >&2
      for target in "${order[@]}"; do
        measure "${target}/${depth}/${test}" "${PORT[$target]}" "${depth}" -r 1000000 -t "${test}"
      done
      order=("${order[@]:1}" "${order[0]}")
    done
    for target in "${MAIN[@]}"; do finish "${target}/${depth}/${test}"; done
  done
done

echo "## Proxy: direct Redis vs heatsink sidecar vs twemproxy"
echo
echo "redis-benchmark, ${CLIENTS} clients, ${REQUESTS} requests per run, random keys (-r 1000000); each row is the median of ${MAIN_ROUNDS} interleaved rounds (target order rotated each round) on the same machine ($(nproc) cores shared by Redis, the proxy, the load generator and whatever else runs). $(if [[ ${PIN} == 1 ]]; then echo "CPU placement: redis-benchmark on CPU 0, Redis and the proxy under test on CPUs 1-$((NCPU - 1)), the same for every target (PROXY_BENCH_PIN=0 turns it off; the unpinned table follows)."; else echo "No CPU pinning."; fi) Latencies in ms. twemproxy: nutcracker, server_connections ${TWEMPROXY_CONNS:-4}. heatsink: default settings (its event loop serves these clients; one upstream connection per RESP version)."
echo
if [[ -n "${BEFORE}" ]]; then
  echo "heatsink@${BEFORE}: the proxy as built at ${BEFORE}, a reference tree, measured in the same rounds: heatsink / before is the regression check, free of the machine's state."
  echo
  echo "| test | depth | direct ops/s | heatsink ops/s | heatsink@${BEFORE} ops/s | twemproxy ops/s | heatsink / direct | heatsink@${BEFORE} / direct | twemproxy / direct | heatsink / heatsink@${BEFORE} | direct p50/p99 | heatsink p50/p99 | heatsink@${BEFORE} p50/p99 | twemproxy p50/p99 |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
else
  echo "| test | depth | direct ops/s | heatsink ops/s | twemproxy ops/s | heatsink / direct | twemproxy / direct | direct p50/p99 | heatsink p50/p99 | twemproxy p50/p99 |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
fi
for depth in 1 16; do
  for test in get set incr; do
    read -r dr dp50 dp99 <<<"${R[direct/$depth/$test]}"
    read -r hr hp50 hp99 <<<"${R[heatsink/$depth/$test]}"
    read -r tr tp50 tp99 <<<"${R[twemproxy/$depth/$test]}"
    if [[ -n "${BEFORE}" ]]; then
      read -r br bp50 bp99 <<<"${R[before/$depth/$test]}"
      echo "| ${test^^} | ${depth} | ${dr} | ${hr} | ${br} | ${tr} | $(ratio "$hr" "$dr") | $(ratio "$br" "$dr") | $(ratio "$tr" "$dr") | $(ratio "$hr" "$br") | ${dp50}/${dp99} | ${hp50}/${hp99} | ${bp50}/${bp99} | ${tp50}/${tp99} |"
    else
      echo "| ${test^^} | ${depth} | ${dr} | ${hr} | ${tr} | $(ratio "$hr" "$dr") | $(ratio "$tr" "$dr") | ${dp50}/${dp99} | ${hp50}/${hp99} | ${tp50}/${tp99} |"
    fi
  done
done
echo
echo "Targets: heatsink / direct ≥ 90 % at depth 1 and ≥ 60 % at depth 16, ahead of twemproxy in every row$(if [[ -n "${BEFORE}" ]]; then echo "; heatsink / heatsink@${BEFORE} ≥ 100 % within the noise (no regression)"; fi)."
echo
if [[ "${PIN}" == 1 ]]; then
  # The same at depth 1 with every process left to the scheduler.
  place unpinned
  for test in get set incr; do
    order=(direct heatsink twemproxy)
    for round in $(seq 1 "${ROUNDS}"); do
      echo "bench: unpinned ${test} -P 1 round ${round}" >&2
      for target in "${order[@]}"; do
        measure "${target}/u1/${test}" "${PORT[$target]}" 1 -r 1000000 -t "${test}"
      done
      order=("${order[@]:1}" "${order[0]}")
    done
    for target in direct heatsink twemproxy; do finish "${target}/u1/${test}"; done
  done
  place pinned
  echo "**Unpinned, depth 1** (every process left to the Linux scheduler; medians of ${ROUNDS} interleaved rounds). With three busy processes on ${NCPU} cores the scheduler decides whether the proxy shares a core with Redis (then Redis gets its commands in batches) or with the load generator (then Redis answers one command per wakeup, as direct, and the proxy competes with the generator): runs land in either mode, so these ratios move a lot from run to run."
  echo
  echo "| test | direct ops/s | heatsink ops/s | twemproxy ops/s | heatsink / direct | twemproxy / direct | direct p50/p99 | heatsink p50/p99 | twemproxy p50/p99 |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for test in get set incr; do
    read -r dr dp50 dp99 <<<"${R[direct/u1/$test]}"
    read -r hr hp50 hp99 <<<"${R[heatsink/u1/$test]}"
    read -r tr tp50 tp99 <<<"${R[twemproxy/u1/$test]}"
    echo "| ${test^^} | ${dr} | ${hr} | ${tr} | $(ratio "$hr" "$dr") | $(ratio "$tr" "$dr") | ${dp50}/${dp99} | ${hp50}/${hp99} | ${tp50}/${tp99} |"
  done
  echo
fi
# Cost of reporting accesses to the node agent.
PORT[reports]=$OPORT
for depth in 1 16; do
  order=(heatsink reports)
  for round in $(seq 1 "${ROUNDS}"); do
    echo "bench: reports -P ${depth} round ${round}" >&2
    for target in "${order[@]}"; do measure "${target}/${depth}/rget" "${PORT[$target]}" "${depth}" -r 1000000 -t get; done
    order=("${order[@]:1}" "${order[0]}")
  done
  finish "heatsink/${depth}/rget"; finish "reports/${depth}/rget"
done
echo "**Node agent reports on** (every GET reported; medians of ${ROUNDS} interleaved rounds):"
echo
echo "| depth | heatsink ops/s | heatsink + reports ops/s | ratio |"
echo "|---|---|---|---|"
for depth in 1 16; do
  read -r a _ _ <<<"${R[heatsink/$depth/rget]}"
  read -r b _ _ <<<"${R[reports/$depth/rget]}"
  echo "| ${depth} | ${a} | ${b} | $(ratio "$b" "$a") |"
done
echo
# Exactly one upstream command per client command on random keys.
N=100000
redis-cli -p "${RPORT}" CONFIG RESETSTAT >/dev/null
"${GEN[@]}" redis-benchmark -h 127.0.0.1 -p "${HPORT}" -c "${CLIENTS}" -n "${N}" -P 16 -r 1000000 -t get >/dev/null 2>&1
one_gets=$(cmdcalls "${RPORT}" get); one_all=$(calls "${RPORT}")
redis-cli -p "${RPORT}" CONFIG RESETSTAT >/dev/null
"${GEN[@]}" redis-benchmark -h 127.0.0.1 -p "${HPORT}" -c "${CLIENTS}" -n "${N}" -P 1 -r 1000000 -t set >/dev/null 2>&1
one_sets=$(cmdcalls "${RPORT}" set); one_all2=$(calls "${RPORT}")

echo "**One upstream command per client command** (random keys, nothing in the routing table; INFO commandstats on Redis): ${N} client GETs at depth 16 → ${one_gets:-0} upstream GETs, ${one_all} commands in all; ${N} client SETs at depth 1 → ${one_sets:-0} upstream SETs, ${one_all2} commands in all."
echo
# Hot key through the engine's local cache (2 s TTL, coalesced).
cat >"${work}/routing.json" <<'JSON'
{"schemaVersion":1,"policy":"bench/bench","version":1,"epochMillis":60000,"entries":[
 {"key":"hot","source":"detected","coalesce":true,"localCache":{"ttlMillis":2000,"jitterPercent":10}},
 {"key":"hoth","source":"detected","coalesce":true,"localCache":{"ttlMillis":2000,"jitterPercent":10}},
 {"key":"hots","source":"detected","coalesce":true,"localCache":{"ttlMillis":2000,"jitterPercent":10}},
 {"key":"hotz","source":"detected","coalesce":true,"localCache":{"ttlMillis":2000,"jitterPercent":10}},
 {"key":"likes","source":"detected","split":{"generations":[{"fromEpoch":0,"shards":6}]}},
 {"key":"stats","source":"detected","split":{"generations":[{"fromEpoch":0,"shards":6}],"members":true}}
]}
JSON
EPORT=$(freeport)
heatsink heatsink-engine "${EPORT}" --upstream "127.0.0.1:${RPORT}" --policy bench --namespace bench --routing-file "${work}/routing.json"
place pinned
redis-cli -p "${RPORT}" SET hot "$(head -c 100 /dev/zero | tr '\0' v)" >/dev/null
# Wait until the table is loaded: 20 GETs through the proxy cost < 20 upstream.
for _ in $(seq 1 100); do
  redis-cli -p "${RPORT}" CONFIG RESETSTAT >/dev/null
  for _ in $(seq 1 20); do redis-cli -p "${EPORT}" GET hot >/dev/null; done
  [[ "$(cmdcalls "${RPORT}" get)" -lt 20 ]] 2>/dev/null && break
  sleep 0.1
done
HOTN=$((REQUESTS * 5))
redis-cli -p "${RPORT}" CONFIG RESETSTAT >/dev/null
hot_start=$(date +%s.%N)
hot=$(bench "${EPORT}" 1 -n "${HOTN}" GET hot)
hot_secs=$(awk -v a="${hot_start}" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
hot_up=$(cmdcalls "${RPORT}" get); hot_up=${hot_up:-0}
# Read-hot hash, set and sorted set, same table (coalesce + local cache,
# TTL 2 s ± 10 %): upstream calls of each command per client call, RESP2
# and RESP3 (redis-benchmark -3).
redis-cli -p "${RPORT}" HSET hoth a 1 b 2 c 3 d 4 e 5 >/dev/null
redis-cli -p "${RPORT}" SADD hots m1 m2 m3 m4 m5 >/dev/null
for i in $(seq 1 20); do redis-cli -p "${RPORT}" ZADD hotz "${i}.5" "p${i}" >/dev/null; done
TYPEDN=${REQUESTS}
typed_rows=()
for cmd in "HGETALL hoth" "HGET hoth a" "SISMEMBER hots m1" "SMEMBERS hots" "ZREVRANGE hotz 0 9 WITHSCORES" "ZSCORE hotz p3"; do
  row="| \`${cmd}\` |"
  for proto in 2 3; do
    p3=(); [[ ${proto} == 3 ]] && p3=(-3)
    redis-cli -p "${RPORT}" CONFIG RESETSTAT >/dev/null
    # shellcheck disable=SC2086
    r=$(bench "${EPORT}" 1 -n "${TYPEDN}" "${p3[@]}" ${cmd})
    c=$(cmdcalls "${RPORT}" "$(tr 'A-Z' 'a-z' <<<"${cmd%% *}")"); c=${c:-0}
    row+=" ${TYPEDN} → ${c} = $(awk -v a="${c}" -v b="${TYPEDN}" 'BEGIN{printf "%.5f", a/b}') ($(cut -d' ' -f1 <<<"${r}") calls/s) |"
  done
  typed_rows+=("${row}")
done
rm -f "${work}"/m.*
order=(direct engine)
declare -A EP=([direct]=$RPORT [engine]=$EPORT)
for round in $(seq 1 "${ROUNDS}"); do
  echo "bench: SET hot round ${round}" >&2
  for target in "${order[@]}"; do measure "${target}/sethot" "${EP[$target]}" 1 SET hot v; done
  order=("${order[@]:1}" "${order[0]}")
done
finish direct/sethot; finish engine/sethot

read -r hr hp50 hp99 <<<"${hot}"
echo "**Hot read key, local cache** (TTL 2 s ± 10 %, coalesced): ${HOTN} client GETs of one key in ${hot_secs} s (${hr} GETs/s, p50/p99 ${hp50}/${hp99} ms) → ${hot_up} upstream GETs = $(awk -v a="${hot_up}" -v b="${HOTN}" 'BEGIN{printf "%.4f", 100*a/b}') % (target ≤ 0.01 %)."
echo
echo "**Read-hot hash, set and sorted set, local cache** (same table and TTL; redis-benchmark depth 1, RESP2 and RESP3 (-3); upstream calls of the command per client call, target ≤ 0.002 as for GET):"
echo
echo "| request | RESP2: client → upstream = upstream ÷ client | RESP3: client → upstream = upstream ÷ client |"
echo "|---|---|---|"
printf '%s\n' "${typed_rows[@]}"
echo
read -r dr dp50 dp99 <<<"${R[direct/sethot]}"
read -r er ep50 ep99 <<<"${R[engine/sethot]}"
echo "**SET on the hot cached key**, depth 1 (median of ${ROUNDS}): direct ${dr} ops/s (p50/p99 ${dp50}/${dp99} ms), through the proxy (key in the table, cached) ${er} ops/s (${ep50}/${ep99} ms) = $(ratio "$er" "$dr") of direct (target ≥ 90 %)."
echo
# Write-hot counter on a 3-master cluster: before (plain key) and after
# (the same load on "likes", split in 6 shards by the table).
CPORTS=()
for _ in 1 2 3; do
  p=$(freeport cluster); CPORTS+=("$p")
  redis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf"
done
redis-cli --cluster create "${CPORTS[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >"${work}/cluster.log" 2>&1
for p in "${CPORTS[@]}"; do
  for _ in $(seq 1 600); do redis-cli -p "$p" CLUSTER INFO | grep -q cluster_state:ok && break; sleep 0.05; done
done
SPORT=$(freeport)
heatsink heatsink-cluster "${SPORT}" --cluster --upstream "127.0.0.1:${CPORTS[0]}" --policy bench --namespace bench --routing-file "${work}/routing.json"
place pinned
spread() { # COMMAND... -> "ops/s per master..." and max/mean
  for p in "${CPORTS[@]}"; do redis-cli -p "$p" CONFIG RESETSTAT >/dev/null; done
  local t0 t1; t0=$(date +%s.%N)
  # -r 200: a hash counter's HINCRBY f:__rand_int__ picks one of 200 fields.
  "${GEN[@]}" redis-benchmark -h 127.0.0.1 -p "${SPORT}" -c "${CLIENTS}" -n "${REQUESTS}" -P 1 -r 200 "$@" >/dev/null 2>&1
  t1=$(date +%s.%N)
  local counts=()
  for p in "${CPORTS[@]}"; do counts+=("$(calls "$p")"); done
  awk -v t0="$t0" -v t1="$t1" -v c="${counts[*]}" 'BEGIN {
    n = split(c, a, " "); s = 0; m = 0; out = ""
    for (i = 1; i <= n; i++) { s += a[i]; if (a[i] > m) m = a[i]; out = out sprintf("%.0f ", a[i] / (t1 - t0)) }
    printf "%s| %.2f", out, (s > 0 ? m / (s / n) : 0) }'
}
# Wait until the split is in force: an INCR creates shard keys.
for _ in $(seq 1 100); do
  redis-cli -p "${SPORT}" INCR likes >/dev/null
  n=0; for p in "${CPORTS[@]}"; do n=$((n + $(redis-cli -p "$p" KEYS '*hs:s:*' | grep -c . || true))); done
  [[ $n -gt 0 ]] && break
  sleep 0.1
done
before=$(spread INCR plain-counter)
after=$(spread INCR likes)
total=$(redis-cli -p "${SPORT}" GET likes)
# A write-hot hash of counters (HINCRBY of 200 random fields), plain and
# split by field; read back through the proxy, its fields must sum to the
# requests sent (redis-benchmark picks fields at random, so field by field
# the two hashes differ).
hbefore=$(spread HINCRBY plain-hash f:__rand_int__ 1)
hafter=$(spread HINCRBY stats f:__rand_int__ 1)
hsplit=$(redis-cli -p "${SPORT}" HGETALL stats | paste - -)
htotal=$(awk '{s += $2} END {print s + 0}' <<<"${hsplit}")
hfields=$(grep -c . <<<"${hsplit}" || true)
hlen=$(redis-cli -p "${SPORT}" HLEN stats)
hget=$(redis-cli -p "${SPORT}" HGET stats "$(head -1 <<<"${hsplit}" | cut -f1)")

echo "**Write-hot counter on a 3-master cluster** (redis-benchmark INCR of one key through the proxy, ${REQUESTS} requests; ops/s each master served, INFO commandstats):"
echo
echo "| counter | master ops/s | busiest / mean |"
echo "|---|---|---|"
echo "| plain key (before) | ${before%%|*} | ${before##*| } |"
echo "| split in 6 shards (after) | ${after%%|*} | ${after##*| } |"
echo "| hash of counters, HINCRBY of 200 fields, plain key (before) | ${hbefore%%|*} | ${hbefore##*| } |"
echo "| hash of counters split by field in 6 shards (after) | ${hafter%%|*} | ${hafter##*| } |"
echo
echo "Target: busiest / mean ≤ 1.5 after the split (≤ 1.2 for the hash). The split counter's logical value read back through the proxy: ${total}. The hash split by field read back through the proxy: HGETALL ${hfields} fields summing to ${htotal} (requests sent: ${REQUESTS}), HLEN ${hlen}, HGET of its first field ${hget} (HGETALL: $(head -1 <<<"${hsplit}" | cut -f2))."
echo
# Cluster mode: the proxy (one port, slot-aware) against redis-benchmark's
# own cluster mode straight to the three masters. twemproxy has no Redis
# Cluster support, so it has no row here.
cbench() { # PORT DEPTH TEST [--cluster] -> "rps p50 p99"
  local port=$1 depth=$2 test=$3; shift 3
  "${GEN[@]}" redis-benchmark -h 127.0.0.1 -p "${port}" -c "${CLIENTS}" -n "${REQUESTS}" -P "${depth}" -r 1000000 -t "${test}" --csv "$@" 2>/dev/null |
    awk -F, '/^"/ && !/^"test"/ { gsub(/"/,""); print $2, $5, $7; exit }'
}
rm -f "${work}"/m.*
for depth in 1 16; do
  for test in get set; do
    for round in $(seq 1 "${ROUNDS}"); do
      echo "bench: cluster ${test} -P ${depth} round ${round}" >&2
      if (( round % 2 )); then
        cbench "${CPORTS[0]}" "${depth}" "${test}" --cluster >>"${work}/m.cdirect_${depth}_${test}"
        cbench "${SPORT}" "${depth}" "${test}" >>"${work}/m.cproxy_${depth}_${test}"
      else
        cbench "${SPORT}" "${depth}" "${test}" >>"${work}/m.cproxy_${depth}_${test}"
        cbench "${CPORTS[0]}" "${depth}" "${test}" --cluster >>"${work}/m.cdirect_${depth}_${test}"
      fi
    done
    finish "cdirect/${depth}/${test}"; finish "cproxy/${depth}/${test}"
  done
done
echo "**Redis Cluster, 3 masters** (random keys; direct is \`redis-benchmark --cluster\` to the masters, heatsink is the proxy in cluster mode; medians of ${ROUNDS} interleaved rounds, same CPU placement as the main table):"
echo
echo "| test | depth | direct ops/s | heatsink ops/s | heatsink / direct | direct p50/p99 | heatsink p50/p99 |"
echo "|---|---|---|---|---|---|---|"
for depth in 1 16; do
  for test in get set; do
    read -r dr dp50 dp99 <<<"${R[cdirect/$depth/$test]}"
    read -r hr hp50 hp99 <<<"${R[cproxy/$depth/$test]}"
    echo "| ${test^^} | ${depth} | ${dr} | ${hr} | $(ratio "$hr" "$dr") | ${dp50}/${dp99} | ${hp50}/${hp99} |"
  done
done
echo
