#!/usr/bin/env bash
# Builds Prometheus' promtool from the Go module proxy into the path given
# (skipped when present): make test checks and unit-tests heatsink's alert
# rules with it (config/prometheus). Prometheus 3.x is published as the Go
# module github.com/prometheus/prometheus at v0.3xx versions.
set -o errexit -o nounset -o pipefail
version="$1" out="$2"
[[ -x "${out}" ]] && exit 0
[[ "${out}" = /* ]] || out="${PWD}/${out}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
echo "setup-promtool: building promtool ${version} (first time only; several minutes on 2 cores)" >&2
GOBIN="${tmp}" GOFLAGS=-mod=mod CGO_ENABLED=0 go install "github.com/prometheus/prometheus/cmd/promtool@${version}"
mv "${tmp}/promtool" "${out}"
