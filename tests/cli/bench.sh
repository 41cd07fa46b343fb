#!/usr/bin/env bash
# tests/cli/bench.sh BUILD_DIR TESTDATA_DIR
#
# recur-bench's formats on tiny models (-p 16 -n 4 -r 1; no timing is asserted): the md table
# has llama-bench's columns and rows, then the efficiency and memory tables; json parses and
# holds llama-bench's fields plus recur's; csv has a header and a row per test; model size and
# parameter count match what llama-bench reports for the same file; MoE models count only the
# used experts per generated token; a generated token also reads its sequence's recurrent state
# and the KV rows it attends (what recur-gguf info reports per sequence and per position), at
# any -d depth; tg tests also time each token (percentiles, efficiency at the median);
# --profile adds a table (and json fields) of where a token's time goes, and one of the matmul
# calls by kind;
# --checkpoints measures a recurrent model and says that a transformer has nothing to
# checkpoint; --prefetch-ab prints its comparisons; --batched has llama-batched-bench's table and
# fields.
set -u
build=${1:?usage: bench.sh BUILD_DIR TESTDATA_DIR}
data=${2:?usage: bench.sh BUILD_DIR TESTDATA_DIR}
bin="$build/recur-bench"
models="$data/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

qwen3="$models/pub-qwen3-Q8_0.gguf"
moe="$models/pub-qwen35moe-Q8_0.gguf"
mamba2="$models/pub-mamba2-Q8_0.gguf"
small=(-p 16 -n 4 -r 1 -t 2 --bw-mib 64)

# ---- md ----
"$bin" -m "$qwen3" "${small[@]}" >"$tmp/md.txt" 2>"$tmp/md.err" || fail "md run: $(cat "$tmp/md.err")"
head -1 "$tmp/md.txt" | tr -s ' ' | grep -qxF '| model | size | params | backend | threads | test | t/s |' ||
    fail "md header: $(head -1 "$tmp/md.txt")"
sed -n 2p "$tmp/md.txt" | grep -qE '^\| -+ \| -+: \| -+: \| -+ \| -+: \| -+: \| -+: \|$' || fail "md separator line"
grep -qE '^\| qwen3 [^|]*Q8_0 +\| +2\.27 MiB \| +2\.23 M \| CPU +\| +2 \| +pp16 \| +[0-9]+\.[0-9]{2} ± 0\.00 \|$' "$tmp/md.txt" ||
    fail "md pp16 row"
grep -qE '^\| qwen3 [^|]*Q8_0 +\| +2\.27 MiB \| +2\.23 M \| CPU +\| +2 \| +tg4 \| +[0-9]+\.[0-9]{2} ± 0\.00 \|$' "$tmp/md.txt" ||
    fail "md tg4 row"
grep -qE '^machine, 2 threads: read [0-9.]+ GB/s .*FMA peak [0-9.]+ GFLOP/s .*, int8 dot peak [0-9.]+ GOP/s' "$tmp/md.txt" || fail "md machine line"
# the read bw carries a * where its two measurements differ by more than 25 % (the machine's
# doing, so either form passes), and such a test is then listed with both under the table
grep -qE '\| +tg4 \|.* MB \| +[0-9.]+ GB/s \| +[0-9.]+ GB/s\*? \| +[0-9.]+ \| +[0-9.]+ % of read bw \|$' "$tmp/md.txt" ||
    fail "md tg efficiency row"
if grep -qE '\| +tg4 \|.* GB/s\* \|' "$tmp/md.txt"; then
    grep -qE '^\* .* tg4: read bw [0-9.]+ GB/s before, [0-9.]+ after$' "$tmp/md.txt" || fail "md: a * without its listing"
fi
grep -qE '\| +pp16 \|.* GFLOP \|.* GFLOP/s \| +- \| +[0-9.]+ \| +[0-9.]+ % of (FMA|int8) peak \|$' "$tmp/md.txt" || fail "md pp efficiency row"
grep -qE '^\| qwen3 .*\| +[0-9.]+ MiB \| +[0-9.]+ MiB \| +[0-9.]+ MiB \|$' "$tmp/md.txt" || fail "md memory row"
grep -qE '\| +tg4 \|( +[0-9]+\.[0-9]{3} ms \|){4} +[0-9.]+ \| +[0-9.]+ % of read bw \|$' "$tmp/md.txt" || fail "md tg tokens row"
[ "$(grep -cE '\| +pp16 \|.* ms \|' "$tmp/md.txt")" = 0 ] || fail "md tokens table has a pp row"

# ---- json: llama-bench's fields, recur's, the values of the file ----
"$bin" -m "$qwen3,$moe" "${small[@]}" -o json >"$tmp/out.json" 2>"$tmp/json.err" || fail "json run: $(cat "$tmp/json.err")"
# what recur-gguf info says a sequence's state and a position's K and V take
seqinfo() { "$build/recur-gguf" info "$1" | awk '/^state:/ {s = $2} /^KV cache:/ {k = $3} END {print s, k}'; }
python3 - "$tmp/out.json" "$qwen3" "$moe" "$(seqinfo "$qwen3")" "$(seqinfo "$moe")" <<'PY' || fail "json content"
import json, sys
rows = json.load(open(sys.argv[1]))
qwen3, moe = sys.argv[2], sys.argv[3]
seq = {qwen3: [int(v) for v in sys.argv[4].split()], moe: [int(v) for v in sys.argv[5].split()]}
assert isinstance(rows, list) and len(rows) == 4, f"{len(rows)} rows, want 4"
llama_fields = ["model_filename", "model_type", "model_size", "model_n_params", "n_batch", "n_ubatch",
                "n_threads", "n_prompt", "n_gen", "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
                "samples_ns", "samples_ts"]
ours = ["read_bw_gbs", "read_bw_near_gbs", "read_bw_before_gbs", "read_bw_after_gbs", "fma_peak_gflops", "bytes_per_token", "weight_bytes_per_token",
        "state_bytes_per_token", "kv_bytes_per_token", "flops_per_token", "bw_efficiency",
        "fma_efficiency", "int8_peak_gops", "pp_efficiency", "rss_load_bytes", "rss_bytes", "rss_peak_bytes",
        "token_ms_p50", "token_ms_p90", "token_ms_p99", "token_ms_max", "bw_efficiency_p50",
        "read_bw_1stream_gbs", "read_bw_2streams_gbs", "read_bw_4streams_gbs"]
for r in rows:
    missing = [f for f in llama_fields + ours if f not in r]
    assert not missing, f"missing {missing}"
    assert r["n_threads"] == 2 and r["n_batch"] == 2048 and r["n_ubatch"] == 512
    assert len(r["samples_ns"]) == 1 and len(r["samples_ts"]) == 1 and r["samples_ns"][0] > 0
    assert r["stddev_ts"] == 0 and r["avg_ts"] > 0
    toks = r["n_prompt"] + r["n_gen"]
    assert abs(r["avg_ts"] - 1e9 * toks / r["samples_ns"][0]) <= 1e-3 * r["avg_ts"], "avg_ts != tokens / time"
    assert r["read_bw_gbs"] > 0 and r["fma_peak_gflops"] > 0 and r["int8_peak_gops"] >= 0
    assert 0 < r["rss_load_bytes"] <= r["rss_peak_bytes"] and r["rss_bytes"] <= r["rss_peak_bytes"]
by = {(r["model_filename"], r["n_prompt"], r["n_gen"]): r for r in rows}
assert set(by) == {(qwen3, 16, 0), (qwen3, 0, 4), (moe, 16, 0), (moe, 0, 4)}, sorted(by)
# what llama-bench reports for these files (an independent count)
assert by[(qwen3, 16, 0)]["model_size"] == 2378752 and by[(qwen3, 16, 0)]["model_n_params"] == 2231040
for m in (qwen3, moe):
    pp, tg = by[(m, 16, 0)], by[(m, 0, 4)]
    assert pp["bytes_per_token"] is None and pp["bw_efficiency"] is None and pp["fma_efficiency"] > 0
    assert pp["weight_bytes_per_token"] is None and pp["state_bytes_per_token"] is None and pp["kv_bytes_per_token"] is None
    # tg reads the weights, the sequence's state once and the K and V of the positions it
    # attends: 1..4 for tg4 from an empty context, 2.5 on average
    state, kv = seq[m]
    assert tg["state_bytes_per_token"] == state and tg["kv_bytes_per_token"] == 2.5 * kv > 0, (tg, state, kv)
    assert tg["bytes_per_token"] == tg["weight_bytes_per_token"] + state + 2.5 * kv
    assert tg["flops_per_token"] is None and tg["fma_efficiency"] is None and tg["bw_efficiency"] > 0
    assert pp["flops_per_token"] > 0 and tg["pp_efficiency"] is None
    # pp against the peak its weights run at: the int8 dot peak (quantized, VNNI) or the fp32 one
    got = pp["avg_ts"] * pp["flops_per_token"] / 1e9
    peaks = [pp["fma_peak_gflops"]] + ([pp["int8_peak_gops"]] if pp["int8_peak_gops"] > 0 else [])
    assert any(abs(pp["pp_efficiency"] - got / p) < 1e-3 * pp["pp_efficiency"] for p in peaks), pp["pp_efficiency"]
    # tg against the bandwidth measured right around it; pp has none
    assert tg["read_bw_near_gbs"] > 0 and pp["read_bw_near_gbs"] is None
    # ... the mean of the measurement before the runs and the one after, both reported
    assert tg["read_bw_before_gbs"] > 0 and tg["read_bw_after_gbs"] > 0
    assert abs(tg["read_bw_near_gbs"] - (tg["read_bw_before_gbs"] + tg["read_bw_after_gbs"]) / 2) < 1e-6 * tg["read_bw_near_gbs"]
    assert pp["read_bw_before_gbs"] is None and pp["read_bw_after_gbs"] is None
    # each read pattern's best pass (1, 2, 4 streams a thread): the roofline is the fastest of them
    pats = ("1stream", "2streams", "4streams")
    by_m = [tg["read_bw_%s_gbs" % k] for k in pats]
    assert all(v > 0 for v in by_m) and abs(max(by_m) - tg["read_bw_gbs"]) < 1e-6 * tg["read_bw_gbs"], by_m
    by_n = [tg["read_bw_near_%s_gbs" % k] for k in pats]
    assert all(v > 0 for v in by_n) and max(by_n) <= tg["read_bw_near_gbs"] * (1 + 1e-9), by_n
    assert all(pp["read_bw_near_%s_gbs" % k] is None for k in pats)
    # tg tokens one by one: ordered percentiles; the longest at least the run's mean token; pp none
    q = [tg["token_ms_" + k] for k in ("p50", "p90", "p99", "max")]
    assert 0 < q[0] <= q[1] <= q[2] <= q[3], q
    assert q[3] * tg["n_gen"] >= 0.8 * tg["samples_ns"][0] / 1e6, (q, tg["samples_ns"])
    assert abs(tg["bw_efficiency_p50"] - 1e3 / q[0] * tg["bytes_per_token"] / (tg["read_bw_near_gbs"] * 1e9)) < 1e-3 * tg["bw_efficiency_p50"]
    assert all(pp["token_ms_" + k] is None for k in ("p50", "p90", "p99", "max")) and pp["bw_efficiency_p50"] is None
    assert abs(tg["bw_efficiency"] - tg["avg_ts"] * tg["bytes_per_token"] / (tg["read_bw_near_gbs"] * 1e9)) < 1e-3 * tg["bw_efficiency"]
# dense with a tied lm head: one token reads every weight; MoE: only the used experts
assert by[(qwen3, 0, 4)]["weight_bytes_per_token"] == by[(qwen3, 0, 4)]["model_size"]
assert by[(moe, 0, 4)]["weight_bytes_per_token"] < 0.8 * by[(moe, 0, 4)]["model_size"], by[(moe, 0, 4)]["weight_bytes_per_token"]
assert seq[qwen3][0] == 0 and seq[moe][0] > 0   # a transformer has no state; the hybrid has
PY

# ---- jsonl and csv ----
"$bin" -m "$qwen3" "${small[@]}" --bw-mib 0 -o jsonl >"$tmp/out.jsonl" || fail "jsonl run"
python3 -c 'import json,sys; rows=[json.loads(l) for l in open(sys.argv[1])]; assert len(rows)==2 and rows[0]["read_bw_gbs"] is None and rows[1]["read_bw_near_gbs"] is None' \
    "$tmp/out.jsonl" || fail "jsonl content"
"$bin" -m "$qwen3" "${small[@]}" -o csv >"$tmp/out.csv" || fail "csv run"
python3 -c 'import csv,sys; rows=list(csv.DictReader(open(sys.argv[1]))); assert len(rows)==2 and rows[1]["n_gen"]=="4" and float(rows[0]["avg_ts"])>0' \
    "$tmp/out.csv" || fail "csv content"

# ---- -d: a context filled before each run (llama-bench's depth) ----
"$bin" -m "$qwen3,$mamba2" -p 16 -n 4 -d 0,24 -r 2 -t 2 --bw-mib 0 >"$tmp/d.txt" 2>"$tmp/d.err" || fail "depth md run: $(cat "$tmp/d.err")"
grep -qE '^\| qwen3 [^|]+\|[^|]+\|[^|]+\| CPU +\| +2 \| +tg4 @ d24 \| +[0-9]+\.[0-9]{2} ± [0-9.]+ \|$' "$tmp/d.txt" || fail "depth: tg4 @ d24 row"
grep -qE '^\| mamba2 [^|]+\|[^|]+\|[^|]+\| CPU +\| +2 \| +pp16 @ d24 \|' "$tmp/d.txt" || fail "depth: mamba2 pp16 @ d24 row"
grep -qE '^\| qwen3 [^|]+\| +2 \| +tg4 @ d24 \|.* MB \|' "$tmp/d.txt" || fail "depth: efficiency row of tg4 @ d24"
"$bin" -m "$qwen3,$mamba2" -p 16 -n 4 -d 0,24 -r 2 -t 2 --bw-mib 64 -o json >"$tmp/d.json" || fail "depth json run"
python3 - "$tmp/d.json" "$qwen3" "$(seqinfo "$qwen3")" <<'PY' || fail "depth json content"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 8, len(rows)
assert sorted({r["n_depth"] for r in rows}) == [0, 24]
by = {(r["model_filename"], r["n_prompt"], r["n_depth"]): r for r in rows}
for r in rows:
    assert r["avg_ts"] > 0 and len(r["samples_ns"]) == 2
    if r["n_gen"] > 0:   # at a depth too: the KV rows it reads are counted
        assert r["bytes_per_token"] > 0 and r["bw_efficiency"] > 0 and r["read_bw_near_gbs"] > 0
    else:
        assert r["flops_per_token"] > 0 and r["pp_efficiency"] > 0
# at depth 24, tg4's tokens attend 25..28 positions (26.5 on average) instead of 1..4
kv = int(sys.argv[3].split()[1])
t0, t24 = by[(sys.argv[2], 0, 0)], by[(sys.argv[2], 0, 24)]
assert t0["kv_bytes_per_token"] == 2.5 * kv and t24["kv_bytes_per_token"] == 26.5 * kv, (t0, t24)
# and a prompt at depth 24 pays attention over it: more FLOPs a token than from empty
p0, p24 = by[(sys.argv[2], 16, 0)], by[(sys.argv[2], 16, 24)]
assert p24["flops_per_token"] > p0["flops_per_token"], (p0["flops_per_token"], p24["flops_per_token"])
PY

# ---- --checkpoints ----
"$bin" -m "$mamba2,$qwen3" --checkpoints -p 32 --ckpt-every 8 --ckpt-ops 5 -r 1 >"$tmp/ck.txt" 2>"$tmp/ck.err" ||
    fail "checkpoints md run: $(cat "$tmp/ck.err")"
grep -qE '^\| mamba2 [^|]+\| +2 \| +pp32 \| +4 \| +[0-9.]+ ± 0\.00 \| +[0-9.]+ ± 0\.00 \| +-?[0-9.]+ % \| +-?[0-9.]+ % \| +[0-9.]+ [KM]iB \| +[0-9.]+ \| +[0-9.]+ \|$' \
    "$tmp/ck.txt" || fail "checkpoints: mamba2 row"
grep -qE '^\| qwen3 .*no recurrent layers' "$tmp/ck.txt" || fail "checkpoints: qwen3 must be reported as not recurrent"
"$bin" -m "$mamba2,$qwen3" --checkpoints -p 32 --ckpt-every 8 --ckpt-ops 5 -r 2 -o json >"$tmp/ck.json" || fail "checkpoints json run"
python3 - "$tmp/ck.json" <<'PY' || fail "checkpoints json content"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 2
m, q = rows
assert m["recurrent_layers"] > 0 and m["skipped"] is None and m["n_ckpt"] == 4 and m["ckpt_bytes"] > 0
assert len(m["off_samples_ns"]) == 2 and len(m["on_samples_ns"]) == 2
assert m["take_avg_us"] > 0 and m["restore_avg_us"] > 0 and m["off_avg_ts"] > 0 and m["on_avg_ts"] > 0
# the averages are printed as whole ns: allow their rounding (1e-3 percentage points)
assert abs(m["overhead_pct"] - 100 * (m["on_avg_ns"] / m["off_avg_ns"] - 1)) < 1e-3, (m["overhead_pct"], m["on_avg_ns"], m["off_avg_ns"])
pairs = sorted(100 * (b / a - 1) for a, b in zip(m["off_samples_ns"], m["on_samples_ns"]))
assert abs(m["overhead_paired_pct"] - (pairs[0] + pairs[1]) / 2) < 1e-6, (m["overhead_paired_pct"], pairs)
assert q["recurrent_layers"] == 0 and "no recurrent" in q["skipped"] and q["overhead_pct"] is None
assert q["overhead_paired_pct"] is None
PY

# ---- --q8-order: named in the output; another value fails ----
"$bin" -m "$mamba2" -p 16 -n 0 -r 1 -t 2 --bw-mib 0 --q8-order block >"$tmp/blk.txt" 2>&1 || fail "--q8-order block: $(cat "$tmp/blk.txt")"
grep -q 'q8 order: block' "$tmp/blk.txt" || fail "--q8-order block not in the build line"
"$bin" -m "$mamba2" -p 16 -n 0 -r 1 --bw-mib 0 --q8-order fast >/dev/null 2>&1 && fail "--q8-order fast must fail"

# ---- --prefetch-ab: a row for auto against on and against off, per model and thread count;
# the json of a normal run names the mode ----
"$bin" -m "$qwen3,$mamba2" -t 1,2 --prefetch-ab 4 >"$tmp/pf.txt" 2>"$tmp/pf.err" ||
    fail "--prefetch-ab: $(cat "$tmp/pf.err")"
row='\| +[0-9]+\.[0-9]{4} \| +[0-9.]+-[0-9.]+ \| +[0-9.]+ \| +[0-9.]+ \|$'   # median, quartiles, t/s
for m in qwen3 mamba2; do
    for t in 1 2; do
        for a in on off; do
            grep -qE "^\| $m [^|]+\| +$t \| +$a \| auto \| +4 $row" "$tmp/pf.txt" ||
                fail "--prefetch-ab: no $m row for $t threads, $a against auto"
        done
    done
done
grep -q '^B/A: ' "$tmp/pf.txt" || fail "--prefetch-ab: the note under the rows"
"$bin" -m "$qwen3" --prefetch-ab -1 >/dev/null 2>&1 && fail "--prefetch-ab -1 must fail"
RECUR_PREFETCH=off "$bin" -m "$qwen3" -p 0 -n 4 -r 1 --bw-mib 0 -o json >"$tmp/pf.json" 2>/dev/null ||
    fail "json with RECUR_PREFETCH"
grep -q '"prefetch": "off"' "$tmp/pf.json" || fail "json: RECUR_PREFETCH=off not in the prefetch field"

# ---- --batched: llama-batched-bench's table, rows past -c left out, its jsonl fields;
# -pps copies one prompt (a recurrent state too) ----
"$bin" -m "$qwen3" -npp 8,16 -ntg 3 -npl 1,2 -t 2 >"$tmp/bb.txt" 2>"$tmp/bb.err" || fail "--batched md: $(cat "$tmp/bb.err")"
grep -qxF '|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |' "$tmp/bb.txt" ||
    fail "--batched md header"
for row in '8 3 1 11' '8 3 2 22' '16 3 1 19' '16 3 2 38'; do
    set -- $row
    grep -qE "^\| +$1 \| +$2 \| +$3 \| +$4 \|( +[0-9]+\.[0-9]+ \|){6}$" "$tmp/bb.txt" || fail "--batched md: no row PP $1 TG $2 B $3"
done
grep -q 'n_kv_max = 38, n_batch = 2048, n_ubatch = 512, is_pp_shared = 0, n_threads = 2' "$tmp/bb.txt" ||
    fail "--batched md: the setting line"
"$bin" -m "$qwen3,$mamba2" -npp 8,16 -ntg 3 -npl 1,2 -c 20 -r 2 -b 5 -ub 3 -o jsonl >"$tmp/bb.jsonl" 2>"$tmp/bb.err" ||
    fail "--batched jsonl: $(cat "$tmp/bb.err")"
"$bin" -m "$mamba2,$qwen3" -npp 8 -ntg 2,0 -npl 3 -pps -o json >"$tmp/bbs.json" 2>"$tmp/bb.err" ||
    fail "--batched -pps: $(cat "$tmp/bb.err")"
python3 - "$tmp/bb.jsonl" "$tmp/bbs.json" <<'PY' || fail "--batched json content"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# -c 20: 8+3 = 11 and 16+3 = 19 cells fit, two sequences (22, 38) do not
assert [(r["pp"], r["tg"], r["pl"], r["n_kv"]) for r in rows] == [(8, 3, 1, 11), (16, 3, 1, 19)] * 2, rows
for r in rows:
    for f in ("n_kv_max", "n_batch", "n_ubatch", "is_pp_shared", "n_threads", "n_threads_batch", "pp", "tg", "pl",
              "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed", "tg_step_ms_p50"):
        assert f in r, f
    assert r["n_kv_max"] == 20 and r["n_batch"] == 5 and r["n_ubatch"] == 3 and r["reps"] == 2
    assert len(r["pp_samples_ns"]) == 2 and len(r["tg_samples_ns"]) == 2
    med = lambda v: sorted(v)[0] / 2 + sorted(v)[1] / 2
    assert abs(r["t_pp"] - med(r["pp_samples_ns"]) / 1e9) < 1e-5 and abs(r["t_tg"] - med(r["tg_samples_ns"]) / 1e9) < 1e-5
    # the times are printed to the µs: the speeds against the samples' exact medians
    t_pp, t_tg = med(r["pp_samples_ns"]) / 1e9, med(r["tg_samples_ns"]) / 1e9
    assert abs(r["speed_pp"] - r["pl"] * r["pp"] / t_pp) < 1e-6 * r["speed_pp"]
    assert abs(r["speed_tg"] - r["pl"] * r["tg"] / t_tg) < 1e-6 * r["speed_tg"]
    assert abs(r["speed"] - r["n_kv"] / (t_pp + t_tg)) < 1e-6 * r["speed"]
    assert 0 < r["tg_step_ms_p50"] * 1e-3 <= max(r["tg_samples_ns"]) / 1e9
shared = json.load(open(sys.argv[2]))
assert [(r["model_type"].split()[0], r["tg"], r["n_kv"], r["is_pp_shared"]) for r in shared] == \
    [("mamba2", 2, 14, 1), ("mamba2", 0, 8, 1), ("qwen3", 2, 14, 1), ("qwen3", 0, 8, 1)], shared
for r in shared:
    assert abs(r["speed_pp"] - r["pp"] / (r["pp_samples_ns"][0] / 1e9)) < 1e-6 * r["speed_pp"]   # one prompt evaluated
    assert (r["speed_tg"] is None) == (r["tg"] == 0) and r["reps"] == 1
PY
# a -c smaller than the first prompt: the warmup fits the context too
"$bin" -m "$qwen3" -npp 16,4 -ntg 2 -npl 1 -c 10 -o jsonl >"$tmp/bbc.jsonl" 2>"$tmp/bb.err" || fail "--batched -c 10: $(cat "$tmp/bb.err")"
python3 -c 'import json,sys; rows=[json.loads(l) for l in open(sys.argv[1])]; assert [(r["pp"], r["n_kv"]) for r in rows] == [(4, 6)], rows' \
    "$tmp/bbc.jsonl" || fail "--batched -c 10: the row that fits"
"$bin" -m "$qwen3" --batched --checkpoints >/dev/null 2>&1 && fail "--batched with --checkpoints must fail"
"$bin" -m "$qwen3" -p 8 -n 4 -c 64 >/dev/null 2>"$tmp/c.err" && fail "-c without --batched must fail"
grep -q -- "-c is --batched's" "$tmp/c.err" || fail "-c without --batched: the message"

# ---- --profile: a table of where a token's time goes, and its json fields ----
"$bin" -m "$mamba2" "${small[@]}" --profile >"$tmp/prof.txt" 2>"$tmp/prof.err" || fail "--profile md: $(cat "$tmp/prof.err")"
tr -s ' ' <"$tmp/prof.txt" |
    grep -qxF '| model | threads | test | matmul | attention | recurrent | norm | elementwise | other | a token | matmul read |' ||
    fail "--profile: the table's header"
for t in pp16 tg4; do
    grep -qE "^\| mamba2 .*\| +$t \|( +[0-9]+\.[0-9]{3} ms +[0-9.]+ % \|){6} +[0-9]+\.[0-9]{3} ms \| +[0-9.]+ GB/s \|\$" "$tmp/prof.txt" ||
        fail "--profile: the $t row"
done
# the matmul calls by kind: per test, ms a token adding up to the matmul column, 2 calls a
# layer + the head (mamba2) a token, and a call's time in its pool job within its time; the
# thread pool table: per test and kind, the jobs' time within the kind's, the caller's wait
# within a job's time, and pp16's matmuls spread over the 2 threads
python3 - "$tmp/prof.txt" <<'PY' || fail "--profile: the matmul calls and thread pool tables"
import re, sys
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in open(sys.argv[1]) if l.startswith("| mamba2")]
kinds = [r for r in rows if len(r) == 11 and re.fullmatch(r"\d+ x \d+ x \d+", r[3])]
prof = {r[2]: r for r in rows if len(r) == 11 and r[1].isdigit()}
pool = [r for r in rows if len(r) == 9 and r[2] in ("matmul", "attention", "recurrent", "norm", "elementwise")]
for test in ("pp16", "tg4"):
    mine = [r for r in kinds if r[1] == test]
    assert mine, ("no calls of", test)
    ms = sum(float(r[7].split()[0]) for r in mine)
    want = float(prof[test][3].split()[0])
    assert abs(ms - want) <= 0.001 * (len(mine) + 1), (test, ms, want)
    for r in mine:
        assert 0 <= float(r[6]) <= float(r[5]) + 0.01, r   # in job within the call
    if test == "tg4":
        calls = sum(float(r[4]) for r in mine)
        assert calls == int(calls) and calls % 2 == 1 and calls >= 3, calls
for r in pool:
    assert r[1] in ("pp16", "tg4"), r
    jobs, us, share, wait = float(r[3]), float(r[4]), float(r[6].rstrip(" %")), float(r[7].split()[0])
    assert jobs > 0 and us > 0 and 0 < share <= 100.05 and 0 <= wait <= us + 0.01, r
assert any(r[1] == "pp16" and r[2] == "matmul" for r in pool), pool
PY
"$bin" -m "$mamba2" "${small[@]}" --profile -o json >"$tmp/prof.json" 2>"$tmp/prof.err" || fail "--profile json: $(cat "$tmp/prof.err")"
"$bin" -m "$mamba2" "${small[@]}" -o json >"$tmp/noprof.json" 2>"$tmp/prof.err" || fail "json without --profile"
python3 - "$tmp/prof.json" "$tmp/noprof.json" <<'PY' || fail "--profile json fields"
import json, sys
rows, plain = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
kinds = ["matmul", "attention", "recurrent", "norm", "elementwise", "other"]
for r in rows:
    toks = r["n_prompt"] + r["n_gen"]
    assert r["profile_tokens"] == toks, (r["profile_tokens"], toks)
    ms = [r[f"profile_{k}_ms"] for k in kinds]
    assert all(v >= 0 for v in ms) and ms[0] > 0 and ms[2] > 0 and ms[1] == 0, ms   # mamba2: no attention
    # the decodes' time, inside the run's
    assert sum(ms) * toks <= r["samples_ns"][0] / 1e6 * 1.0001, (sum(ms) * toks, r["samples_ns"])
    assert r["profile_matmul_gbs"] > 0
    # the thread pool's part of each kind (other has none): within the kind's time
    jobs = [r[f"profile_{k}_job_ms"] for k in kinds[:-1]]
    assert all(0 <= j <= m * 1.0001 + 1e-6 for j, m in zip(jobs, ms)), (jobs, ms)
    assert 0 <= r["profile_pool_wait_ms"] <= sum(jobs) * 1.0001 + 1e-6, r["profile_pool_wait_ms"]
    if jobs[0] > 0: assert r["profile_matmul_job_gbs"] >= r["profile_matmul_gbs"] * 0.9999, r
    if r["n_prompt"]: assert jobs[0] > 0, jobs   # pp16's matmuls: over the 2 threads
assert not any(k.startswith("profile_") for r in plain for k in r), "profile fields without --profile"
PY
for other in --batched --checkpoints "--prefetch-ab 1"; do   # benchmarks it does not profile: refused
    "$bin" -m "$mamba2" --profile $other >/dev/null 2>"$tmp/prof.err" && fail "--profile with $other must fail"
    grep -q -- "--profile profiles the pp and tg tests" "$tmp/prof.err" || fail "--profile with $other: the message"
done

# ---- errors ----
"$bin" -m "$qwen3" --no-such-option >/dev/null 2>&1 && fail "an unknown option must fail"
"$bin" -m "$tmp/missing.gguf" -p 4 -n 0 -r 1 --bw-mib 0 >/dev/null 2>&1 && fail "a missing model must fail"
"$bin" -m "$qwen3" -o xml >/dev/null 2>&1 && fail "an unknown format must fail"
"$bin" --help | grep -q -- '--checkpoints' || fail "--help"

[ "$fails" -eq 0 ] && echo "bench.sh: all passed"
exit $((fails > 0))
