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
#  - Q4_K weights in ggml's orders (tensor/tensor_impl.h): ggml's x86 CPU backend repacks
#    Q4_K weights whose row count is a multiple of 8 (repack.cpp, ggml_repack_get_optimal_
#    repack_type: block_q4_Kx8 when AVX2; Q5_K / Q6_K / Q8_0 are repacked on ARM only) and
#    multiplies them with ggml_gemm_q4_K_8x8_q8_K: per 64-element chunk an exact integer sum,
#    then fma into a d chain and a dmin chain. recur takes that order for every batch; the
#    other Q4_K weights (qwen35's 2-row ssm_alpha / ssm_beta) take ggml_vec_dot_q4_K_q8_K's
#    AVX2 lane order. With both, every Q4_K_M prompt row agrees to ~2e-6 where nothing else
#    differs (37-token cases of mamba, mamba2, qwen3, qwen35, qwen35moe).
# What remains: F32/F16 weights use ggml_vec_dot's order where llama.cpp's prompt batches use
# tinyBLAS (F32 within 3e-4); single-token steps in llama.cpp take the vec_dot order for every
# weight (BF16 case0: 4.8e-7); and llama.cpp's repacked Q4_K is itself batch-dependent: in a
# ubatch, rows in whole groups of 4 take the gemm above, the last n_tokens % 4 rows and every
# single-token step take ggml_gemv_q4_K_8x8_q8_K (one fma per 256-element block, not per
# chunk), and MUL_MAT_ID (MoE experts) always takes the gemv. recur cannot follow that without
# depending on the batch, so Q4_K_M greedy steps and last rows of odd-length prompts may
# differ by ~1e-6 before chaotic growth (llama.cpp's own batch7_max_abs_diff shows the same).
# No case needs a weaker check at present; a line here would name one with its reason.
known_case() {
  case "$1 $2" in
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
