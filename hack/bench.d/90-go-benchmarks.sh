#!/usr/bin/env bash
# The Go micro-benchmarks that no other section reports: the RESP parser,
# the counts client (the sidecars' wire to the node agent), the sketch, the proxy's in-process paths.
# Printed as a Markdown table from `go test -bench` output.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
pkgs=(./dataplane/resp/ ./dataplane/counts/ ./nodeagent/sketch/ ./dataplane/proxy/)
echo "## Go micro-benchmarks"
echo
echo "\`go test -run '^\$' -bench . -benchmem -benchtime 1s ${pkgs[*]}\` (one run; the machine is shared, read ratios, not absolutes)."
echo
echo "| package | benchmark | ns/op | B/op | allocs/op | extra |"
echo "|---|---|---:|---:|---:|---|"
go test -run '^$' -bench . -benchmem -benchtime 1s "${pkgs[@]}" 2>/dev/null | awk '
  /^pkg: / { pkg = $2; sub("github.com/heatsink-dev/heatsink/", "", pkg) }
  /^Benchmark/ {
    ns = ""; b = ""; a = ""; extra = ""
    for (i = 3; i < NF; i += 2) {
      if ($(i+1) == "ns/op") ns = $i
      else if ($(i+1) == "B/op") b = $i
      else if ($(i+1) == "allocs/op") a = $i
      else extra = extra $i " " $(i+1) " "
    }
    printf "| %s | %s | %s | %s | %s | %s |\n", pkg, $1, ns, b, a, extra
  }'
echo
