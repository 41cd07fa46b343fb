#!/usr/bin/env bash
# Installs what is missing, builds, and starts recur-server (llama-server's HTTP API) on
# http://127.0.0.1:8080. With no arguments it serves the default model (random weights, written
# by `recur-gguf synth` on first run); pass `-m FILE.gguf ...` for a real model, and any other
# recur-server flag (see `build/recur-server --help`). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
exec build/recur-server "$@"
