#!/bin/sh
# Install the Debian packages ditto.c needs to build and test (Debian 12).
# Usage: scripts/install-deps.sh [--check]
#   --check  only report missing packages (exit 1 if any), install nothing.
set -eu

PACKAGES="cmake make gcc pkg-config libc6-dev
libopenblas-dev libcjson-dev libssl-dev
libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev
espeak-ng"

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    exit 0
fi
if [ "${1:-}" = "--check" ]; then
    echo "missing packages:$missing" >&2
    exit 1
fi

echo "installing:$missing" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "error: not root and no sudo; install as root: apt-get install$missing" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
