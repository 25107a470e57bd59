#!/usr/bin/env bash
# Install what seckill needs from Debian packages, only what is missing.
# Idempotent: when everything is present it runs no apt-get at all.
set -euo pipefail

packages=(
    build-essential pkg-config
    libmicrohttpd-dev libhiredis-dev libjansson-dev libcmocka-dev libevent-dev
    redis-server redis-tools wrk nginx-light gnuplot-nox curl jq iproute2 procps
    zookeeper libzookeeper-st-dev faketime
    # the orders' system of record and the pg lock (--postgres): the server for the
    # tests' throwaway databases, libpq's headers and .pc for the build
    postgresql libpq-dev
    # HMAC-SHA256 of buyer tokens and of the waiting room's tickets and passes
    # (util/hmac.c): libcrypto
    libssl-dev
    slowhttptest
    # make test-stress: busy loops on every core while the suite runs (tests/run.sh)
    stress-ng
    # nft: the partitions of the fault tests' namespace network (loadtest/jepsen/net.sh,
    # tests/it_netns.sh)
    nftables
    # sd_notify (service/notify.c); the stand-in for systemd's notify socket
    # (tests/it_systemd.sh); groff renders the man page (tests/it_man.sh)
    libsystemd-dev python3 groff-base
    # tests/it_deploy.sh: the deployment's TLS certificate, made by the test; haproxy
    # checks deploy/haproxy/seckill.cfg
    openssl haproxy
    # the waiting room's page in a real browser (tests/it_room_browser.sh): headless
    # chromium driven through chromedriver by Selenium
    chromium chromium-driver python3-selenium
    # promtool (tests/it_alerts.sh: deploy/alerts.yml's rules and their unit tests)
    prometheus
    # function definitions for the call-ring check (scripts/call_rings.py, tests/it_rings.sh)
    universal-ctags
)
# slowhttptest: tests/it_edge.sh's slowloris, slow body and slow read attacks.
# Node.js and npm run the docs tests' pinned tools (tools/openapi: redocly, ajv).
# Asked for by command, not by package: a node from elsewhere (NodeSource, nvm)
# carries its own npm, and Debian's npm package would conflict with it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    packages+=(nodejs npm)
fi
# Optional extras callers may ask for: DEPS_EXTRA="haproxy clang" scripts/deps.sh
if [[ -n "${DEPS_EXTRA:-}" ]]; then
    read -r -a extra <<<"$DEPS_EXTRA"
    packages+=("${extra[@]}")
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if ((${#missing[@]} == 0)); then
    exit 0
fi

echo "deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# Installing redis-server/nginx must not start system services on the default
# ports: everything here runs its own throwaway instances.
policy=/usr/sbin/policy-rc.d
added_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod +x "$policy"
    added_policy=1
fi
cleanup() { if ((added_policy)); then $sudo rm -f "$policy"; fi; }
trap cleanup EXIT
if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    $sudo apt-get update -q
    $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
