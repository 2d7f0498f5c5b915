#!/usr/bin/env bash
# The demo with typed thresholds and with a policy that types no rate
# (thresholds.auto), one after another on this machine: the same seed, traffic
# and windows; only the policy's thresholds differ. Rows:
#  - typed: the demo's own numbers (800 reads/s, 400 writes/s);
#  - auto: thresholds.auto at the API's defaults (keySharePercent 25,
#    targetUtilizationPercent 70);
#  - auto, 2 % share: keySharePercent 2, the share at which the demo's viral
#    keys (3,000 GET/s, 2,000 INCR/s) are a large part of what a master here
#    serves.
# Each row is one `heatsink-demo -plain` run of DEMO_AUTO_DURATION (45 s) of
# traffic; its summary gives busiest master ÷ mean (as Redis counts ops) and
# the time from each spike to its relief, and the policy's status the
# capacities the manager learned. Prints one Markdown section to stdout;
# progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
DURATION="${DEMO_AUTO_DURATION:-45s}"
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
run() { # NAME ARGS...
  local name="$1"; shift
  echo "bench: demo (${name}), ${DURATION} of traffic" >&2
  "${work}/heatsink-demo" -plain -duration "${DURATION}" -out "${work}/${name}" "$@" >"${work}/${name}.txt" 2>&1 ||
    { tail -40 "${work}/${name}.txt" >&2; exit 1; }
}
run typed
run auto -auto
run auto2 -auto -key-share 2

echo "## The demo with thresholds typed and learned (thresholds.auto)"
echo
echo "\`make demo\`'s scenario for ${DURATION} of traffic (viral read key 3,000 GET/s from 15 s, viral counter 2,000 INCR/s from 25 s, on the same master), one run per row, one after another on $(nproc) shared cores. *Before* / *after*: busiest master ÷ mean while a viral key was hot and not relieved / from 2 s after both were relieved (Redis' own ops/s). *Learned* is each master's capacity and utilisation from the policy's status at the end (the demo trusts a capacity after 0.5 CPU-seconds of load where the manager's default is 15, as it shortens every window)."
echo
echo "| thresholds | before | after | viral read: spike → relief | viral counter: spike → relief | counter | learned per master: ops/s at one core (confidence), busy |"
echo "|---|---:|---:|---:|---:|---|---|"
for r in "typed:typed (800 reads/s, 400 writes/s)" "auto:auto (keySharePercent 25)" "auto2:auto (keySharePercent 2)"; do
  f="${work}/${r%%:*}.txt"
  rel() { field "^  $1 .*spike" "${f}" | awk -F' / ' '{ print $2 }'; }
  exact="$(field "counter exactness" "${f}" | awk '{ print $1 }')"
  learned="$(masters "${f}")"
  echo "| ${r#*:} | $(field "mean, before relief" "${f}") | $(field "mean, after relief" "${f}") | $(rel "viral read") | $(rel "viral counter") | ${exact%:} | ${learned:-n/a} |"
done
echo
