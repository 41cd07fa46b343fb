#!/usr/bin/env bash
# End-to-end tests: Node's test runner + the official `openai` npm client against recur-server.
# Usage: bash tests/e2e/run.sh BUILD_DIR TESTDATA_DIR (from the source root; CTest does this).
# Installs the pinned client (package-lock.json) into tests/e2e/node_modules on first run.
set -euo pipefail
build=$(realpath "$1")
testdata=$(realpath "$2")
cd "$(dirname "$0")"
if [ ! -d node_modules/openai ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
RECUR_BUILD="$build" RECUR_TESTDATA="$testdata" exec node --test *.test.mjs
