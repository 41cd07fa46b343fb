#!/usr/bin/env bash
# tests/cli/synth.sh BUILD_DIR TESTDATA_DIR
#
# `recur-gguf synth` must write the tensor names and shapes, and the {arch}.* hyperparameters,
# of the converter-written tiny models in TESTDATA_DIR/models (pub-<arch> for every arch), and
# at Q8_0 the tensor types llama-quantize chose for pub-<arch>-Q8_0; the output must be
# deterministic in --seed, and `recur-gguf info` must reject a damaged file. (The real-size
# presets: tests/cli/presets.sh.)
set -u
build=${1:?usage: synth.sh BUILD_DIR TESTDATA_DIR}
data=${2:?usage: synth.sh BUILD_DIR TESTDATA_DIR}
bin="$build/recur-gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# "name shape" of every tensor row of `info` output, sorted (the type column is ignored).
tensor_list() {
    sed -n '/^tensors (/,$p' "$1" | sed -nE 's/^ *[0-9]+ +[A-Z0-9_?]+ +[0-9]+ +[0-9]+ +(\[[^]]*\]) +(.*)$/\2 \1/p' | sort
}

# "{arch}.key type value" lines of the KV table, sorted.
hparams() {
    sed -n '/^KVs (/,/^tensors (/p' "$1" | sed -nE "s/^ *[0-9]+ +($2\\.[^ ]+ +.*)$/\\1/p" | sed -E 's/ +/ /g' | sort
}

check_preset() {   # arch preset pub-file
    local arch=$1 preset=$2 pub="$data/models/$3"
    "$bin" synth --arch "$arch" --preset "$preset" -o "$tmp/$preset.gguf" --seed 7 >/dev/null ||
        { fail "synth $preset"; return; }
    "$bin" info "$tmp/$preset.gguf" >"$tmp/$preset.info" || { fail "info $preset"; return; }
    "$bin" info "$pub" >"$tmp/pub.info" || { fail "info $pub"; return; }
    tensor_list "$tmp/$preset.info" >"$tmp/a.txt"
    tensor_list "$tmp/pub.info" >"$tmp/b.txt"
    [ -s "$tmp/a.txt" ] || fail "$preset: no tensors parsed from info output"
    diff -u "$tmp/b.txt" "$tmp/a.txt" || fail "$preset: tensor names/shapes differ from $3"
    local n_synth n_pub
    n_synth=$(grep -E '^tensors:' "$tmp/$preset.info" | awk '{print $2}')
    n_pub=$(grep -E '^tensors:' "$tmp/pub.info" | awk '{print $2}')
    [ "$n_synth" = "$n_pub" ] || fail "$preset: $n_synth tensors, $3 has $n_pub"
    hparams "$tmp/$preset.info" "$arch" >"$tmp/a.txt"
    hparams "$tmp/pub.info" "$arch" >"$tmp/b.txt"
    [ -s "$tmp/a.txt" ] || fail "$preset: no $arch.* keys"
    diff -u "$tmp/b.txt" "$tmp/a.txt" || fail "$preset: $arch.* hyperparameters differ from $3"
    grep -q 'general.name .*"recur synth '"$preset"' (random weights)"' "$tmp/$preset.info" ||
        fail "$preset: general.name"
    grep -qE 'general.file_type +uint32 +7$' "$tmp/$preset.info" || fail "$preset: file_type 7 for Q8_0"
    grep -qE 'tokenizer.ggml.tokens +\[string; 512\] +\["<unk>", "<s>", "</s>", "<0x00>"' "$tmp/$preset.info" ||
        fail "$preset: vocabulary"
    # norms stay F32, weights take --type
    grep -qE '^ +[0-9]+ +F32 .* (output|token_embd)_norm.weight$' "$tmp/$preset.info" || fail "$preset: final norm not F32"
    grep -qE '^ +[0-9]+ +Q8_0 .* token_embd.weight$' "$tmp/$preset.info" || fail "$preset: token_embd not Q8_0"
}

# "name type" of every tensor row
tensor_types() {
    sed -n '/^tensors (/,$p' "$1" | sed -nE 's/^ *[0-9]+ +([A-Z0-9_?]+) +[0-9]+ +[0-9]+ +\[[^]]*\] +(.*)$/\2 \1/p' | sort
}

for arch in llama qwen3 qwen35 qwen35moe qwen3next mamba mamba2 lfm2; do
    check_preset "$arch" "$arch-tiny" "pub-$arch-F32.gguf"
    # F32 for norms, routers, conv kernels, ssm_a/ssm_d and biases, F16 for rows that do not
    # fill Q8_0 blocks: as the converter and llama-quantize decided for the pub model
    "$bin" info "$data/models/pub-$arch-Q8_0.gguf" | tensor_types /dev/stdin >"$tmp/b.txt"
    tensor_types "$tmp/$arch-tiny.info" >"$tmp/a.txt"
    diff -u "$tmp/b.txt" "$tmp/a.txt" || fail "$arch-tiny: tensor types differ from pub-$arch-Q8_0"
done

# deterministic: same seed, same bytes; another seed, other bytes
"$bin" synth --arch qwen3 --preset qwen3-tiny -o "$tmp/again.gguf" --seed 7 >/dev/null || fail "synth again"
cmp -s "$tmp/qwen3-tiny.gguf" "$tmp/again.gguf" || fail "same seed gave different files"
"$bin" synth --arch qwen3 --preset qwen3-tiny -o "$tmp/other.gguf" --seed 8 >/dev/null || fail "synth seed 8"
cmp -s "$tmp/qwen3-tiny.gguf" "$tmp/other.gguf" && fail "different seeds gave the same file"

# other weight types the quantizers of this build support
for t in F32 F16 BF16; do
    "$bin" synth --arch llama --preset llama-tiny -o "$tmp/t.gguf" --type "$t" >/dev/null || fail "synth --type $t"
    "$bin" info "$tmp/t.gguf" | grep -qE "^ +[0-9]+ +$t .* blk.0.ffn_down.weight$" || fail "--type $t not applied"
done

# quantized types: checked when this build's tensor module has their quantizers
for t in Q4_0 Q4_K Q5_K Q6_K; do
    if "$bin" synth --arch qwen3 --preset qwen3-tiny -o "$tmp/t.gguf" --type "$t" >/dev/null 2>"$tmp/err.txt"; then
        "$bin" info "$tmp/t.gguf" | grep -qE "^ +[0-9]+ +$t .* blk.3.ffn_up.weight$" || fail "--type $t not applied"
    elif grep -q 'no quantizer' "$tmp/err.txt"; then
        echo "synth.sh: skip --type $t (no quantizer in this build)"
    else
        fail "synth --type $t: $(cat "$tmp/err.txt")"
    fi
done

# usage errors exit 2, bad files exit 1 with a message
"$bin" synth --arch llama --preset qwen3-tiny -o "$tmp/x.gguf" 2>/dev/null; [ $? -eq 2 ] || fail "arch mismatch accepted"
"$bin" synth --arch llama --preset nope -o "$tmp/x.gguf" 2>/dev/null; [ $? -eq 2 ] || fail "unknown preset accepted"
"$bin" synth --arch llama --preset llama-tiny -o "$tmp/x.gguf" --type Q9 2>/dev/null; [ $? -eq 2 ] || fail "bad type accepted"
"$bin" synth --help | grep -q 'usage: recur-gguf synth' || fail "synth --help"
"$bin" --help | grep -q 'info FILE' || fail "--help"
"$bin" bogus 2>/dev/null; [ $? -eq 2 ] || fail "unknown command accepted"
head -c 5000 "$tmp/llama-tiny.gguf" >"$tmp/cut.gguf"
"$bin" info "$tmp/cut.gguf" >/dev/null 2>"$tmp/err.txt"; [ $? -eq 1 ] || fail "truncated file accepted"
grep -q 'gguf: .*offset' "$tmp/err.txt" || fail "no error message for a truncated file"
"$bin" info "$tmp/missing.gguf" >/dev/null 2>&1; [ $? -eq 1 ] || fail "missing file accepted"

if [ "$fails" -ne 0 ]; then
    echo "synth.sh: $fails failure(s)" >&2
    exit 1
fi
echo "synth.sh: ok"
