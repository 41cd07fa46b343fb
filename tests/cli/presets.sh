#!/usr/bin/env bash
# tests/cli/presets.sh BUILD_DIR TESTDATA_DIR
#
# The real-size presets of `recur-gguf synth` (the tiny ones: synth.sh). Every preset is
# written with --weights zero — the header only, a sparse file, instant — and must carry the
# keys and tensor shapes of the released model as llama.cpp's converter writes them (values
# below from the HF configs; see tools/gguf_presets.c), load in recur, and report the
# per-sequence memory computed by hand here (`recur-gguf info`: recurrent state bytes, KV
# bytes per token). The smallest (mamba-130m) is also written with random weights and
# generates 8 tokens. The large presets are refused without --allow-large.
#
# RECUR_PRESETS_RUN=1 also writes every preset below 10 GB with random Q8_0 weights under
# $TMPDIR and runs `recur-cli -p hi -n 8` on it (minutes and ~10 GB of disk; not in ctest).
set -u
build=${1:?usage: presets.sh BUILD_DIR TESTDATA_DIR}
bin="$build/recur-gguf"
cli="$build/recur-cli"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# check_kv INFO KEY VALUE: the KV row of KEY shows VALUE (as `info` prints it; "-" = absent)
check_kv() {
    if [ "$3" = - ]; then
        grep -qE "^ +[0-9]+  $2 " "$1" && fail "$(basename "$1" .info): $2 is present"
        return
    fi
    local re
    re=$(printf '%s' "$3" | sed 's/[][().*+?^$|{}\\]/\\&/g')
    grep -qE "^ +[0-9]+  $2 +(\[[^]]*\]|[^ ]+) +$re\$" "$1" ||
        fail "$(basename "$1" .info): $2 is not $3 ($(grep -E "^ +[0-9]+  $2 " "$1" | sed -E 's/ +/ /g'))"
}

# check_tensor INFO NAME SHAPE: tensor NAME has SHAPE ("-" = absent)
check_tensor() {
    local got
    got=$(sed -n '/^tensors (/,$p' "$1" | sed -nE "s/^ *[0-9]+ +[A-Z0-9_]+ +[0-9]+ +[0-9]+ +(\[[^]]*\]) +$2\$/\1/p")
    [ "$got" = "$([ "$3" = - ] || echo "$3")" ] || fail "$(basename "$1" .info): $2 is ${got:-absent}, want $3"
}

# check_preset PRESET ARCH N_TENSORS STATE_BYTES KV_BYTES_PER_TOKEN [KEY=VALUE | TENSOR:SHAPE]...
check_preset() {
    local preset=$1 arch=$2 n=$3 rs=$4 kv=$5 info="$tmp/$1.info"
    shift 5
    local extra=()
    grep -q "^large:$preset\$" "$tmp/large.txt" && extra=(--allow-large)
    "$bin" synth --arch "$arch" --preset "$preset" -o "$tmp/$preset.gguf" --weights zero "${extra[@]}" >/dev/null 2>&1 ||
        { fail "synth $preset"; return; }
    "$bin" info "$tmp/$preset.gguf" >"$info" || { fail "info $preset"; return; }
    grep -qE "^tensors: +$n\$" "$info" || fail "$preset: $(grep -E '^tensors:' "$info"), want $n"
    grep -qE "^model: +$arch " "$info" || fail "$preset: not loaded: $(grep -E '^model:' "$info")"
    grep -qE "^state: +$rs bytes per sequence" "$info" || fail "$preset: $(grep -E '^state:' "$info"), want $rs"
    grep -qE "^KV cache: +$kv bytes per token" "$info" || fail "$preset: $(grep -E '^KV cache:' "$info"), want $kv"
    check_kv "$info" general.architecture "\"$arch\""
    local c
    for c in "$@"; do
        case $c in
            *=*) check_kv "$info" "$arch.${c%%=*}" "${c#*=}" ;;
            *:*) check_tensor "$info" "${c%%:*}" "${c#*:}" ;;
        esac
    done
    rm -f "$tmp/$preset.gguf"
}

# every preset has a row below; a new preset without one fails here
"$bin" synth --help | sed -nE 's/ *([a-z0-9.-]+) \(([a-z0-9]+)\),?/\1\n/gp' | grep -v tiny | grep . | sort >"$tmp/presets.txt"
[ -s "$tmp/presets.txt" ] || fail "no presets listed by synth --help"
tested=(qwen3-0.6b llama3-8b qwen35-0.8b qwen35-2b qwen35-4b qwen35moe-35b-a3b qwen3next-80b-a3b mamba-130m mamba2-370m lfm2-350m
        lfm2-1.2b)
printf '%s\n' "${tested[@]}" | sort | diff -u - "$tmp/presets.txt" || fail "presets without a check in presets.sh"
printf 'large:%s\n' qwen35moe-35b-a3b qwen3next-80b-a3b >"$tmp/large.txt"

# the large ones only when asked
for p in qwen35moe-35b-a3b:qwen35moe qwen3next-80b-a3b:qwen3next; do
    "$bin" synth --arch "${p#*:}" --preset "${p%:*}" -o "$tmp/big.gguf" --weights zero 2>"$tmp/err.txt"
    [ $? -eq 2 ] || fail "${p%:*} written without --allow-large"
    [ -e "$tmp/big.gguf" ] && fail "${p%:*}: a file was left behind"
    grep -q -- '--allow-large' "$tmp/err.txt" || fail "${p%:*}: refusal does not name --allow-large"
done

# Zero weights must make a sparse file; without holes every zero file below would take its
# full size on disk, so only the ones under 1 GB are checked then.
"$bin" synth --arch mamba2 --preset mamba2-370m -o "$tmp/sparse.gguf" --weights zero >/dev/null || fail "synth zero"
sparse=0
[ "$(du -k "$tmp/sparse.gguf" | cut -f1)" -lt $(($(stat -c %s "$tmp/sparse.gguf") / 10240)) ] && sparse=1
[ $sparse = 1 ] || echo "presets.sh: ${TMPDIR:-/tmp} has no sparse files: checking only presets under 1 GB"
rm -f "$tmp/sparse.gguf"
big() { [ $sparse = 1 ]; }

# Expected memory (bytes): recurrent state = n_recurrent_layers x ((conv_kernel - 1) x
# conv_channels + ssm_floats) x 4; KV per token = n_attention_layers x 2 (K, V) x n_kv_heads x
# head_dim x 2. DeltaNet: channels 2 x n_k x 128 + n_v x 128, ssm n_v x 128 x 128.
#   llama3 8b:      no recurrent layers; 32 x 2 x 8 x 128 x 2
#   qwen35 0.8b/2b: 18 x (3 x 6144 + 262144) x 4;  6 x 2 x 2 x 256 x 2
#   qwen35 4b:      24 x (3 x 8192 + 524288) x 4;  8 x 2 x 4 x 256 x 2
#   qwen35moe 35b:  30 x (3 x 8192 + 524288) x 4; 10 x 2 x 2 x 256 x 2
#   qwen3next 80b:  36 x (3 x 8192 + 524288) x 4; 12 x 2 x 2 x 256 x 2
#   mamba 130m:     24 x (3 x 1536 + 16 x 1536) x 4
#   mamba2 370m:    48 x (3 x (2048 + 2 x 128) + 128 x 2048) x 4
#   lfm2:           10 conv layers x 2 x n_embd x 4; 6 x 2 x 8 x 64 x 2
check_preset qwen3-0.6b qwen3 310 0 114688 block_count=28 attention.key_length=128 \
    token_embd.weight:"[1024, 151936]" output.weight:- blk.0.attn_q.weight:"[1024, 2048]"
big && check_preset llama3-8b llama 291 0 131072 block_count=32 feed_forward_length=14336 \
    attention.head_count_kv=8 rope.freq_base=500000 vocab_size=128256 token_embd.weight:"[4096, 128256]" \
    output.weight:"[4096, 128256]" blk.0.attn_k.weight:"[4096, 1024]" blk.31.ffn_down.weight:"[14336, 4096]"
check_preset qwen35-0.8b qwen35 335 20201472 12288 block_count=25 nextn_predict_layers=1 \
    context_length=262144 feed_forward_length=3584 rope.dimension_count=64 "rope.dimension_sections=[11, 11, 10, 0]" \
    full_attention_interval=4 ssm.group_count=16 ssm.time_step_rank=16 ssm.inner_size=2048 ssm.state_size=128 \
    rope.freq_base=1e+07 token_embd.weight:"[1024, 248320]" output.weight:- blk.0.attn_qkv.weight:"[1024, 6144]" \
    blk.0.ssm_conv1d.weight:"[4, 6144]" blk.0.ssm_out.weight:"[2048, 1024]" blk.3.attn_q.weight:"[1024, 4096]" \
    blk.3.attn_k.weight:"[1024, 512]" blk.3.attn_qkv.weight:- blk.0.ffn_down.weight:"[3584, 1024]" \
    blk.24.nextn.eh_proj.weight:"[2048, 1024]" blk.24.attn_q.weight:"[1024, 4096]" blk.24.ssm_a:-
big && check_preset qwen35-2b qwen35 335 20201472 12288 block_count=25 embedding_length=2048 \
    token_embd.weight:"[2048, 248320]" output.weight:- blk.0.attn_qkv.weight:"[2048, 6144]" \
    blk.3.attn_q.weight:"[2048, 4096]" blk.0.ffn_up.weight:"[2048, 6144]" blk.24.nextn.eh_proj.weight:"[4096, 2048]"
big && check_preset qwen35-4b qwen35 441 52690944 32768 block_count=33 attention.head_count=16 \
    attention.head_count_kv=4 ssm.time_step_rank=32 ssm.inner_size=4096 blk.0.attn_qkv.weight:"[2560, 8192]" \
    blk.0.attn_gate.weight:"[2560, 4096]" blk.0.ssm_beta.weight:"[2560, 32]" blk.0.ssm_a:"[32]" \
    blk.3.attn_q.weight:"[2560, 8192]" blk.3.attn_k.weight:"[2560, 1024]" blk.0.ffn_gate.weight:"[2560, 9216]" \
    blk.32.nextn.eh_proj.weight:"[5120, 2560]" output.weight:-
big && check_preset qwen35moe-35b-a3b qwen35moe 753 65863680 20480 block_count=41 nextn_predict_layers=1 \
    expert_count=256 expert_used_count=8 expert_feed_forward_length=512 expert_shared_feed_forward_length=512 \
    feed_forward_length=- output.weight:"[2048, 248320]" blk.0.ffn_gate_exps.weight:"[2048, 512, 256]" \
    blk.0.ffn_down_exps.weight:"[512, 2048, 256]" blk.0.ffn_gate_inp.weight:"[2048, 256]" \
    blk.0.ffn_gate_inp_shexp.weight:"[2048, 1]" blk.3.attn_q.weight:"[2048, 8192]" \
    blk.40.nextn.eh_proj.weight:"[4096, 2048]" blk.40.ffn_up_exps.weight:"[2048, 512, 256]"
big && check_preset qwen3next-80b-a3b qwen3next 863 79036416 24576 block_count=49 nextn_predict_layers=1 \
    expert_count=512 expert_used_count=10 feed_forward_length=5120 token_embd.weight:"[2048, 151936]" \
    blk.0.ssm_ba.weight:"[2048, 64]" blk.0.ssm_beta.weight:- blk.0.ffn_up_exps.weight:"[2048, 512, 512]" \
    blk.3.attn_k.weight:"[2048, 512]" blk.48.nextn.eh_proj.weight:"[4096, 2048]"
check_preset mamba-130m mamba 242 2801664 0 block_count=24 context_length=1048576 ssm.time_step_rank=48 \
    ssm.dt_b_c_rms=false token_embd.weight:"[768, 50280]" output.weight:- blk.0.ssm_in.weight:"[768, 3072]" \
    blk.0.ssm_x.weight:"[1536, 80]" blk.0.ssm_dt.weight:"[48, 1536]" blk.0.ssm_a:"[16, 1536]" \
    blk.23.ssm_out.weight:"[1536, 768]"
check_preset mamba2-370m mamba2 435 51658752 0 block_count=48 ssm.time_step_rank=32 ssm.group_count=1 \
    ssm.state_size=128 token_embd.weight:"[1024, 50288]" output.weight:"[1024, 50288]" \
    blk.0.ssm_in.weight:"[1024, 4384]" blk.0.ssm_conv1d.weight:"[4, 2304]" blk.0.ssm_a:"[1, 32]" \
    blk.0.ssm_norm.weight:"[2048, 1]" blk.47.ssm_out.weight:"[2048, 1024]"
check_preset lfm2-350m lfm2 148 81920 12288 block_count=16 feed_forward_length=4608 context_length=128000 \
    "attention.head_count_kv=[0, 0, 8, 0, 0, ...]" shortconv.l_cache=3 vocab_size=65536 \
    token_embd.weight:"[1024, 65536]" token_embd_norm.weight:"[1024]" output.weight:- \
    blk.0.shortconv.in_proj.weight:"[1024, 3072]" blk.0.shortconv.conv.weight:"[3, 1024]" \
    blk.2.attn_k.weight:"[1024, 512]" blk.2.attn_q_norm.weight:"[64]" blk.14.attn_v.weight:"[1024, 512]" \
    blk.15.ffn_down.weight:"[4608, 1024]"
big && check_preset lfm2-1.2b lfm2 148 163840 12288 feed_forward_length=8192 attention.head_count=32 \
    token_embd.weight:"[2048, 65536]" blk.2.attn_q.weight:"[2048, 2048]" blk.2.attn_k.weight:"[2048, 512]" \
    blk.14.ffn_gate.weight:"[2048, 8192]" blk.15.shortconv.conv.weight:"[3, 2048]"

# random weights: written, loaded, 8 tokens generated
"$bin" synth --arch mamba --preset mamba-130m -o "$tmp/m.gguf" --seed 3 >/dev/null 2>&1 || fail "synth mamba-130m"
"$cli" -m "$tmp/m.gguf" -p hi -n 8 -t 2 --ignore-eos >"$tmp/out.txt" 2>&1 || fail "recur-cli on mamba-130m"
grep -qE 'generation +8 tokens' "$tmp/out.txt" || fail "mamba-130m: $(tail -n 2 "$tmp/out.txt")"
rm -f "$tmp/m.gguf"

if [ "${RECUR_PRESETS_RUN:-0}" = 1 ]; then
    for p in qwen3-0.6b:qwen3 llama3-8b:llama qwen35-0.8b:qwen35 qwen35-2b:qwen35 qwen35-4b:qwen35 mamba2-370m:mamba2 \
             lfm2-350m:lfm2 lfm2-1.2b:lfm2; do
        "$bin" synth --arch "${p#*:}" --preset "${p%:*}" -o "$tmp/r.gguf" >/dev/null 2>&1 || fail "synth ${p%:*}"
        "$cli" -m "$tmp/r.gguf" -p hi -n 8 -t 2 --ignore-eos >"$tmp/out.txt" 2>&1 || fail "recur-cli on ${p%:*}"
        grep -E 'generation +8 tokens' "$tmp/out.txt" || fail "${p%:*}: $(tail -n 2 "$tmp/out.txt")"
        rm -f "$tmp/r.gguf"
    done
fi

if [ "$fails" -ne 0 ]; then
    echo "presets.sh: $fails failure(s)" >&2
    exit 1
fi
echo "presets.sh: ok"
