#!/usr/bin/env bash
# Copies the generated RBAC (controller-gen output from the kubebuilder
# markers) and webhook configurations into the Helm chart's files/, which its
# templates render. Never edit charts/heatsink/files/ by hand; make verify
# fails on drift.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dst="${ROOT}/charts/heatsink/files"
mkdir -p "${dst}/rbac" "${dst}/webhook"
copy() { # src dst
  if [[ ! -f "$1" ]]; then
    echo "sync-chart-rbac: $1 is missing; run make manifests" >&2
    exit 1
  fi
  { echo "# Generated from ${1#"${ROOT}/"} by hack/sync-chart-rbac.sh. DO NOT EDIT."; cat "$1"; } >"$2"
}
copy "${ROOT}/config/rbac/role.yaml" "${dst}/rbac/manager.yaml"

copy "${ROOT}/config/webhook/manifests.yaml" "${dst}/webhook/manifests.yaml"
