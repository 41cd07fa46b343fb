#!/usr/bin/env bash
# Banned strings with rewind through recur-server (ik_llama.cpp's banned_strings, banned_regex,
# banned_regex_case_insensitive, banned_n, rewind_count_max, saturate_predict,
# --banned-string-file), on the hybrid qwen35 (rewinds restore a ring checkpoint), the pure
# recurrent mamba, and the attention-only qwen3 (rewinds drop attention cells):
#  - greedy run without bans; a 3-token substring starting at a token boundary becomes banned;
#  - with it banned: the text never holds it (nor does any streamed chunk), the tokens equal the
#    original ones before where it began, the token there is the most likely one but the banned
#    one (n_probs), and what follows equals a cache-off run whose prompt is the original prompt
#    plus the new tokens so far (the restored state is exact);
#  - the same through a regex, a caseless regex, an upper-case string and --banned-string-file;
#  - rewind_count_max with banned_n 0 (the text is let through after N rewinds), saturate_predict,
#    banbuffer_size, banned_n -1, a stop string after the ban, two slots at once;
#  - a bad regex is a 400 that names it.
#   bash tests/cli/ban.sh BUILD_DIR TESTDATA_DIR
set -euo pipefail
BUILD=$1
DATA=$2
SRV=$BUILD/recur-server
TMPL=$DATA/templates/jinja/Qwen-Qwen3-0.6B.jinja
source "$(dirname "$0")/lib/harness.sh"

# start MODEL [FLAGS...]: a server on a free port, URL set
start() {
  local model=$1
  shift
  : >"$WORK/log"
  "$SRV" -m "$DATA/models/$model" --chat-template-file "$TMPL" --port 0 -c 512 -np 2 -t 2 "$@" >"$WORK/log" 2>&1 &
  PID=$!
  wait_port
  wait_ready
}
stop() {
  kill -TERM "$PID"
  wait "$PID" || true
  PID=
}

# The checks, in Python: check.py URL MODE (MODE: rewind | file)
cat >"$WORK/check.py" <<'PY'
import json, sys, urllib.request, urllib.error
URL, MODE, STATE = sys.argv[1], sys.argv[2], sys.argv[3]
PROMPT = "Hello world, this is"

def post(path, body, status=200):
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            code, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        code, raw = e.code, e.read()
    assert code == status, (path, body, code, raw[:500])
    return raw

def run(extra, n=40, stream=False):
    body = {"prompt": PROMPT, "n_predict": n, "temperature": 0, "return_tokens": True, "n_probs": 3, "stream": stream}
    body.update(extra)
    raw = post("/completion", body)
    if not stream:
        return json.loads(raw)
    chunks = [json.loads(b[6:]) for b in raw.decode().split("\n\n") if b.startswith("data: ")]
    return chunks

def piece_bytes(p):
    return bytes(p["bytes"])

def ci_find(hay, needle):   # ASCII-caseless, as the ban matches
    return hay.lower().find(needle.lower())

base = run({"banned_strings": []})   # no bans (an empty list also turns the file's off)
T = base["tokens"]
probs = base["completion_probabilities"]
assert len(T) == 40 and base["stop_type"] == "limit", base
pieces = [piece_bytes(p) for p in probs]
text = b"".join(pieces)
# the banned string: 3 tokens' text, valid UTF-8 with a letter, starting at token k, not
# found earlier in the text, and token k clearly preferred (no tie with the second choice)
k = None
for i in range(4, 30):
    B = pieces[i] + pieces[i + 1] + pieces[i + 2]
    off = sum(len(p) for p in pieces[:i])
    try:
        Bs = B.decode("utf-8")
    except UnicodeDecodeError:
        continue
    if len(B) < 3 or not any(c.isalpha() and c.isascii() for c in Bs) or not pieces[i] or not pieces[i].isascii():
        continue
    if ci_find(text, B) != off or probs[i]["top_logprobs"][0]["id"] != T[i]:
        continue
    k = i
    break
assert k is not None, "no usable banned string in %r" % text
alt = probs[k]["top_logprobs"][1]["id"]
print("banned %r at token %d (token %d -> %d)" % (Bs, k, T[k], alt))

def check_banned(r, label):
    toks = r["tokens"]
    out = r["content"].encode()
    assert ci_find(out, B) < 0, (label, "banned text in the output", out)
    assert toks[:k] == T[:k], (label, toks[:k], T[:k])
    assert toks[k] != T[k] and toks[k] == alt, (label, "token at the ban", toks[k], T[k], alt)
    top = r["completion_probabilities"][k]["top_logprobs"]
    assert top[0]["id"] == T[k] and top[1]["id"] == alt, (label, "n_probs at the ban", top)
    return toks

if MODE == "file":
    r = run({})
    check_banned(r, "--banned-string-file")
    r = run({"banned_regex": ["\\x{10fffe}"]})   # regexes of the request add to the file's strings
    check_banned(r, "--banned-string-file + banned_regex")
    print("ok file")
    sys.exit(0)

# save what the file test needs
json.dump({"B": Bs}, open(STATE, "w"))

r = run({"banned_strings": [Bs]})
toks = check_banned(r, "banned_strings")
# the continuation after the ban equals a fresh, cache-off run from the same tokens: the
# sequence's state after the rewind was exactly the one of an uninterrupted run
ids = json.loads(post("/tokenize", {"content": PROMPT}))["tokens"]
rest = len(toks) - (k + 1)
assert rest > 5, toks
fresh = json.loads(post("/completion", {"prompt": ids + toks[:k + 1], "n_predict": rest, "temperature": 0,
                                        "cache_prompt": False, "return_tokens": True}))
assert fresh["tokens"] == toks[k + 1:], ("continuation", fresh["tokens"], toks[k + 1:])
# n_predict counts the discarded tokens too (ik_llama without saturate_predict): 3 were
assert r["tokens_predicted"] == 40 and len(toks) == 37, (r["tokens_predicted"], len(toks))

# streamed: the same text, and no chunk carries the banned text
chunks = run({"banned_strings": [Bs]}, stream=True)
st = "".join(c.get("content", "") for c in chunks)
assert st == r["content"], ("stream text", st, r["content"])
assert all(ci_find(c.get("content", "").encode(), B) < 0 for c in chunks)
base_chunks = run({}, stream=True)
assert ci_find("".join(c.get("content", "") for c in base_chunks).encode(), B) >= 0

# the same ban as an upper-case string, a regex, a caseless regex
import re
esc = "".join("\\x{%x}" % ord(c) for c in Bs)
for extra in ({"banned_strings": [Bs.upper()]}, {"banned_regex": [esc]},
              {"banned_regex_case_insensitive": ["".join("\\x{%x}" % ord(c) for c in Bs.upper())]}):
    r2 = run(extra)
    assert r2["tokens"] == toks, (extra, r2["tokens"], toks)
# banned_regex is case-sensitive: an upper-case pattern (when it differs) bans nothing
if Bs.upper() != Bs:
    assert run({"banned_regex": ["".join("\\x{%x}" % ord(c) for c in Bs.upper())]})["tokens"] == T

# saturate_predict: the rewound tokens do not count, 40 tokens come out
r3 = run({"banned_strings": [Bs], "saturate_predict": True})
assert len(r3["tokens"]) == 40 and r3["tokens"][:37] == toks, r3["tokens"]

# rewind_count_max with banned_n 0: nothing gets banned, so greedy regenerates the same text;
# after N rewinds it is let through: the output is the original one, 3 * N tokens shorter
for n in (1, 2):
    r4 = run({"banned_strings": [Bs], "banned_n": 0, "rewind_count_max": n})
    assert r4["tokens"] == T[:40 - 3 * n], (n, r4["tokens"])
    assert ci_find(r4["content"].encode(), B) >= 0

# banbuffer_size: the window holds at most that many tokens (ik_llama's buffer), so a 3-token
# banned text is only seen with 3 or more
assert run({"banned_strings": [Bs], "banbuffer_size": 2})["tokens"] == T
assert run({"banned_strings": [Bs], "banbuffer_size": 3})["tokens"] == toks

# banned_n -1: every token of the match is banned at its start
r5 = run({"banned_strings": [Bs], "banned_n": -1, "n_probs": 8})
top = [t["id"] for t in r5["completion_probabilities"][k]["top_logprobs"]]
want = [t for t in top if t not in (T[k], T[k + 1], T[k + 2])][0]
assert r5["tokens"][:k] == T[:k] and r5["tokens"][k] == want, (r5["tokens"][k], want, top)

# a stop string in the text after the ban: the output ends there, as without the window
c = r["content"]
for i in range(len(c) - 8, len(c) // 2, -1):
    w = c[i:i + 3]
    if w.isascii() and w.strip() and c.find(w) == i:
        rs = run({"banned_strings": [Bs], "stop": [w]})
        assert rs["content"] == c[:i] and rs["stop_type"] == "word", (w, rs["content"], c[:i])
        break
else:
    raise AssertionError("no stop string candidate in %r" % c)

# two slots at once, one with bans and one without: each gets what it gets alone
import threading
res = {}
def go(name, extra):
    res[name] = run(extra)
th = [threading.Thread(target=go, args=("ban", {"banned_strings": [Bs]})), threading.Thread(target=go, args=("plain", {"banned_strings": []}))]
for t in th: t.start()
for t in th: t.join()
assert res["ban"]["tokens"] == toks and res["plain"]["tokens"] == T, "concurrent slots"

# bad regexes and fields: 400 with the pattern named
for field in ("banned_regex", "banned_regex_case_insensitive"):
    raw = post("/completion", {"prompt": PROMPT, "n_predict": 4, field: ["ok", "a(b"]}, status=400)
    e = json.loads(raw)["error"]
    assert e["type"] == "invalid_request_error" and ("Invalid regex in %s: a(b" % field) in e["message"], e
raw = post("/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "banned_regex": ["[z-a]"]}, status=400)
assert "Invalid regex in banned_regex: [z-a]" in json.loads(raw)["error"]["message"]
post("/completion", {"prompt": PROMPT, "banned_strings": "x"}, status=400)
post("/completion", {"prompt": PROMPT, "banned_n": -2, "banned_strings": ["x"]}, status=400)
# the OAI chat endpoint takes the fields too
raw = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                                    "banned_regex": ["(x"]}, status=400)
assert "Invalid regex in banned_regex: (x" in json.loads(raw)["error"]["message"]
print("ok rewind")
PY

for model in ${BAN_MODELS:-pub-qwen35-Q8_0.gguf pub-mamba-Q8_0.gguf pub-qwen3-Q8_0.gguf}; do
  echo "ban.sh: $model"
  start "$model"
  python3 "$WORK/check.py" "$URL" rewind "$WORK/state.json" || fail "$model: rewind checks"
  stop
  # --banned-string-file: the same string from a file (quotes removed, empty lines skipped)
  python3 -c "import json; b=json.load(open('$WORK/state.json'))['B']; open('$WORK/ban.txt','w').write('\n\"' + b + '\"\n\n')"
  start "$model" --banned-string-file "$WORK/ban.txt"
  python3 "$WORK/check.py" "$URL" file "$WORK/state.json" || fail "$model: --banned-string-file"
  stop
done
echo "ban.sh: ok"
