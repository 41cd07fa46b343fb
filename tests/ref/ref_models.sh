#!/usr/bin/env bash
# Reference vectors: for every llama / qwen3 tiny model in ../shared/testdata/models and every
# case, recur-cli's logits at every prompt position and its 32 greedy ids are judged by
# ../shared/tools/refcheck.py (llama.cpp's outputs, the tolerance of testdata/README.md).
# usage: ref_models.sh BUILD_DIR TESTDATA_DIR [ARCH...]
set -u
build=$1; data=$2; shift 2
archs=${*:-llama qwen3}
refcheck=$data/../tools/refcheck.py
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
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
      if python3 "$refcheck" "$ref" $c "$tmp/logits" --greedy "$tmp/greedy"; then
        pass=$((pass + 1))
      else
        fail=$((fail + 1))
      fi
    done
  done
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
