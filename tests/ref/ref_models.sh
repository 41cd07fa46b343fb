#!/usr/bin/env bash
# Reference vectors: for every llama / qwen3 / lfm2 / mamba / mamba2 / qwen35 / qwen35moe / qwen3next tiny model in ../shared/testdata/models and every
# case, recur-cli's logits at every prompt position and its 32 greedy ids are judged by
# ../shared/tools/refcheck.py (llama.cpp's outputs, the tolerance of testdata/README.md).
# usage: ref_models.sh BUILD_DIR TESTDATA_DIR [ARCH...]
set -u
build=$1; data=$2; shift 2
archs=${*:-llama qwen3 lfm2 mamba mamba2 qwen35 qwen35moe qwen3next}
refcheck=$data/../tools/refcheck.py
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0; known=0

# Cases where recur's logits cannot reproduce llama.cpp's bits. Each still runs, with the
# weaker check named here, and its refcheck verdict is printed. Remove a line when the case
# passes. Elsewhere the two engines agree to the bit on every prompt row of every Q8_0 and
# BF16 case (300 tokens included: max|diff| 0) since recur computes
#  - the exps of softmax, SiLU and SwiGLU with ggml's vectorised expf where ggml's AVX-512
#    build does (chunks of 16 from the row start) and libm's expf elsewhere (row tails,
#    sigmoid, softplus, the SSM scan, the gated delta net): tensor/ops.h, exp_ref.c; libm's
#    expf differs from it on ~6% of floats, and one flip before a Q8_0 / BF16 activation
#    rounding grew to 0.09-0.14 at 300 tokens;
#  - BF16 matmuls in the order of the reference's tinyBLAS with vdpbf16ps (system_info:
#    AVX512_BF16), and ggml_vec_dot_bf16's order for weights whose row count is not a
#    multiple of 4, which tinyBLAS declines (qwen35's 2-row ssm_alpha / ssm_beta): dot_ref.c.
# What remains: F32/F16 weights use ggml_vec_dot's order where llama.cpp's prompt batches use
# tinyBLAS (F32 within 3e-4), and single-token steps in llama.cpp take the vec_dot order for
# every weight (BF16 case0: 4.8e-7); both far inside the tolerance.
#  - qwen3 Q4_K_M case1/2 greedy: the reference's top-2 margins at the diverging steps (0.041,
#    0.030) are below how much llama.cpp itself moves with the batch split
#    (batch7_max_abs_diff 0.125-0.28). Weaker check: refcheck on the logits, greedy not judged.
#    Same for pub-mamba-Q4_K_M case1 (margin 0.019 at greedy step 2, batch7 0.031) and
#    pub-lfm2-Q4_K_M case2 (margin 0.062 at step 1, batch7 0.21). Not an exp effect: the
#    vectorised exp left these unchanged (Q4_K_M logits differ from the first token, ~1e-6,
#    presumably the K-quant dot order: the reference repacks Q4_K weights, REPACK in its
#    system_info; llama.cpp's own batch split moves its logits by far more).
known_case() {
  case "$1 $2" in
    "pub-qwen3-Q4_K_M 1"|"pub-qwen3-Q4_K_M 2"|"pub-mamba-Q4_K_M 1"|"pub-lfm2-Q4_K_M 2") echo nogreedy ;;
    *) echo "" ;;
  esac
}
logits_only() {   # logits_only REF CASE LOGITS: refcheck without the greedy ids
  local out st
  out=$(python3 "$refcheck" "$@"); st=$?
  echo "  logits only: $out"
  return $st
}
weak_logits() {   # weak_logits REF CASE LOGITS: |diff| <= 0.25 everywhere, argmax where margin > 0.10
  python3 - "$@" <<'PY'
import array, json, os, sys
ref = json.load(open(sys.argv[1])); case = ref["cases"][int(sys.argv[2])]; nv = case["n_vocab"]
def rows(p):
    a = array.array("f"); a.frombytes(open(p, "rb").read()); return [a[i:i + nv] for i in range(0, len(a), nv)]
want = rows(os.path.join(os.path.dirname(sys.argv[1]), case["logits_file"]))
lo, hi = case.get("logits_rows", [0, len(want)])
got = rows(sys.argv[3])[lo:hi]
worst = max(max(abs(a - b) for a, b in zip(w, g)) for w, g in zip(want, got))
bad = 0
for w, g in zip(want, got):
    i = max(range(nv), key=w.__getitem__); m = w[i] - max(v for j, v in enumerate(w) if j != i)
    bad += m > 0.10 and max(range(nv), key=g.__getitem__) != i
print(f"  weaker check: max|diff| {worst:.4g} (<= 0.25), argmax mismatches {bad}")
sys.exit(0 if worst <= 0.25 and bad == 0 else 1)
PY
}
for arch in $archs; do
  for ref in "$data"/models/pub-$arch-*.ref.json; do
    model=${ref%.ref.json}.gguf
    ncases=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["cases"]))' "$ref")
    for ((c = 0; c < ncases; c++)); do
      ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["cases"][int(sys.argv[2])]["prompt"])))' "$ref" $c)
      if ! "$build/recur-cli" -q -m "$model" --prompt-tokens "$ids" -n 32 --temp 0 --ignore-eos -t 2 \
            --logits-out "$tmp/logits" --greedy-out "$tmp/greedy" > "$tmp/out" 2> "$tmp/err"; then
        echo "FAIL $(basename "$model") case$c: recur-cli failed: $(cat "$tmp/err")"; fail=$((fail + 1)); continue
      fi
      kind=$(known_case "$(basename "$model" .gguf)" $c)
      if python3 "$refcheck" "$ref" $c "$tmp/logits" --greedy "$tmp/greedy"; then
        pass=$((pass + 1))
        [ -n "$kind" ] && echo "  (listed as a known divergence but passes now: remove it from known_case)"
      elif [ "$kind" = logits025 ] && weak_logits "$ref" $c "$tmp/logits"; then
        known=$((known + 1))
      elif [ "$kind" = nogreedy ] && logits_only "$ref" $c "$tmp/logits"; then
        known=$((known + 1))
      else
        fail=$((fail + 1))
      fi
    done
  done
done
echo "ref_models: $pass cases within llama.cpp's tolerance, $known known divergences within the weaker check"
echo "$((pass + known)) passed, $fail failed"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
