#!/usr/bin/env bash
# Runs every benchmark of the project and gathers their reports into
# bench-report.md. Each script in hack/bench.d prints one Markdown section to
# stdout (its progress goes to stderr); they run in name order, one at a time,
# because they share the machine's cores.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
out="${BENCH_REPORT:-${ROOT}/bench-report.md}"
{
  echo "# heatsink benchmark report"
  echo
  echo "Generated $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nproc) cores ($(go version | awk '{print $3}'))."
  echo
} >"${out}.tmp"
for s in hack/bench.d/*.sh; do
  [[ -e "$s" ]] || continue
  echo "bench: $(basename "$s")" >&2
  if ! bash "$s" >>"${out}.tmp"; then
    echo "bench: $(basename "$s") failed" >&2
    printf '\n> %s failed; see the log above.\n\n' "$(basename "$s")" >>"${out}.tmp"
  fi
done
mv "${out}.tmp" "${out}"
cat "${out}"
echo "bench: report written to ${out}" >&2
