#!/usr/bin/env bash
# stories260K (a real trained llama2.c model, SPM vocab): recur-cli tokenizes the text prompt
# with the model's own vocabulary and decodes greedily; the ids must equal llama.cpp's
# continuation (case4: BOS alone, 200 greedy ids, whose first 4 are "Once upon a time"), and
# the text must read as the story. Case3's logits are judged by refcheck.py.
set -u
build=$1; data=$2
model=$data/models/stories260K.gguf
ref=$data/models/stories260K.ref.json
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/recur-cli" -q -m "$model" -p "Once upon a time" -n 64 --temp 0 -t 2 \
    --logits-out "$tmp/logits" --greedy-out "$tmp/greedy" > "$tmp/text" || { echo "FAIL: recur-cli"; exit 1; }
echo "text: $(head -c 400 "$tmp/text")"
fail=0
python3 "$data/../tools/refcheck.py" "$ref" 3 "$tmp/logits" --greedy "$tmp/greedy" || fail=1
python3 - "$ref" "$tmp/greedy" <<'PY' || fail=1
import json, sys
case4 = json.load(open(sys.argv[1]))["cases"][4]
want = case4["greedy"][4:4 + 64]
margins = case4["greedy_top2_margin"][4:4 + 64]
got = [int(x) for x in open(sys.argv[2]).read().split()]
# compare up to the first step llama.cpp itself calls fragile (top-2 margin below 0.04)
n = next((k for k, m in enumerate(margins) if m < 0.04), len(want))
ok = got[:n] == want[:n]
print(("PASS" if ok else "FAIL") + f" stories260K greedy: {sum(a == b for a, b in zip(got, want))}/{len(want)} equal, need first {n}")
sys.exit(0 if ok else 1)
PY
grep -q "there was a little girl named Lily" "$tmp/text" || { echo "FAIL: text does not read as the reference story"; fail=1; }
[ $fail -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
