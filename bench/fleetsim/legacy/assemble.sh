#!/usr/bin/env bash
# assemble.sh TREE: turns TREE, a checkout of the legacy design's heatsink
# (the commit in ./ref), into one that builds the legacy node simulator:
# nodesim.go.txt becomes cmd/nodesim/main.go, and this tree's simproto
# (its non-test files) cmd/nodesim/simproto. Then `go build ./cmd/nodesim`
# in TREE. Used by hack/bench.d/50-fleet.sh and by simproto's
# TestLegacyNodeSimulatorBuilds.
set -o errexit -o nounset -o pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tree="${1:?usage: assemble.sh TREE}"
mkdir -p "${tree}/cmd/nodesim/simproto"
cp "${here}/nodesim.go.txt" "${tree}/cmd/nodesim/main.go"
for f in "${here}"/../simproto/*.go; do
  [[ "$f" == *_test.go ]] || cp "$f" "${tree}/cmd/nodesim/simproto/"
done
