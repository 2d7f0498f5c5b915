#!/usr/bin/env bash
# Installs the cluster-aware Redis client libraries test/clients drives
# through the sidecar, when missing: Debian's python3-redis (redis-py, for
# the system /usr/bin/python3) and ioredis from npm, pinned, into
# bin/node_modules (git-ignored), with the application libraries test/apps
# runs on ioredis (BullMQ, rate-limiter-flexible), pinned too. Node itself
# comes from Debian when absent.
set -o errexit -o nounset -o pipefail

IOREDIS_VERSION="${IOREDIS_VERSION:-6.0.0}"
BULLMQ_VERSION="${BULLMQ_VERSION:-6.7.0}"
RLF_VERSION="${RLF_VERSION:-11.4.0}"
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${root}/bin"

need=()
/usr/bin/python3 -c 'import redis' >/dev/null 2>&1 || need+=(python3-redis)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
if ((${#need[@]} > 0)); then
  if [[ "$(id -u)" != 0 ]]; then
    echo "setup-clients: missing ${need[*]}; install with: sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "setup-clients: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

# version <package> is the installed version of an npm package ("" if none).
version() { (cd "${bin}" 2>/dev/null && node -p "require('$1/package.json').version" 2>/dev/null) || true; }
if [[ "$(version ioredis)" != "${IOREDIS_VERSION}" || "$(version bullmq)" != "${BULLMQ_VERSION}" ||
  "$(version rate-limiter-flexible)" != "${RLF_VERSION}" ]]; then
  echo "setup-clients: installing ioredis@${IOREDIS_VERSION} bullmq@${BULLMQ_VERSION} rate-limiter-flexible@${RLF_VERSION} into bin/node_modules" >&2
  mkdir -p "${bin}"
  npm install --prefix "${bin}" --no-audit --no-fund --loglevel=error "ioredis@${IOREDIS_VERSION}" \
    "bullmq@${BULLMQ_VERSION}" "rate-limiter-flexible@${RLF_VERSION}" >/dev/null
fi
