#!/usr/bin/env bash
# Copies the generated RBAC (controller-gen output from the kubebuilder
# markers), the webhook configurations, the alert rules and the Grafana
# dashboard into the Helm chart's files/, which its templates render. Never edit charts/heatsink/files/ by hand; make verify
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

# Monitoring: the alert rules (promtool-checked) and the Grafana dashboard
# live in config/; the chart renders copies, and kustomize gets the rules
# wrapped in a PrometheusRule.
mkdir -p "${dst}/prometheus" "${dst}/grafana"
copy "${ROOT}/config/prometheus/rules.yaml" "${dst}/prometheus/rules.yaml"
cp "${ROOT}/config/grafana/heatsink.json" "${dst}/grafana/heatsink.json"
{
  echo "# Generated from rules.yaml by hack/sync-chart-rbac.sh. DO NOT EDIT."
  echo "apiVersion: monitoring.coreos.com/v1"
  echo "kind: PrometheusRule"
  echo "metadata:"
  echo "  name: heatsink"
  echo "  labels:"
  echo "    app.kubernetes.io/name: heatsink"
  echo "spec:"
  grep -v '^#' "${ROOT}/config/prometheus/rules.yaml" | sed 's/^/  /'
} >"${ROOT}/config/prometheus/prometheus_rule.yaml"
