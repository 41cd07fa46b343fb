#!/usr/bin/env bash
# tests/cli/replay.sh BUILD_DIR TESTDATA_DIR
#
# `recur-bench replay` on a tiny synth model (qwen35-tiny: attention + recurrent layers), tiny
# sizes: the tool starts recur-server itself (port 0), and its rows are the workload's requests
# with sane numbers: evaluated >= 0, 0 <= minimum <= n_prompt, our prompt token count equals the
# server's, the first request's minimum is its whole prompt, a regenerate's minimum is 0, the
# sums add up; restart shows its save / restore answers whatever they are (the endpoint may not
# exist yet) and goes on. How well the server caches is NOT asserted (that is being built).
set -u
build=${1:?usage: replay.sh BUILD_DIR TESTDATA_DIR}
data=${2:?usage: replay.sh BUILD_DIR TESTDATA_DIR}
: "$data"
bench="$build/recur-bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

"$build/recur-gguf" synth --arch qwen35 --preset qwen35-tiny -o "$tmp/m.gguf" >/dev/null || { echo "FAIL: synth"; exit 1; }
mkdir "$tmp/scratch"
run=("$bench" replay --server "$build/recur-server" -m "$tmp/m.gguf" --system-tokens 200 --n-predict 4
     --server-arg -t --server-arg 2)

# ---- append, json ----
# with a pause before each follow-up (2 of the 3 requests): the run lasts at least 2 x 400 ms
t0=$(date +%s%N)
TMPDIR="$tmp/scratch" "${run[@]}" --workload append --turns 3 --think-ms 400 --format json >"$tmp/a.json" 2>"$tmp/a.err" ||
    fail "append run: $(cat "$tmp/a.err")"
[ $(( ($(date +%s%N) - t0) / 1000000 )) -ge 800 ] || fail "--think-ms 400: the run took under 800 ms"
python3 - "$tmp/a.json" <<'PY' || fail "append json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["n_predict"] == 4 and j["system_tokens"] == 200 and "client" in j["ttft"] and j["think_ms"] == 400
assert j["workloads"][0]["setup"].endswith(", think 400 ms, server args: -t 2"), j["workloads"][0]["setup"]
(w,) = j["workloads"]
assert w["workload"] == "append" and not w["failed"], w
rows = w["requests"]
assert [r["step"] for r in rows] == ["turn 1", "turn 2", "turn 3"], [r["step"] for r in rows]
for r in rows:
    assert r["request"] and r["note"] == "", r
    assert r["n_prompt"] == r["n_prompt_server"], r          # our tokens are the server's
    assert r["evaluated"] >= 0 and 0 <= r["minimum"] <= r["n_prompt"], r
    assert r["evaluated"] + r["cache_n"] == r["n_prompt"], r  # timings.prompt_n + cache_n
    assert r["excess"] == r["evaluated"] - r["minimum"] and r["ttft_ms"] > 0, r
assert rows[0]["minimum"] == rows[0]["n_prompt"] >= 200, rows[0]
# each turn extends the last conversation: less than the whole prompt is new
for a, b in zip(rows, rows[1:]):
    assert b["n_prompt"] > a["n_prompt"] and b["minimum"] < b["n_prompt"], (a, b)
assert w["evaluated"] == sum(r["evaluated"] for r in rows) and w["minimum"] == sum(r["minimum"] for r in rows)
assert w["excess"] == w["evaluated"] - w["minimum"]
PY
[ -z "$(ls -A "$tmp/scratch")" ] || fail "the scratch folder was not removed: $(ls "$tmp/scratch")"

# ---- regenerate and restart, md ----
TMPDIR="$tmp/scratch" "${run[@]}" --workload regenerate >"$tmp/r.md" 2>"$tmp/r.err" || fail "regenerate run: $(cat "$tmp/r.err")"
grep -qE '^replay regenerate \(-np 1, .*system prompt 200 tokens, n_predict 4' "$tmp/r.md" || fail "regenerate title"
head -3 "$tmp/r.md" | tail -1 | tr -s ' ' |
    grep -qxF '| step | n_prompt | evaluated | minimum | excess | ttft ms | cache_n | cache bytes | note |' || fail "md header"
for s in "turn 1" "turn 2" "turn 3" "regenerate 3" "turn 4"; do
    grep -qE "^\| $s +\| +[0-9]+ \| +[0-9]+ \| +[0-9]+ \| +-?[0-9]+ \| +[0-9.]+ \| +[0-9]+ \| +[-0-9]+ \|" "$tmp/r.md" ||
        fail "regenerate: no row '$s'"
done
# an identical resend: minimum 0, and its prompt is turn 3's
python3 - "$tmp/r.md" <<'PY' || fail "regenerate numbers"
import sys
rows = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[2:-1]] for l in open(sys.argv[1]) if l.startswith("| ")}
assert rows["regenerate 3"][2] == "0" and rows["regenerate 3"][0] == rows["turn 3"][0], rows
assert rows["turn 1"][0] == rows["turn 1"][2], rows["turn 1"]
PY
grep -qE '^regenerate: excess -?[0-9]+, evaluated [0-9]+, minimum [0-9]+$' "$tmp/r.md" || fail "regenerate summary line"

TMPDIR="$tmp/scratch" "${run[@]}" --workload restart >"$tmp/s.md" 2>"$tmp/s.err" || fail "restart run: $(cat "$tmp/s.err")"
grep -qE '^\| save +\|.*\| save: (HTTP [0-9]+|\{)' "$tmp/s.md" || fail "restart: save row"
grep -qE '^\| restart +\|.*started again' "$tmp/s.md" || fail "restart: restart row"
grep -qE '^\| restore +\|.*\| restore: (HTTP [0-9]+|\{)' "$tmp/s.md" || fail "restart: restore row"
grep -qE '^\| turn 5 +\| +[0-9]+ \|' "$tmp/s.md" || fail "restart: the turns after the restart"

# ---- errors ----
"$bench" replay --server "$build/recur-server" -m "$tmp/m.gguf" --workload nope >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown workload must exit 2"
"$bench" replay --server "$build/recur-server" -m "$tmp/m.gguf" --think-ms -1 >/dev/null 2>&1
[ $? -eq 2 ] || fail "a negative --think-ms must exit 2"
TMPDIR="$tmp/scratch" "$bench" replay --server "$tmp/no-such-server" -m "$tmp/m.gguf" --workload append \
    >"$tmp/e.md" 2>/dev/null && fail "a missing server binary must fail"
grep -q "exited" "$tmp/e.md" || fail "a missing server binary: the start row says why"

[ $fails -eq 0 ] || { cat "$tmp"/*.md >&2; exit 1; }
echo "replay.sh: ok"
