#!/usr/bin/env bash
# The full load and soak test: 64 concurrent streaming clients for 10 minutes (after a 60 s
# warm-up) against recur-server on the tiny hybrid model, a third of them disconnecting at random
# points (tests/load/load.mjs says what is checked). The test suite runs a shortened one.
# Usage: scripts/soak.sh [BUILD_DIR] [extra load.mjs flags, e.g. --clients 32 --duration 120 --seed 7]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}; shift || true
[ -x "$build/recur-server" ] || scripts/build.sh "$build"
exec bash tests/load/run.sh "$build" ../shared/testdata --clients 64 --duration 600 --warmup 60 "$@"
