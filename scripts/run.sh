#!/usr/bin/env bash
# Installs what is missing, builds, and starts recur-cli. With no arguments it runs the default
# model (random weights, written by `recur-gguf synth` on first run); pass `-m FILE.gguf ...`
# for a real model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
[ $# -gt 0 ] || set -- -p "Once upon a time" -n 64
exec build/recur-cli "$@"
