#!/usr/bin/env bash
# Fleet simulator: today's design against the fleet design, in one
# run, at several fleet sizes (bench/fleetsim). For each size and design: a
# real kube-apiserver + etcd, the design's real `heatsink manager` (a
# process) and its node simulator (a process: N simulated nodes running the
# design's node-agent code, 10 × N simulated sidecars); a warm-up, a hot event
# spread evenly over every node, a rest. Prints Markdown (the tables) to
# stdout; progress goes to stderr.
#
#  - legacy: heatsink at FLEET_BENCH_LEGACY_REF (default bench/fleetsim/legacy/ref, 701fc4c, the tree
#    before the fleet design), checked out in a temporary git worktree; its
#    node simulator is bench/fleetsim/legacy/nodesim.go.txt, assembled there by
#    bench/fleetsim/legacy/assemble.sh and built.
#  - fleet: this tree's heatsink and bench/fleetsim/cmd/nodesim.
#
# Then, unless FLEET_BENCH_POLICIES_ROW is empty, one more run of the fleet
# design alone with several policies (default 1000:10, 1,000 nodes × 10
# policies, each with its own viral key and counter: the target of
# at most 50 mutating requests/s from heatsink during a hot event), printed
# as a second table.
#
# FLEET_BENCH_NODES      fleet sizes (default 10,100,1000)
# FLEET_BENCH_DESIGNS    designs (default legacy,fleet)
# FLEET_BENCH_WARMUP, FLEET_BENCH_HOT, FLEET_BENCH_REST   phase durations
#                        (default 20s, 20s, 15s; the warm-up's second half is
#                        measured as the fleet at rest)
# FLEET_BENCH_START_TIMEOUT   bound on a node simulator's start-up (default 3m)
# FLEET_BENCH_MAX_RSS_MB bound on the memory of one run's processes (default 12288)
# FLEET_BENCH_POLICIES_ROW  NODES:POLICIES of the fleet-only run with several
#                        policies (default 1000:10; empty: none); its raw
#                        numbers go to FLEET_BENCH_JSON with .policies before .json
# FLEET_BENCH_MARGIN_ROWS  NODES:FACTOR[:SIDECARS],... fleet-only runs with the viral key and
#                        the counter at FACTOR × their thresholds, each printed as
#                        its own table (default 1000:0.88,1000:0.95,1000:1.1,5000:1.1:2;
#                        SIDECARS per node, default 10; 5,000 nodes with 2 each, see
#                        bench/fleetsim/README.md; rows over 1,000 nodes also get
#                        --start-timeout FLEET_BENCH_LARGE_START_TIMEOUT (8m) and
#                        FLEET_BENCH_LARGE_FLAGS (default "--nodesim-procs 2
#                        --no-leader-election": on two cores the manager then gets
#                        its share, see bench/fleetsim/README.md);
#                        empty: none; beyond one process's open-files limit the node
#                        simulator splits the nodes over several, and every table
#                        shows its lag). sustainFor 1 s and a report interval of 1 s:
#                        a key becomes hot only on its exact count, so under 1 ×
#                        nothing may be published ("never"), and over it the key is
#                        detected within the reaction budget of docs/design.md; each
#                        table has the hops (detected, decided, published, agents,
#                        sidecars, beyond sustainFor); raw numbers in
#                        FLEET_BENCH_JSON with .margin-NODES-FACTOR before .json
# FLEET_BENCH_CONCENTRATED_ROW  NODES:HOTNODES:FACTOR, one more fleet-only run with
#                        the viral key and the counter at FACTOR × their thresholds
#                        on HOTNODES nodes only (default 1000:10:1.1, 1 % of the nodes;
#                        empty: none); raw numbers with .concentrated before .json
# FLEET_BENCH_SHED       1 (default): also the shedding fleet simulation, the
#                        engine's own per-key limiters of 1,000 and 10,000
#                        simulated sidecars on one simulated time line against
#                        the overshoot bound docs/engine.md states
#                        (BenchmarkShedFleet, dataplane/engine; a few seconds),
#                        printed after the fleet tables; empty: none
# FLEET_BENCH_JSON       where the raw numbers go (default: a temporary file, removed)
# FLEET_BENCH_FLAGS      more fleetsim flags (see `fleetsim -h`), e.g.
#                        "--fleet-manager-args=--fleet-bind-address={fleetAddr}"
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
LEGACY_REF="${FLEET_BENCH_LEGACY_REF:-$(cat bench/fleetsim/legacy/ref)}"
NODES="${FLEET_BENCH_NODES:-10,100,1000}"
DESIGNS="${FLEET_BENCH_DESIGNS:-legacy,fleet}"

# shed_fleet prints the shedding fleet simulation's table (BenchmarkShedFleet).
shed_fleet() {
  echo "bench: fleet: shedding, 1,000 and 10,000 simulated sidecars' limiters" >&2
  local raw
  raw="$(go test -p 1 -run '^$' -bench '^BenchmarkShedFleet$' -benchtime 1x ./dataplane/engine/ 2>&1)" || {
    echo "${raw}" >&2
    return 1
  }
  echo "${raw}" | grep -E '^Benchmark' >&2
  echo "### Shedding at the key, 1,000 and 10,000 simulated sidecars"
  echo
  echo "The engine's own limiters (\`dataplane/engine\` \`simulateFleet\`, BenchmarkShedFleet) on one simulated time line, 10 ms steps, 12 report intervals of 1 s: a key with a budget of 20,000/s offered 100,000/s (Zipf-like over the sidecars, a tenth idle), doubled halfway; 1 % of the busy sidecars restart every interval (a new limiter starts from the minimum); at three quarters a third of the busy sidecars go idle; the manager publishes the demand one interval late (\`routing.PublishDemand\`). *bound* is docs/engine.md's (Shedding): budget × max(1, attempts ÷ published demand) + the unmeasured sidecars' minimum + one command per sidecar; an interval over it fails the run. *steady*: admitted ÷ budget averaged over the intervals with the demand published, but those of the spike and of the idling; *idle dip*: the least admitted ÷ budget in the interval the sidecars go idle and the next; *after idle*: admitted ÷ budget over the intervals after those."
  echo
  echo "| sidecars | steady admitted ÷ budget | spike interval ÷ budget | worst interval ÷ budget | worst interval ÷ bound | idle dip ÷ budget | after idle ÷ budget |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  echo "${raw}" | awk '
    /^BenchmarkShedFleet\// {
      c = $1; sub(/^BenchmarkShedFleet\/sidecars-/, "", c); sub(/-[0-9]+$/, "", c)
      delete v
      for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
      printf "| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", c, v["steady/budget"], v["spike-interval/budget"], v["worst-interval/budget"], v["worst-interval/bound"], v["idle-dip/budget"], v["after-idle/budget"]
    }'
  echo
}

work="$(mktemp -d)"
legacy="${work}/legacy"
orch=""
cleanup() {
  if [[ -n "${orch}" ]] && kill -0 "${orch}" 2>/dev/null; then
    kill -TERM "${orch}" 2>/dev/null || true # it stops what it started
    wait "${orch}" 2>/dev/null || true
  fi
  if [[ -e "${legacy}/.git" ]]; then git worktree remove --force "${legacy}" >/dev/null 2>&1 || true; fi
  git worktree prune >/dev/null 2>&1 || true
  rm -rf "${work}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench: fleet: building the orchestrator" >&2
(cd bench && go build -o "${work}/fleetsim" ./fleetsim/cmd/fleetsim)

args=()
designs=()
notes=()
for d in ${DESIGNS//,/ }; do
  case "$d" in
  legacy)
    echo "bench: fleet: building heatsink at ${LEGACY_REF} and its node simulator" >&2
    git worktree add --detach "${legacy}" "${LEGACY_REF}" >/dev/null 2>&1
    bench/fleetsim/legacy/assemble.sh "${legacy}"
    (cd "${legacy}" && go build -o "${work}/legacy-heatsink" ./cmd/heatsink &&
      go build -o "${work}/legacy-nodesim" ./cmd/nodesim)
    args+=(--legacy-heatsink "${work}/legacy-heatsink" --legacy-nodesim "${work}/legacy-nodesim")
    designs+=(legacy)
    ;;
  fleet)
    echo "bench: fleet: building this tree's heatsink and the fleet node simulator" >&2
    go build -o "${work}/fleet-heatsink" ./cmd/heatsink
    (cd bench && go build -o "${work}/fleet-nodesim" ./fleetsim/cmd/nodesim)
    args+=(--fleet-heatsink "${work}/fleet-heatsink" --fleet-nodesim "${work}/fleet-nodesim")
    designs+=(fleet)
    ;;
  *)
    echo "bench: fleet: unknown design $d (legacy, fleet)" >&2
    exit 2
    ;;
  esac
done
if [[ ${#designs[@]} -eq 0 ]]; then
  echo "## Fleet simulator"
  echo
  printf '%s\n' "${notes[@]}" "No design to run."
  echo
  exit 0
fi

joined="$(IFS=,; echo "${designs[*]}")"
json="${FLEET_BENCH_JSON:-${work}/fleetsim.json}"
# orchestrate RUNS_DIR REPORT ARGS...: one orchestrator run, stopped with
# the script.
orchestrate() {
  local runs="$1" report="$2"
  shift 2
  # shellcheck disable=SC2086
  "${work}/fleetsim" \
    --warmup "${FLEET_BENCH_WARMUP:-20s}" --hot "${FLEET_BENCH_HOT:-20s}" --rest "${FLEET_BENCH_REST:-15s}" \
    --start-timeout "${FLEET_BENCH_START_TIMEOUT:-3m}" --max-rss-mb "${FLEET_BENCH_MAX_RSS_MB:-12288}" \
    "$@" --work "${runs}" ${FLEET_BENCH_FLAGS:-} >"${report}" &
  orch=$!
  local rc=0
  wait "${orch}" || rc=$?
  orch=""
  return "${rc}"
}
echo "bench: fleet: running ${joined} at ${NODES} nodes" >&2
status=0
orchestrate "${work}/runs" "${work}/report.md" --nodes "${NODES}" --designs "${joined}" "${args[@]}" --json "${json}" || status=$?
cat "${work}/report.md"
prow="${FLEET_BENCH_POLICIES_ROW-1000:10}"
if [[ ${status} -eq 0 && -n "${prow}" && " ${designs[*]} " == *" fleet "* ]]; then
  echo "bench: fleet: running fleet at ${prow%%:*} nodes with ${prow##*:} policies" >&2
  orchestrate "${work}/runs-policies" "${work}/report-policies.md" --nodes "${prow%%:*}" --policies "${prow##*:}" \
    --designs fleet --fleet-heatsink "${work}/fleet-heatsink" --fleet-nodesim "${work}/fleet-nodesim" \
    --json "${json%.json}.policies.json" || status=$?
  cat "${work}/report-policies.md"
fi
# The margin rows: keys just under and just over their thresholds, spread
# evenly over every node (the thresholds are fleetsim's defaults).
mrows="${FLEET_BENCH_MARGIN_ROWS-1000:0.88,1000:0.95,1000:1.1,5000:1.1:2}"
if [[ ${status} -eq 0 && -n "${mrows}" && " ${designs[*]} " == *" fleet "* ]]; then
  for mrow in ${mrows//,/ }; do
    IFS=: read -r mn mf mspn <<<"${mrow}"
    # Over 1,000 nodes: the row's sidecars per node (third field, default
    # 10), a longer start-up bound and FLEET_BENCH_LARGE_FLAGS.
    large=()
    if (( mn > 1000 )); then
      # shellcheck disable=SC2206
      large=(--start-timeout "${FLEET_BENCH_LARGE_START_TIMEOUT:-8m}" --max-rss-mb 16000 ${FLEET_BENCH_LARGE_FLAGS---nodesim-procs 2 --no-leader-election})
    fi
    reads="$(awk -v f="${mf}" 'BEGIN { printf "%g", f * 5000 }')"
    writes="$(awk -v f="${mf}" 'BEGIN { printf "%g", f * 1000 }')"
    echo "bench: fleet: running fleet at ${mn} nodes with the keys at ${mf} × their thresholds" >&2
    orchestrate "${work}/runs-margin-${mn}-${mf}" "${work}/report-margin-${mn}-${mf}.md" --nodes "${mn}" \
      --viral-rate "${reads}" --counter-rate "${writes}" --reads-threshold 5000 --writes-threshold 1000 --sustain-for 1s \
      --sidecars-per-node "${mspn:-10}" "${large[@]}" \
      --designs fleet --fleet-heatsink "${work}/fleet-heatsink" --fleet-nodesim "${work}/fleet-nodesim" \
      --json "${json%.json}.margin-${mn}-${mf}.json" || status=$?
    echo "### The keys at ${mf} × their thresholds, ${mn} nodes"
    echo
    cat "${work}/report-margin-${mn}-${mf}.md"
    [[ ${status} -eq 0 ]] || break
  done
fi
# The concentrated row: the same keys on 1 % of the nodes.
crow="${FLEET_BENCH_CONCENTRATED_ROW-1000:10:1.1}"
if [[ ${status} -eq 0 && -n "${crow}" && " ${designs[*]} " == *" fleet "* ]]; then
  IFS=: read -r cn ch cf <<<"${crow}"
  reads="$(awk -v f="${cf}" 'BEGIN { printf "%g", f * 5000 }')"
  writes="$(awk -v f="${cf}" 'BEGIN { printf "%g", f * 1000 }')"
  echo "bench: fleet: running fleet at ${cn} nodes with the keys at ${cf} × their thresholds on ${ch} nodes" >&2
  orchestrate "${work}/runs-concentrated" "${work}/report-concentrated.md" --nodes "${cn}" --hot-nodes "${ch}" \
    --viral-rate "${reads}" --counter-rate "${writes}" --reads-threshold 5000 --writes-threshold 1000 --sustain-for 1s \
    --designs fleet --fleet-heatsink "${work}/fleet-heatsink" --fleet-nodesim "${work}/fleet-nodesim" \
    --json "${json%.json}.concentrated.json" || status=$?
  echo "### The keys at ${cf} × their thresholds on ${ch} of ${cn} nodes"
  echo
  cat "${work}/report-concentrated.md"
fi
if [[ ${#notes[@]} -gt 0 ]]; then
  printf '%s\n' "${notes[@]}"
  echo
fi
if [[ -n "${FLEET_BENCH_SHED-1}" ]]; then
  shed_fleet || status=$?
fi
if [[ ${status} -ne 0 ]]; then
  echo "bench: fleet: the orchestrator exited with ${status}; the last lines of each run's logs:" >&2
  for f in "${work}"/runs*/*/*.log; do
    [[ -e "$f" ]] || continue
    echo "--- ${f#"${work}/"}" >&2
    tail -20 "$f" >&2
  done
  exit "${status}"
fi
