#!/usr/bin/env bash
# The demo with typed thresholds and with a policy that types no rate
# (thresholds.auto), one after another on this machine: the same seed, traffic
# and windows; only the policy's thresholds differ. Rows:
#  - typed: the demo's own numbers (800 reads/s, 400 writes/s);
#  - auto: thresholds.auto at the API's defaults (keySharePercent 25,
#    targetUtilizationPercent 70);
#  - auto, 2 % share: keySharePercent 2, the share at which the demo's viral
#    keys (3,000 GET/s, 2,000 INCR/s) are a large part of what a master here
#    serves;
#  - typed and auto at the defaults with the viral read key at
#    DEMO_AUTO_HEAVY_READS (30,000) GET/s and no counter: about as much of
#    one key as the demo's clients and sidecars can send on two cores, over a
#    quarter of its master's learned capacity;
#  - typed and auto at the defaults on small shards: every Redis node held to
#    DEMO_AUTO_SHARD_CPU (50m) of CPU by a cgroup, as a pod's limits.cpu
#    would hold it, and the auto policy says so (thresholds.auto.shardCPU):
#    shards the demo's keys do hurt (needs root; the rows are left out, and
#    say why, without a CPU cgroup).
# Each row is one `heatsink-demo -plain` run of DEMO_AUTO_DURATION (45 s) of
# traffic; its summary gives busiest master ÷ mean (as Redis counts ops) and
# the time from each spike to its relief, and the policy's status the
# capacities the manager learned.
# Then a second section, no false alarm on a calm cluster (issue 26):
# `heatsink-demo -calm`, only the Zipf(1.1) background over 100,000 keys at
# 2,000 ops/s, with thresholds.auto at the defaults for DEMO_CALM_DURATION
# (10m) of traffic, the counts going the real way (clients → sidecars → node
# agents → the manager's fleet server) and the manager deciding on them all
# along; then the same traffic for DEMO_CALM_TYPED (45s) with typed
# thresholds: a read threshold low enough (100 reads/s) that the Zipf head is read-hot, to
# show the same run can mitigate (writes at 1,000/s: a split key takes no SET).
# Prints Markdown to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
DURATION="${DEMO_AUTO_DURATION:-45s}"
HEAVY="${DEMO_AUTO_HEAVY_READS:-30000}"
CALM="${DEMO_CALM_DURATION:-10m}"
CALM_TYPED="${DEMO_CALM_TYPED:-45s}"
SHARD_CPU="${DEMO_AUTO_SHARD_CPU:-50m}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

echo "bench: building heatsink-demo" >&2
go build -o "${work}/heatsink-demo" ./demo/heatsink-demo
# field REGEX FILE: the value column of the first summary row whose label
# matches REGEX (label and value are apart by at least two spaces).
field() { awk -v re="$1" '/^  [^ ]/ && $0 ~ re { sub(/^  [^ ].*[^ ]  +/, ""); print; exit }' "$2"; }
masters() { # FILE: per master, "capacity (confidence), busy"
  awk '/^    master / { c = $6; f = $9; sub(/\);?$/, "", f); printf "%s%s (%s), %s busy", sep, c, f, $3; sep = "; " }' "$1"
}
run() { # NAME DURATION ARGS...
  local name="$1" d="$2"; shift 2
  echo "bench: demo (${name}), ${d} of traffic" >&2
  "${work}/heatsink-demo" -plain -duration "${d}" -out "${work}/${name}" "$@" >"${work}/${name}.txt" 2>&1 ||
    { tail -40 "${work}/${name}.txt" >&2; exit 1; }
}
run typed "${DURATION}"
run auto "${DURATION}" -auto
run auto2 "${DURATION}" -auto -key-share 2
run heavytyped "${DURATION}" -read-rate "${HEAVY}" -write-rate 0
run heavyauto "${DURATION}" -auto -read-rate "${HEAVY}" -write-rate 0
small=(smalltyped smallauto)
# A CPU cgroup: cgroup v1's cpu hierarchy, or v2 with cpu enabled for children
# (internal/testing/cpulimit says which it takes).
if [[ "$(id -u)" == 0 ]] && { grep -qE ' - cgroup [^ ]+ ([^ ]*,)?cpu(,|$)' /proc/self/mountinfo ||
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; }; then
  run smalltyped "${DURATION}" -shard-cpu "${SHARD_CPU}"
  run smallauto "${DURATION}" -auto -shard-cpu "${SHARD_CPU}"
else
  small=()
  echo "bench: the small-shard rows need root and a CPU cgroup; left out" >&2
fi
run calm "${CALM}" -calm -auto
run calmtyped "${CALM_TYPED}" -calm -reads-threshold 100 -writes-threshold 1000

echo "## The demo with thresholds typed and learned (thresholds.auto)"
echo
echo "\`make demo\`'s scenario for ${DURATION} of traffic (viral read key 3,000 GET/s from 15 s, viral counter 2,000 INCR/s from 25 s, on the same master; the last two rows drive the viral read key at ${HEAVY} GET/s and no counter), one run per row, one after another on $(nproc) shared cores. *Before* / *after*: busiest master ÷ mean while a viral key was hot and not relieved / from 2 s after every viral key driven was relieved (Redis' own ops/s). A relief is followed by the threshold in force on the key's master when it was routed (from the policy's status then), and where it came from. *Learned* is each master's capacity and utilisation from the policy's status at the end (the demo trusts a capacity after 0.2 CPU-seconds of load, counting intervals from 0.5 % of a core, where the manager's defaults are 15 and 2 %, as it shortens every window)."
echo
echo "| thresholds | before | after | viral read: spike → relief | viral counter: spike → relief | counter | learned per master: ops/s at one core (confidence), busy |"
echo "|---|---:|---:|---:|---:|---|---|"
for r in "typed:typed (800 reads/s, 400 writes/s)" "auto:auto (keySharePercent 25)" "auto2:auto (keySharePercent 2)" \
  "heavytyped:typed, viral read at ${HEAVY} GET/s, no counter" "heavyauto:auto (keySharePercent 25), viral read at ${HEAVY} GET/s, no counter" \
  ${small[0]:+"smalltyped:typed, every Redis node held to ${SHARD_CPU} CPU"} ${small[1]:+"smallauto:auto (keySharePercent 25, shardCPU ${SHARD_CPU}), every Redis node held to ${SHARD_CPU} CPU"}; do
  f="${work}/${r%%:*}.txt"
  rel() { # KEY-LABEL WRITES(0/1): relief, and the threshold in force on its master when routed
    local r t
    r="$(field "^  $1 .*spike" "${f}" | awk -F' / ' '{ print $2 }')"
    t="$(field "^  $1 .*in force when routed" "${f}" | sed 's/ on its master//' | awk -v w="$2" -F', ' '{ print (w == 1 ? $2 : $1) }')"
    echo "${r:-not driven}${t:+ at ${t}}"
  }
  exact="$(field "counter exactness" "${f}" | awk '{ print $1 }')"
  learned="$(masters "${f}")"
  echo "| ${r#*:} | $(field "mean, before relief" "${f}") | $(field "mean, after relief" "${f}") | $(rel "viral read" 0) | $(rel "viral counter" 1) | ${exact%:} | ${learned:-n/a} |"
done
echo
echo "## No false alarm on a calm cluster"
echo
echo "\`heatsink-demo -calm\`: only the Zipf(1.1) background over 100,000 keys at 2,000 ops/s (80 % GET, 20 % SET) through the four sidecars, one run per row, after the rows above on the same machine. *Passes* are the manager's reconcile passes during traffic (each decides on the fleet server's view); *counted* the mean ops/s of the policy's traffic that the fleet server counted from the node agents; *learned* each master's capacity (confidence), utilisation and read threshold in force, from the policy's status at the end."
echo
echo "| thresholds | traffic | keys mitigated | keys over a threshold | passes | counted | client errors | learned per master: ops/s at one core (confidence), busy, reads/s in force |"
echo "|---|---:|---|---:|---:|---:|---:|---|"
for r in "calm:${CALM}:auto (API defaults)" "calmtyped:${CALM_TYPED}:typed (100 reads/s, 1000 writes/s)"; do
  f="${work}/${r%%:*}.txt"
  rest="${r#*:}"
  learned="$(awk '/^    master / { c = $6; f = $9; sub(/\);?$/, "", f); printf "%s%s (%s), %s busy, %s", sep, c, f, $3, $12; sep = "; " }' "${f}")"
  echo "| ${rest#*:} | ${rest%%:*} | $(field "keys mitigated" "${f}" | cut -c1-80) | $(field "keys over a threshold" "${f}" | awk '{ print $1 }' | tr -d :) | $(field "reconcile passes" "${f}" | awk '{ print $1 }') | $(field "counted by the manager" "${f}" | awk '{ print $1 }') | $(field "client errors" "${f}" | cut -c1-100) | ${learned} |"
done
echo
