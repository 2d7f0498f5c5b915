#!/usr/bin/env bash
# Copies the generated CRDs into the Helm chart. The chart's crds/ directory is
# generated: never edit it by hand; make verify fails on drift.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dst="${ROOT}/charts/heatsink/crds"
mkdir -p "${dst}"
rm -f "${dst}"/*.yaml
for f in "${ROOT}"/config/crd/bases/*.yaml; do
  { echo "# Generated from config/crd/bases by hack/sync-chart-crds.sh. DO NOT EDIT."; cat "$f"; } >"${dst}/$(basename "$f")"
done
