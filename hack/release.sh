#!/usr/bin/env bash
# make release: cross-compiles heatsink for every CLI platform (the linux ones
# go into the images), packages the chart, and assembles, signs and writes
# the release under OUT (docs/release.md). Network: none (the Go build cache
# and module cache as for any build).
#
#   hack/release.sh VERSION REGISTRY SIGNING_KEY OUT HELM
set -euo pipefail
version=$1 registry=$2 key=$3 out=$4 helm=$5
cd "$(dirname "$0")/.."

want=$(sed -n 's/^version: *\([^ #]*\).*/\1/p' release.yaml)
if [ "$version" != "$want" ]; then
  echo "make release: VERSION=$version, but release.yaml says $want: the version has one place, change it there" >&2
  exit 1
fi
if [ -z "$key" ]; then
  echo "make release: SIGNING_KEY=FILE is required (an ECDSA P-256 PEM key:" >&2
  echo "  openssl ecparam -genkey -name prime256v1 -noout | openssl pkcs8 -topk8 -nocrypt -out release.key)" >&2
  exit 1
fi
revision=$(git rev-parse HEAD)
# The binary says the image's version: the tag without its "v".
ldflags="-s -w -X github.com/heatsink-dev/heatsink/internal/version.Version=${version#v}"

rm -rf "$out"
mkdir -p "$out/bin"
for p in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
  echo "go build $p"
  CGO_ENABLED=0 GOOS=${p%/*} GOARCH=${p#*/} go build -trimpath -ldflags "$ldflags" \
    -o "$out/bin/heatsink-${p%/*}-${p#*/}" ./cmd/heatsink
done
"$helm" package charts/heatsink -d "$out" >/dev/null
go run ./hack/release build --version "$version" --revision "$revision" --registry "$registry" \
  --key "$key" --bin-dir "$out/bin" --chart "$out/heatsink-${version#v}.tgz" --out "$out" --ldflags "$ldflags"
rm -rf "$out/bin"
(cd "$out" && find . -maxdepth 1 -type f -printf '%8k KiB  %f\n' | sort -k3)
