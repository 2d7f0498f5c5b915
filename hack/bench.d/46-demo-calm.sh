#!/usr/bin/env bash
# No false alarm on a calm cluster (issue 26): the demo's stack (kube-apiserver,
# 3-master Redis Cluster, manager, node agents, sidecars, go-redis clients) with
# only a Zipf(1.1) background over 100,000 keys at 2,000 ops/s and a policy
# that types no rate (thresholds.auto at the API's defaults), for
# DEMO_CALM_DURATION (10m) of traffic: the counts go the real way (clients →
# sidecars → node agents → the manager's fleet server) and the manager decides
# on them all along. Then the same traffic for DEMO_CALM_TYPED (45s) with typed
# thresholds low enough (100 reads/s, 50 writes/s) that the Zipf head is hot,
# so that the row above is shown to be able to mitigate. Prints one Markdown
# section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
DURATION="${DEMO_CALM_DURATION:-10m}"
TYPED="${DEMO_CALM_TYPED:-45s}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

echo "bench: building heatsink-demo" >&2
go build -o "${work}/heatsink-demo" ./demo/heatsink-demo
field() { awk -v re="$1" '/^  [^ ]/ && $0 ~ re { sub(/^  [^ ].*[^ ]  +/, ""); print; exit }' "$2"; }
masters() { # FILE: per master, "capacity (confidence), busy; in force"
  awk '/^    master / { c = $6; f = $9; sub(/\);?$/, "", f); r = $12; printf "%s%s (%s), %s busy, %s reads/s", sep, c, f, $3, r; sep = "; " }' "$1"
}
run() { # NAME DURATION ARGS...
  local name="$1" d="$2"; shift 2
  echo "bench: demo -calm (${name}), ${d} of traffic" >&2
  "${work}/heatsink-demo" -plain -calm -duration "${d}" -out "${work}/${name}" "$@" >"${work}/${name}.txt" 2>&1 ||
    { tail -40 "${work}/${name}.txt" >&2; exit 1; }
}
run auto "${DURATION}" -auto
run typed "${TYPED}" -reads-threshold 100 -writes-threshold 50

echo "## No false alarm on a calm cluster (thresholds.auto)"
echo
echo "\`heatsink-demo -calm\`: only the Zipf(1.1) background over 100,000 keys at 2,000 ops/s (80 % GET, 20 % SET) through the four sidecars, one run per row, one after another on $(nproc) shared cores. *Passes* are the manager's reconcile passes during traffic (each decides on the fleet server's view); *counted* the mean ops/s of the policy's traffic the manager's fleet server counted from the node agents; *learned* each master's capacity, utilisation and read threshold in force from the policy's status at the end."
echo
echo "| thresholds | traffic | keys mitigated | keys over a threshold | passes | counted | client errors | learned per master: ops/s at one core (confidence), busy, in force |"
echo "|---|---:|---:|---:|---:|---|---:|---|"
for r in "auto:auto (API defaults)" "typed:typed (100 reads/s, 50 writes/s)"; do
  f="${work}/${r%%:*}.txt"
  passes="$(field "reconcile passes" "${f}" | awk '{ print $1 }')"
  counted="$(field "counted by the manager" "${f}" | awk '{ print $1 " ops/s" }')"
  echo "| ${r#*:} | $(field "^  scenario" "${f}" >/dev/null; grep -o 'summary ([^ ]*' "${f}" | sed 's/summary (//') | $(field "keys mitigated" "${f}" | cut -c1-60) | $(field "keys over a threshold" "${f}" | awk '{ print $1 }') | ${passes} | ${counted} | $(field "client errors" "${f}") | $(masters "${f}") |"
done
echo
