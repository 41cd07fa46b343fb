#!/usr/bin/env bash
# Long fuzz runs (clang + libFuzzer + ASan/UBSan): every tests/fuzz target for SECONDS each
# (default 3600). The test suite runs them for 45 s each (ctest -L fuzz in .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3600}
dpkg -s clang libclang-rt-14-dev >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq clang libclang-rt-14-dev; }
CC=clang scripts/build.sh build-fuzz -DRECUR_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug -DRECUR_FUZZ_SECONDS="$secs"
ctest --test-dir build-fuzz -L fuzz --output-on-failure
