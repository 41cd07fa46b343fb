#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (CTest: unit, ref, cli).
# Test data is read from ../shared/testdata.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
ctest --test-dir build --output-on-failure -j2 "$@"
