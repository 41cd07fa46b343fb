#!/usr/bin/env bash
# Long fuzz runs (clang + libFuzzer + ASan/UBSan): each tests/fuzz target for SECONDS (default
# 3600), all of them or the ones named, JOBS at a time (default 1; the machine's cores are the
# limit). The test suite runs them for 45 s each (ctest -L fuzz in .ci/run).
#   scripts/fuzz.sh [SECONDS] [TARGET...]      targets: gguf tokenizer jinja request snapshot
#   JOBS=2 scripts/fuzz.sh 600 request snapshot
# Findings (crash-*, leak-*, timeout-*) land in build-fuzz/fuzz_logs/<target>/, new corpus entries
# in build-fuzz/fuzz_work/<target>/; the last line per target is libFuzzer's "Done N runs in S
# second(s)". Exit status 1 when any target found something.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3600}
shift || true
dpkg -s clang libclang-rt-14-dev >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq clang libclang-rt-14-dev; }
CC=clang scripts/build.sh build-fuzz -DRECUR_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
b=build-fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do t=${f##*/fuzz_}; targets+=("${t%.c}"); done
fi
run_one() {
  local t=$1 dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  mkdir -p "$b/fuzz_logs/$t" "$b/fuzz_work/$t" "$b/fuzz_corpus/$t"
  if "$b/fuzz_$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -max_len=65536 "${dict[@]}" \
       -artifact_prefix="$b/fuzz_logs/$t/" "$b/fuzz_work/$t" "$b/fuzz_corpus/$t" >"$b/fuzz_logs/$t.log" 2>&1; then
    echo "fuzz $t: ok, $(grep -a '^Done' "$b/fuzz_logs/$t.log" | tail -1)"
  else
    echo "fuzz $t: FOUND SOMETHING (see $b/fuzz_logs/$t.log and $b/fuzz_logs/$t/)"
    return 1
  fi
}
rc=0
pids=()
for t in "${targets[@]}"; do
  [ -x "$b/fuzz_$t" ] || { echo "no target fuzz_$t"; exit 2; }
  run_one "$t" & pids+=($!)
  if [ ${#pids[@]} -ge "${JOBS:-1}" ]; then wait "${pids[0]}" || rc=1; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
