#!/usr/bin/env bash
# Installs redis-server, redis-cli, redis-sentinel (and nutcracker, the twemproxy peer the
# proxy benchmark compares against) from Debian's packages when missing.
set -o errexit -o nounset -o pipefail

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v redis-sentinel >/dev/null || need+=(redis-sentinel)
command -v nutcracker >/dev/null || need+=(nutcracker)
((${#need[@]} == 0)) && exit 0

if [[ "$(id -u)" != 0 ]]; then
  echo "setup-redis: missing ${need[*]}; install with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "setup-redis: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
# Debian's packages start a system redis on :6379 and a Sentinel on :26379;
# tests start their own.
for svc in redis-server redis-sentinel; do
  systemctl disable --now "$svc" >/dev/null 2>&1 || service "$svc" stop >/dev/null 2>&1 || true
done
