#!/usr/bin/env bash
# Load and soak test of recur-server (tests/load/load.mjs; its header says what it checks).
# Usage: bash tests/load/run.sh BUILD_DIR TESTDATA_DIR [--clients N] [--duration S] [--warmup S]
#        [--slots N] [--seed N] [--cache-ram MIB] [--verbose]   (from the source root)
# It reuses tests/e2e (server.mjs and its pinned `openai` client), installed on first run.
set -euo pipefail
build=$(realpath "$1")
testdata=$(realpath "$2")
shift 2
cd "$(dirname "$0")"
if [ ! -d ../e2e/node_modules/openai ]; then
  (cd ../e2e && npm ci --no-audit --no-fund --loglevel=error)
fi
RECUR_BUILD="$build" RECUR_TESTDATA="$testdata" exec node load.mjs "$@"
