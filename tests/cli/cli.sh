#!/usr/bin/env bash
# recur-cli from the outside: help and usage errors, bad models, the default random-weight
# model written on first use, interactive turns, and the black-box outputs.
# usage: cli.sh BUILD_DIR TESTDATA_DIR
set -u
build=$(cd "$1" && pwd); data=$2
cli=$build/recur-cli
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
check() {   # check NAME EXPECTED_RC COMMAND...  (stdout+stderr in $tmp/out)
  local name=$1 want=$2; shift 2
  "$@" > "$tmp/out" 2>&1; local rc=$?
  if [ "$rc" -eq "$want" ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $name: exit $rc, wanted $want"; head -5 "$tmp/out"; fi
}
has() {     # has NAME PATTERN: the last output contains PATTERN
  if grep -q -- "$2" "$tmp/out"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $1: output lacks '$2'"; head -5 "$tmp/out"; fi
}
stories=$data/models/stories260K.gguf

check help 0 "$cli" --help;                      has help "--prompt-tokens"
check bad-option 2 "$cli" --no-such-flag
check missing-value 2 "$cli" -m
check missing-model 1 "$cli" -m "$tmp/nope.gguf" -p hi;   has missing-model "nope.gguf"
printf 'GGUF\3\0\0\0garbage' > "$tmp/bad.gguf"
check bad-model 1 "$cli" -m "$tmp/bad.gguf" -p hi;        has bad-model "gguf"
check empty-prompt 1 "$cli" -m "$stories" --prompt-tokens ""
check token-range 1 "$cli" -m "$stories" --prompt-tokens 1,99999 -n 1;   has token-range "99999"
check q8-order-bad 2 "$cli" -m "$stories" --q8-order fast;   has q8-order-bad "ggml or block"
# the block order runs, and on a Q8_0 model gives other logits than ggml's (the same greedy
# text is likely but not asserted)
q8=$data/models/pub-qwen3-Q8_0.gguf
check q8-order-ggml 0 "$cli" -m "$q8" --prompt-tokens 1,2,3,4,5 -n 0 -q --logits-out "$tmp/lg.f32"
check q8-order-block 0 "$cli" -m "$q8" --prompt-tokens 1,2,3,4,5 -n 0 -q --q8-order block --logits-out "$tmp/lb.f32"
if [ -s "$tmp/lb.f32" ] && ! cmp -s "$tmp/lg.f32" "$tmp/lb.f32"; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL q8-order-block: same logits as ggml's order (or none)"; fi

# Q5_K matrices packed at load (where the CPU has the packed kernel, in its table's layout) give
# the file layout's logits, through the prompt gemm (one ubatch), the several-token kernel
# (ubatches of 4) and the single-token one (of 1)
"$build/recur-gguf" synth --arch qwen3 --preset qwen3-tiny --type Q5_K -o "$tmp/q5.gguf" > /dev/null
for ub in 512 4 1; do
  check "q5-packed-ub$ub" 0 "$cli" -q -m "$tmp/q5.gguf" --prompt-tokens "$(seq -s, 1 40)" -n 0 -ub $ub \
    --logits-out "$tmp/q5p$ub.f32"
  check "q5-file-ub$ub" 0 env RECUR_NO_REPACK=q5 "$cli" -q -m "$tmp/q5.gguf" --prompt-tokens "$(seq -s, 1 40)" -n 0 \
    -ub $ub --logits-out "$tmp/q5f$ub.f32"
  if [ -s "$tmp/q5p$ub.f32" ] && cmp -s "$tmp/q5p$ub.f32" "$tmp/q5f$ub.f32"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL q5-packed-ub$ub: packed Q5_K logits differ from the file layout's"; fi
done

# the default model: written by recur-gguf synth on first use, announced as random weights
cd "$tmp" || exit 1
check default-model 0 "$cli" -p "hello" -n 8
has default-banner "RANDOM weights"
[ -f "$tmp/models/default.gguf" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL default model file"; }
check default-again 0 "$cli" -p "hello" -n 4
cd - > /dev/null || exit 1

# interactive: two more turns from stdin continue the same sequence
check interactive 0 bash -c "printf 'One day\nThe end\n' | '$cli' -m '$stories' -p 'Once upon a time' -n 8 -i --temp 0"
has interactive-speed "generation"

# black-box outputs: logits of every prompt position and the greedy ids
check outputs 0 "$cli" -q -m "$stories" --prompt-tokens 1,403,407 -n 5 --temp 0 --ignore-eos \
    --logits-out "$tmp/l.f32" --greedy-out "$tmp/g.txt"
[ "$(stat -c %s "$tmp/l.f32")" -eq $((3 * 512 * 4)) ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL logits size"; }
[ "$(wc -l < "$tmp/g.txt")" -eq 5 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL greedy count"; }
# same seed, same text; batch size never changes the result
check seed-a 0 "$cli" -q -m "$stories" -p "Once" -n 24 --seed 7 --temp 0.9; cp "$tmp/out" "$tmp/a"
check seed-b 0 "$cli" -q -m "$stories" -p "Once" -n 24 --seed 7 --temp 0.9 -b 2 -ub 1 -t 1
cmp -s "$tmp/a" "$tmp/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL same seed gave different text"; }

# the sampler chain from the command line: a banned token never comes out, the penalties
# (which see the prompt) break a greedy loop, bad options are usage errors
greedy() {  # greedy NAME ARGS...: 12 greedy ids after the prompt 1,403,407 into $tmp/NAME
  local name=$1; shift
  check "$name" 0 "$cli" -q -m "$stories" --prompt-tokens 1,403,407 -n 12 --temp 0 --ignore-eos --greedy-out "$tmp/$name" "$@"
}
greedy plain
first=$(head -1 "$tmp/plain")
greedy banned -l "$first-inf"
grep -qx "$first" "$tmp/banned" && { fail=$((fail + 1)); echo "FAIL banned token $first came out"; } || pass=$((pass + 1))
greedy loop -l "$first-inf"                              # without it, this prompt loops on one token
[ "$(sort -u "$tmp/loop" | wc -l)" -eq 1 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL expected a greedy loop"; }
for pen in "--repeat-penalty 3" "--presence-penalty 5" "--frequency-penalty 2"; do
  # shellcheck disable=SC2086
  greedy pen -l "$first-inf" $pen
  [ "$(sort -u "$tmp/pen" | wc -l)" -gt 6 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL $pen did not break the loop"; }
done
greedy off -l "$first-inf" --repeat-penalty 3 --repeat-last-n 0
cmp -s "$tmp/loop" "$tmp/off" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --repeat-last-n 0 did not turn the penalties off"; }
check sampling-flags 0 "$cli" -q -m "$stories" -p "Once" -n 8 --min-p 0.1 --typical 0.9 --min-keep 2 --top-k 0 --top-p 0.8
check bad-bias 2 "$cli" -m "$stories" -p "Once" -l 5x;            has bad-bias "logit-bias"
check bias-range 1 "$cli" -m "$stories" -p "Once" -l 99999+1;     has bias-range "99999"
check bad-last-n 2 "$cli" -m "$stories" -p "Once" --repeat-last-n -2

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
