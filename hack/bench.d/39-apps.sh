#!/usr/bin/env bash
# Real application code through heatsink (test/apps TestApplications): a job
# queue, a leaderboard, a hash of counters, a feature-flag set, a product
# hash, a Lua limiter and a fixed-window limiter, through go-redis (two
# sidecars) and Node (BullMQ, ioredis, rate-limiter-flexible; the other two)
# on the demo's stack (manager, two node agents, four sidecars, the demo's
# policy) in front of a standalone Redis and a 3-master cluster. Per
# workload: commands refused because of a mitigation, other errors,
# upstream ÷ client calls over the load's second half (MONITOR on every
# master), busiest master ÷ mean (cluster), exactness, and the move each
# key got.
#
# APPS_SECONDS sets how long the load runs per upstream (default 30).
# Prints one Markdown section to stdout; progress goes to stderr.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"

secs="${APPS_SECONDS:-30}"
echo "bench: application workloads, ${secs}s per upstream (about $((2 * secs + 40))s)" >&2
rc=0
raw="$(HEATSINK_APPS_SECONDS="${secs}" go test -count=1 -timeout 10m -run '^TestApplications$' -v ./test/apps/ 2>&1)" || rc=$?
echo "${raw}" | grep -E -- '--- (PASS|FAIL)' >&2
if ! echo "${raw}" | grep -q 'apps-row|'; then
  echo "${raw}" >&2
  exit 1
fi

echo "## Application workloads"
echo
echo "Real application code on the demo's stack (\`test/apps\`, ${secs} s of load per upstream, measured over its second half): each workload through go-redis (two sidecars) and Node (two sidecars: BullMQ 6.7.0, ioredis 6.0.0, rate-limiter-flexible 11.4.0); \`go:lua\` is github.com/go-redis/redis_rate's GCRA script, \`js:lua\` rate-limiter-flexible's RateLimiterRedis, \`*:window\` INCR + EXPIRE in MULTI per 1-s window. *refused*: error replies of heatsink (a mitigation's refusal or SHED) the clients saw; *errors*: other error replies; *upstream ÷ client*: commands naming the workload's keys that Redis received (MONITOR, script-internal calls left out) ÷ those the clients sent; *busiest ÷ mean*: commands per master, the busiest over the mean (all workloads together); *move*: what the policy's status listed for each key while it ran. $(nproc) cores."
echo
echo "| upstream | workload | refused | errors | upstream ÷ client | busiest ÷ mean | exactness | move |"
echo "|---|---|---:|---:|---:|---:|---|---|"
echo "${raw}" | awk -F'|' '/apps-row\|/ {
  move = $9; if (length(move) > 160) move = substr(move, 1, 157) "..."
  printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7, $8, move }'
if ((rc != 0)); then
  echo
  echo "> TestApplications failed (exit ${rc}):"
  echo "${raw}" | grep -E 'apps_test.go:[0-9]+: [a-z]+:[a-z]+: ' | grep -v 'apps-row' | sed 's/^ */> /' | cut -c1-400
fi
