#!/usr/bin/env bash
# Runs every fuzz target of the module (func FuzzXxx in a _test.go file) for
# a bounded time each; the seed corpora are committed under testdata/fuzz.
#
#   hack/fuzz.sh [DURATION] [FILTER]   fuzz each target for DURATION (default
#                                      30s; or Nx, N inputs, go test's
#                                      -fuzztime forms), only targets whose
#                                      "dir name" matches the regex FILTER
#   hack/fuzz.sh --list                print "dir name" of every target
#
# A failure stops the run with the failing input written under the
# package's testdata/fuzz/<name>/, as go test does; commit it as a seed once
# fixed. bench/ is its own module and is not fuzzed here.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

targets() {
  git ls-files --cached --others --exclude-standard -- '*_test.go' ':!:bench/**' |
    xargs grep -H -E '^func Fuzz[A-Za-z0-9_]*\(' |
    sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*$|./\1 \2|' |
    sort -u
}

if [[ "${1:-}" == "--list" ]]; then
  targets
  exit 0
fi

duration="${1:-30s}"
filter="${2:-.}"
count=0
while read -r dir name; do
  [[ "${dir} ${name}" =~ ${filter} ]] || continue
  echo "fuzz: ${dir} ${name} for ${duration}" >&2
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "${duration}" "${dir}"
  count=$((count + 1))
done < <(targets)
if ((count == 0)); then
  echo "fuzz: no target matches ${filter}" >&2
  exit 1
fi
echo "fuzz: ${count} targets passed" >&2
