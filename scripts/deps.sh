#!/usr/bin/env bash
# Installs the Debian 12 packages recur builds and tests with, when any is missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config python3 curl libcmocka-dev libxxhash-dev libpcre2-dev libjansson-dev libmicrohttpd-dev libcurl4-openssl-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js + npm run the end-to-end tests (tests/e2e, the official `openai` npm client)
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "recur: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
