#!/usr/bin/env bash
# recur-gguf render / tokenize / detokenize from the outside, on the shared vocab files:
# reference token ids (tokenizer/*.jsonl), template cases (templates/cases), round trips and
# the usage/error exits.
# usage: chat.sh BUILD_DIR TESTDATA_DIR
set -u
build=$(cd "$1" && pwd); data=$(cd "$2" && pwd)
g=$build/recur-gguf
qwen=$data/vocab/qwen3-vocab.gguf; llama3=$data/vocab/llama3-vocab.gguf
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() {   # check NAME EXPECTED_RC COMMAND...  (stdout in $tmp/out, stderr in $tmp/err)
  local name=$1 want=$2; shift 2
  "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  if [ "$rc" -eq "$want" ]; then ok; else bad "$name: exit $rc, wanted $want"; head -3 "$tmp/err"; fi
}
same() {    # same NAME FILE: the last stdout equals FILE byte for byte
  if cmp -s "$tmp/out" "$2"; then ok; else bad "$1: output differs"; diff <(od -c "$2") <(od -c "$tmp/out") | head -6; fi
}
has_err() { if grep -q -- "$2" "$tmp/err"; then ok; else bad "$1: stderr lacks '$2'"; head -3 "$tmp/err"; fi; }

# ---- tokenize: reference ids from llama.cpp ----------------------------------------------------
python3 - "$data/tokenizer" "$tmp" <<'PY'
import json, sys
for vocab in ("qwen3", "llama3"):
    n = 0
    for line in open(f"{sys.argv[1]}/{vocab}.jsonl", encoding="utf-8"):
        c = json.loads(line)
        t = c["text"]
        if not t or "\0" in t or t.startswith("-") or n >= 25: continue
        out = f"{sys.argv[2]}/{vocab}.{n}"
        open(out + ".txt", "w", encoding="utf-8").write(t)
        flags = (" --add-special" if c["add_special"] else "") + (" --parse-special" if c["parse_special"] else "")
        open(out + ".flags", "w").write(flags)
        open(out + ".want", "w").write(json.dumps(c["ids"]) + "\n")
        n += 1
PY
for vocab in qwen3 llama3; do  file=$qwen; [ "$vocab" = llama3 ] && file=$llama3
  for want in "$tmp/$vocab".*.want; do
    base=${want%.want}
    text=$(cat "$base.txt"; printf x); text=${text%x}   # keeps trailing newlines
    # shellcheck disable=SC2046
    check "tokenize $base" 0 "$g" tokenize -m "$file" $(cat "$base.flags") -- "$text"
    same "tokenize $(basename "$base")" "$want"
  done
done

# known ids, and the BOS llama3 adds
check tok-special 0 "$g" tokenize -m "$qwen" --parse-special "<|im_start|>user
Hello world<|im_end|>"
printf '[151644, 872, 198, 9707, 1879, 151645]\n' > "$tmp/want"; same tok-special "$tmp/want"
check tok-bos 0 "$g" tokenize -m "$llama3" --add-special "Hi"
grep -q '^\[128000, ' "$tmp/out" && ok || bad "tok-bos: no BOS first: $(cat "$tmp/out")"

# ---- detokenize: both id syntaxes, special tokens shown or not, round trip ------------------------
printf '<|im_start|>user\nHello world<|im_end|>' > "$tmp/want"
check detok-json 0 "$g" detokenize -m "$qwen" "[151644, 872, 198, 9707, 1879, 151645]"; same detok-json "$tmp/want"
check detok-csv 0 "$g" detokenize -m "$qwen" "151644,872,198,9707,1879,151645"; same detok-csv "$tmp/want"
printf 'user\nHello world' > "$tmp/want"
check detok-nospecial 0 "$g" detokenize -m "$qwen" --no-special "151644,872,198,9707,1879,151645"
same detok-nospecial "$tmp/want"
text='Grüße, 世界! 1234 <tool_call>x</tool_call>'
ids=$("$g" tokenize -m "$qwen" --parse-special "$text")
printf '%s' "$text" > "$tmp/want"
check roundtrip 0 "$g" detokenize -m "$qwen" "$ids"; same roundtrip "$tmp/want"

# ---- render: template cases byte for byte --------------------------------------------------------
python3 - "$tmp/case" "$data"/templates/cases/*/0[1-3]_*.json "$data"/templates/cases/*/1[3-5]_*.json <<'PY'
import json, os, sys
for i, path in enumerate(sys.argv[2:]):
    c = json.load(open(path, encoding="utf-8"))
    out = f"{sys.argv[1]}.{i:03d}"
    json.dump(c["context"], open(out + ".ctx.json", "w", encoding="utf-8"), ensure_ascii=False)
    open(out + ".want", "wb").write((c["expected"] or "").encode("utf-8"))
    open(out + ".now", "w").write(c["strftime_now"] or "")
    open(out + ".tmpl", "w").write(c["template_file"])
    open(out + ".rc", "w").write("1" if c["error"] is not None else "0")
    open(out + ".name", "w").write(os.path.basename(os.path.dirname(path)) + "/" + os.path.basename(path))
PY
for ctx in "$tmp"/case.*.ctx.json; do   # --template and --now from each case
  c=${ctx%.ctx.json}
  want_rc=$(cat "$c.rc"); now=(); [ -s "$c.now" ] && now=(--now "$(cat "$c.now")")
  check "render $(cat "$c.name")" "$want_rc" "$g" render --template "$data/templates/$(cat "$c.tmpl")" \
    --context "@$ctx" "${now[@]}"
  [ "$want_rc" = 0 ] && same "render $(cat "$c.name")" "$c.want"
done

# the model's own template (qwen3-vocab carries Qwen3's), inline context
check render-model 0 "$g" render -m "$qwen" --context \
  '{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true, "enable_thinking": false}'
printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' > "$tmp/want"
same render-model "$tmp/want"
# bos_token comes from the vocab when the context lacks it
check render-bos 0 "$g" render -m "$llama3" --context '{"messages": [{"role": "user", "content": "Hi"}]}'
grep -q '^<|begin_of_text|><|start_header_id|>user' "$tmp/out" && ok || bad "render-bos: $(head -c 80 "$tmp/out")"

# ---- errors -------------------------------------------------------------------------------------
check help 0 "$g" render --help
check no-model 2 "$g" tokenize "text"
check no-context 2 "$g" render -m "$qwen"
check bad-file 1 "$g" tokenize -m "$tmp/nope.gguf" "x"
check bad-json 1 "$g" render -m "$qwen" --context '{"messages": ['; has_err bad-json "context"
check not-object 1 "$g" render -m "$qwen" --context '[1]'
check raise 1 "$g" render -m "$qwen" --context '{"messages": []}'
printf '{{ x +* }}' > "$tmp/bad.jinja"
check syntax 1 "$g" render --template "$tmp/bad.jinja" --context '{}'; has_err syntax "line 1, column"
check bad-ids 2 "$g" detokenize -m "$qwen" "1,x"
check id-range 1 "$g" detokenize -m "$qwen" "999999999"
check no-template 1 "$g" render -m "$data/vocab/ggml-vocab-llama-spm.gguf" --context '{}'
has_err no-template "chat_template"

echo "chat.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
