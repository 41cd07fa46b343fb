#!/usr/bin/env bash
# Black-box checks of recur-server: every endpoint's shape, errors, auth, SSE framing, stop
# strings, logit_bias, seeds, cancellation of a client that leaves, and a clean SIGTERM exit.
#   bash tests/cli/server.sh BUILD_DIR TESTDATA_DIR
set -euo pipefail
BUILD=$1
DATA=$2
SRV=$BUILD/recur-server
MODEL=$DATA/models/pub-qwen35-Q8_0.gguf
TMPL=$DATA/templates/jinja/Qwen3.5-27B.jinja
KEY=sekrit-key
source "$(dirname "$0")/lib/harness.sh"
START_S=$(date +%s)
step() { echo "server.sh: [$(( $(date +%s) - START_S ))s] $*"; }

# --- flags ------------------------------------------------------------------------------------------
step "flags"
"$SRV" --help | grep -q -- '--ctx-size N *context of EACH slot' || fail "--help does not document -c per slot"
set +e
"$SRV" --bogus 2>"$WORK/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "unknown option '--bogus'" "$WORK/err" || fail "bad flag: rc $rc"
set +e
"$SRV" --port notanumber 2>"$WORK/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "bad value" "$WORK/err" || fail "bad value: rc $rc"
set +e
"$SRV" --q8-order fast 2>"$WORK/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "bad value 'fast' for --q8-order" "$WORK/err" || fail "bad --q8-order: rc $rc"

# --- start (port 0: the server prints the one it got), with a slow load to see the 503s -------------
step "start (port 0: the server prints the one it got), with a slow load to see the 503s"
: >"$WORK/log"
RECUR_SERVER_LOAD_DELAY_MS=1500 "$SRV" -m "$MODEL" --chat-template-file "$TMPL" --port 0 -c 4096 -np 2 \
  --api-key "$KEY" --metrics -t 2 >"$WORK/log" 2>&1 &
PID=$!
wait_port
H=(-H "Authorization: Bearer $KEY")

code=$(curl -s -o "$WORK/h" -w '%{http_code}' "$URL/health")
[ "$code" = 503 ] || fail "/health while loading: $code"
python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['error']; assert e=={'code':503,'message':'Loading model','type':'unavailable_error'}, e" "$WORK/h"
wait_ready
[ "$(curl -s "$URL/health")" = '{"status":"ok"}' ] || fail "/health"
[ "$(curl -s "$URL/v1/health")" = '{"status":"ok"}' ] || fail "/v1/health"

# --- helpers: post PATH JSON -> body in $WORK/out, status echoed ------------------------------------
step "helpers: post PATH JSON -> body in WORK/out, status echoed"
post() { curl -s "${H[@]}" -o "$WORK/out" -w '%{http_code}' "$URL$1" -d "$2"; }
get() { curl -s "${H[@]}" -o "$WORK/out" -w '%{http_code}' "$URL$1"; }
# py 'python code using j (the parsed body)'
py() { python3 -c "import json,sys; j=json.load(open('$WORK/out')); $1" || fail "check failed: $1 (body: $(head -c 1500 "$WORK/out"))"; }
# the data: events of an SSE body as a JSON array in $WORK/ev.json (and [DONE] as "[DONE]")
sse() {
  python3 - "$WORK/out" "$WORK/ev.json" <<'PY'
import json, sys
raw = open(sys.argv[1], encoding='utf-8').read()
assert raw.endswith('\n\n'), 'an SSE body ends with a blank line'
evs = []
for block in raw.split('\n\n')[:-1]:
    assert block.startswith('data: '), repr(block[:80])
    d = block[6:]
    evs.append(d if d == '[DONE]' else json.loads(d))
json.dump(evs, open(sys.argv[2], 'w'))
PY
}
pyev() { python3 -c "import json; ev=json.load(open('$WORK/ev.json')); $1" || fail "SSE check failed: $1"; }

# --- auth -------------------------------------------------------------------------------------------
step "auth"
code=$(curl -s -o "$WORK/out" -w '%{http_code}' "$URL/v1/models")
[ "$code" = 401 ] || fail "no key: $code"
py "assert j=={'error':{'message':'Invalid API Key','type':'authentication_error','code':401}}"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' "$URL/v1/models")" = 401 ] || fail "wrong key"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Api-Key: $KEY" "$URL/v1/models")" = 200 ] || fail "X-Api-Key"
code=$(curl -s -o /dev/null -w '%{http_code}' -X OPTIONS -H 'Origin: http://example.com' -D "$WORK/hdr" "$URL/v1/chat/completions")
[ "$code" = 200 ] && grep -qi '^Access-Control-Allow-Origin: http://example.com' "$WORK/hdr" || fail "CORS preflight"

# --- info endpoints ---------------------------------------------------------------------------------
step "info endpoints"
[ "$(get /v1/models)" = 200 ] || fail "/v1/models"
py "d=j['data'][0]; assert j['object']=='list' and d['object']=='model' and d['owned_by']=='llamacpp' and d['id']=='pub-qwen35-Q8_0.gguf'; assert d['meta']['n_vocab']==512 and d['meta']['n_ctx']==4096; assert isinstance(j['models'], list)"
[ "$(get /models)" = 200 ] || fail "/models"
[ "$(get /props)" = 200 ] || fail "/props"
py "assert j['total_slots']==2 and j['default_generation_settings']['n_ctx']==4096 and j['build_info'].startswith('b') and 'im_start' in j['chat_template']"
[ "$(get /slots)" = 200 ] || fail "/slots"
py "assert [s['id'] for s in j]==[0,1] and all(s['n_ctx']==4096 and s['is_processing'] is False for s in j)"
[ "$(get '/slots?fail_on_no_slot=1')" = 200 ] || fail "/slots?fail_on_no_slot with idle slots"
[ "$(get /metrics)" = 200 ] || fail "/metrics"
for m in prompt_tokens_total prompt_seconds_total tokens_predicted_total tokens_predicted_seconds_total \
         n_decode_total requests_processing requests_deferred n_busy_slots_per_decode; do
  grep -q "^llamacpp:$m " "$WORK/out" || fail "/metrics lacks llamacpp:$m"
done
grep -q '^# TYPE llamacpp:prompt_tokens_total counter' "$WORK/out" || fail "/metrics TYPE lines"
[ "$(get /nowhere)" = 404 ] || fail "404"
py "assert j['error']['type']=='not_found_error'"

# --- tokenize / detokenize / apply-template ---------------------------------------------------------
step "tokenize / detokenize / apply-template"
[ "$(post /tokenize '{"content":"Hello world"}')" = 200 ] || fail "/tokenize"
TOKS=$(python3 -c "import json; print(json.dumps(json.load(open('$WORK/out'))['tokens']))")
[ "$(post /detokenize "{\"tokens\":$TOKS}")" = 200 ] || fail "/detokenize"
py "assert j=={'content':'Hello world'}, j"
[ "$(post /tokenize '{"content":"Hello world","with_pieces":true}')" = 200 ] || fail "/tokenize with_pieces"
py "assert ''.join(p['piece'] for p in j['tokens'])=='Hello world' and all(set(p)=={'id','piece'} for p in j['tokens'])"
[ "$(post /apply-template '{"messages":[{"role":"user","content":"Hi there"}]}')" = 200 ] || fail "/apply-template"
py "assert j['prompt'].startswith('<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n')"

# --- native /completion -----------------------------------------------------------------------------
step "native /completion"
REQ='{"prompt":"Once upon a time","n_predict":12,"temperature":0,"return_tokens":true,"id_slot":0}'
[ "$(post /completion "$REQ")" = 200 ] || fail "/completion"
cp "$WORK/out" "$WORK/c1.json"
py "
for k in ['index','content','tokens','id_slot','stop','model','tokens_predicted','tokens_evaluated','generation_settings','prompt','has_new_line','truncated','stop_type','stopping_word','tokens_cached','timings']: assert k in j, k
t=j['timings']
assert j['stop'] is True and j['tokens_predicted']==12 and len(j['tokens'])==12 and j['stop_type']=='limit' and j['prompt']=='Once upon a time'
assert t['prompt_n']+t['cache_n']==j['tokens_evaluated'] and t['predicted_n']==12
for k in ['prompt_ms','prompt_per_token_ms','prompt_per_second','predicted_ms','predicted_per_token_ms','predicted_per_second']: assert k in t, k
assert j['generation_settings']['temperature']==0 and j['generation_settings']['n_predict']==12"
# the same request again: the slot's tokens are reused
[ "$(post /completion "$REQ")" = 200 ] || fail "/completion again"
python3 -c "
import json; a=json.load(open('$WORK/c1.json')); b=json.load(open('$WORK/out'))
assert a['content']==b['content'] and a['tokens']==b['tokens']
t=b['timings']; assert t['cache_n']>0 and t['prompt_n']+t['cache_n']==b['tokens_evaluated'], t" || fail "repeat: same text, cache used"
# token ids and a mixed prompt
PIDS=$(python3 -c "import json; print(json.dumps(json.load(open('$WORK/c1.json'))['tokens'][:3]))")
[ "$(post /completion "{\"prompt\":$PIDS,\"n_predict\":2,\"temperature\":0}")" = 200 ] || fail "token prompt"
py "assert j['tokens_evaluated']==3"
[ "$(post /completion "{\"prompt\":[${PIDS:1:-1},\"Once\"],\"n_predict\":1}")" = 200 ] || fail "mixed prompt"
# n_probs
[ "$(post /completion '{"prompt":"Once upon","n_predict":3,"temperature":0,"n_probs":2}')" = 200 ] || fail "n_probs"
py "p=j['completion_probabilities']; assert len(p)==3 and all(set(e)=={'id','token','bytes','logprob','top_logprobs'} and len(e['top_logprobs'])==2 for e in p)"

# --- native stream: data: events, no [DONE], same text as the non-streamed run ----------------------
step "native stream: data: events, no [DONE], same text as the non-streamed run"
[ "$(post /completion "${REQ%\}},\"stream\":true}")" = 200 ] || fail "/completion stream"
sse
pyev "
a=json.load(open('$WORK/c1.json'))
assert '[DONE]' not in ev and all(e['stop'] is False for e in ev[:-1]) and ev[-1]['stop'] is True
assert ''.join(e['content'] for e in ev)==a['content']
assert [t for e in ev[:-1] for t in e['tokens']]==a['tokens'] and ev[-1]['timings']['predicted_n']==12"

# --- OAI /v1/completions ----------------------------------------------------------------------------
step "OAI /v1/completions"
OREQ='{"prompt":"Once upon a time","max_tokens":12,"temperature":0}'
[ "$(post /v1/completions "$OREQ")" = 200 ] || fail "/v1/completions"
py "
a=json.load(open('$WORK/c1.json')); c=j['choices'][0]
assert j['object']=='text_completion' and j['id'].startswith('cmpl-') and j['system_fingerprint'].startswith('b')
assert c['text']==a['content'] and c['finish_reason']=='length' and c['logprobs'] is None and c['index']==0
u=j['usage']; assert u['completion_tokens']==12 and u['total_tokens']==u['prompt_tokens']+12 and 'cached_tokens' in u['prompt_tokens_details']"
[ "$(post /v1/completions "${OREQ%\}},\"stream\":true}")" = 200 ] || fail "/v1/completions stream"
sse
pyev "
a=json.load(open('$WORK/c1.json'))
assert ev[-1]=='[DONE]' and ev.count('[DONE]')==1
ch=ev[:-1]; assert all(e['object']=='text_completion' for e in ch)
assert ''.join(e['choices'][0]['text'] for e in ch)==a['content'] and ch[-1]['choices'][0]['finish_reason']=='length'
assert all(e['choices'][0]['finish_reason'] is None for e in ch[:-1]) and 'usage' in ch[-1]"

# --- chat (this template opens <think>: the text is reasoning_content) ------------------------------
step "chat (this template opens <think>: the text is reasoning_content)"
CREQ='{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello"}],"max_tokens":10,"temperature":0}'
[ "$(post /v1/chat/completions "$CREQ")" = 200 ] || fail "/v1/chat/completions"
cp "$WORK/out" "$WORK/chat.json"
py "
c=j['choices'][0]; m=c['message']
assert j['object']=='chat.completion' and j['id'].startswith('chatcmpl-') and j['system_fingerprint'].startswith('b')
assert m['role']=='assistant' and c['finish_reason']=='length' and c['index']==0
assert m['content']=='' and len(m.get('reasoning_content',''))>0
u=j['usage']; assert u['completion_tokens']==10 and 'cached_tokens' in u['prompt_tokens_details'] and 'timings' in j"
[ "$(post /chat/completions "${CREQ%\}},\"stream\":true,\"stream_options\":{\"include_usage\":true}}")" = 200 ] || fail "chat stream"
sse
pyev "
a=json.load(open('$WORK/chat.json'))['choices'][0]['message']
assert ev[-1]=='[DONE]' and ev.count('[DONE]')==1
ch=ev[:-1]; assert all(e['object']=='chat.completion.chunk' for e in ch)
assert ch[0]['choices'][0]['delta']=={'role':'assistant','content':None}
assert ''.join(e['choices'][0]['delta'].get('reasoning_content','') for e in ch if e['choices'])==a['reasoning_content']
assert ''.join(e['choices'][0]['delta'].get('content') or '' for e in ch if e['choices'])==''
fin=ch[-2]['choices'][0]; assert fin['finish_reason']=='length' and fin['delta']=={}
assert ch[-1]['choices']==[] and ch[-1]['usage']['completion_tokens']==10 and 'timings' in ch[-1]
assert len(set(e['id'] for e in ch))==1"
# reasoning_format none: the same text comes back as content
[ "$(post /v1/chat/completions "${CREQ%\}},\"reasoning_format\":\"none\"}")" = 200 ] || fail "chat reasoning none"
py "a=json.load(open('$WORK/chat.json'))['choices'][0]['message']['reasoning_content']; m=j['choices'][0]['message']; assert 'reasoning_content' not in m and a in m['content']"
# logprobs
[ "$(post /v1/chat/completions "${CREQ%\}},\"logprobs\":true,\"top_logprobs\":3}")" = 200 ] || fail "chat logprobs"
py "l=j['choices'][0]['logprobs']['content']; assert len(l)==10 and all(len(e['top_logprobs'])==3 and e['logprob']<=0 for e in l)"
# tools go to the template
[ "$(post /apply-template '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}')" = 200 ] || fail "tools"
py "assert 'get_weather' in j['prompt']"

# --- stop strings: the text up to the stop, never the stop itself, streamed or not ------------------
step "stop strings: the text up to the stop, never the stop itself, streamed or not"
STOP=$(python3 -c "
import json,re; c=json.load(open('$WORK/c1.json'))['content']
m=[x for x in re.finditer(r'[A-Za-z]{2,}', c) if x.start()>0]
print(m[0].group(0) if m else '')")
if [ -n "$STOP" ]; then
  SREQ="{\"prompt\":\"Once upon a time\",\"n_predict\":12,\"temperature\":0,\"stop\":[\"zzzq\",\"$STOP\"]}"
  [ "$(post /completion "$SREQ")" = 200 ] || fail "stop"
  py "
a=json.load(open('$WORK/c1.json'))['content']
assert j['content']==a[:a.index('$STOP')] and j['stop_type']=='word' and j['stopping_word']=='$STOP'"
  [ "$(post /completion "${SREQ%\}},\"stream\":true}")" = 200 ] || fail "stop stream"
  sse
  pyev "
a=json.load(open('$WORK/c1.json'))['content']
assert ''.join(e['content'] for e in ev)==a[:a.index('$STOP')] and ev[-1]['stop_type']=='word'"
else
  echo "note: no stop-string candidate in the generated text"
fi

# --- logit_bias (three formats, false bans) and seeds -----------------------------------------------
step "logit_bias (three formats, false bans) and seeds"
T0=$(python3 -c "import json; print(json.load(open('$WORK/c1.json'))['tokens'][0])")
for LB in "[[${T0},false]]" "{\"${T0}\":false}" "[[${T0},-1000]]"; do
  [ "$(post /completion "{\"prompt\":\"Once upon a time\",\"n_predict\":1,\"temperature\":0,\"return_tokens\":true,\"logit_bias\":$LB}")" = 200 ] || fail "logit_bias $LB"
  py "assert j['tokens'][0]!=$T0, 'logit_bias $LB did not ban'"
done
[ "$(post /completion '{"prompt":"x","n_predict":1,"logit_bias":{"Hello":-5}}')" = 200 ] || fail "logit_bias string key"
SEEDREQ='{"prompt":"Once upon a time","n_predict":12,"temperature":1.0,"top_k":0,"top_p":1,"min_p":0,"seed":42}'
[ "$(post /completion "$SEEDREQ")" = 200 ] || fail "seed"
cp "$WORK/out" "$WORK/s1.json"
[ "$(post /completion "$SEEDREQ")" = 200 ] || fail "seed again"
python3 -c "import json; assert json.load(open('$WORK/s1.json'))['content']==json.load(open('$WORK/out'))['content']" || fail "same seed, other text"

# --- errors -----------------------------------------------------------------------------------------
step "errors"
[ "$(post /completion '{bad json')" = 400 ] || fail "bad JSON"
py "assert j['error']['type']=='invalid_request_error' and j['error']['code']==400"
for bad in '{"prompt":"x","temperature":"hot"}' '{"prompt":"x","stream":"yes"}' '{"prompt":"x","stop":5}' \
           '{"prompt":"x","n_predict":"5"}' '{"prompt":"x","logit_bias":"no"}' '{"prompt":{}}'; do
  [ "$(post /completion "$bad")" = 400 ] || fail "wrong type accepted: $bad"
done
[ "$(post /v1/chat/completions '{"messages":"hi"}')" = 400 ] || fail "messages not an array"
[ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":1,"unknown_field":{"a":1}}')" = 200 ] || fail "unknown fields are ignored"
LONG=$(python3 -c "print('hello ' * 2000)")
[ "$(post /completion "{\"prompt\":\"$LONG\"}")" = 400 ] || fail "too long prompt"
py "e=j['error']; assert e['type']=='exceed_context_size_error' and e['n_ctx']==4096 and e['n_prompt_tokens']>4096"
[ "$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$LONG\"}]}")" = 400 ] || fail "too long chat"
py "assert j['error']['type']=='exceed_context_size_error'"
head -c $((33 << 20)) /dev/zero | tr '\0' ' ' >"$WORK/big"
[ "$(curl -s "${H[@]}" -o "$WORK/out" -w '%{http_code}' "$URL/completion" --data-binary @"$WORK/big")" = 413 ] || fail "body limit"
rm -f "$WORK/big"

# --- parallel requests give the text the request gets alone -----------------------------------------
step "parallel requests give the text the request gets alone"
for i in 1 2 3 4; do
  curl -s "${H[@]}" -o "$WORK/p$i.json" "$URL/completion" -d '{"prompt":"Once upon a time","n_predict":12,"temperature":0}' &
done
wait $(jobs -p | grep -v "^$PID\$") 2>/dev/null || true
for i in 1 2 3 4; do
  python3 -c "import json; assert json.load(open('$WORK/p$i.json'))['content']==json.load(open('$WORK/c1.json'))['content']" || fail "parallel request $i"
done

# --- a client that leaves cancels its task (streamed and not) ---------------------------------------
step "a client that leaves cancels its task (streamed and not)"
# slot 1 is (not) processing: a grep, since polling with python is slow on a loaded machine
slot1() {
  curl -s "${H[@]}" -o "$WORK/out" "$URL/slots"
  grep -q "{\"id\":1,\"id_task\":[-0-9]*,\"n_ctx\":[0-9]*,\"speculative\":false,\"is_processing\":$1" "$WORK/out"
}
for stream in false true; do
  curl -s "${H[@]}" -o /dev/null "$URL/completion" \
    -d "{\"prompt\":\"Hi\",\"n_predict\":4000,\"ignore_eos\":true,\"id_slot\":1,\"stream\":$stream}" &
  CURL=$!
  for _ in $(seq 400); do slot1 true && break; sleep 0.05; done
  kill "$CURL" || fail "the 4000-token request ended before the client left"
  wait "$CURL" 2>/dev/null || true
  for _ in $(seq 400); do slot1 false && break; sleep 0.05; done
  py "s=j[1]; assert not s['is_processing'] and s['next_token'][0]['n_decoded']<4000, s"
done

# --- SIGTERM: exit status 0, promptly ---------------------------------------------------------------
step "SIGTERM: exit status 0, promptly"
kill -TERM "$PID"
for _ in $(seq 200); do
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.05
done
kill -0 "$PID" 2>/dev/null && fail "still running 10 s after SIGTERM"
set +e
wait "$PID"; rc=$?
set -e
PID=
[ $rc -eq 0 ] || fail "exit status $rc after SIGTERM"

# --- --q8-order block: the server runs its contexts in the block order -----------------------------
step "--q8-order block"
: >"$WORK/log"
"$SRV" -m "$MODEL" --chat-template-file "$TMPL" --port 0 -c 512 -np 1 -t 2 --q8-order block >"$WORK/log" 2>&1 &
PID=$!
wait_port
wait_ready
H=()
grep -q "q8 order block" "$WORK/log" || fail "the banner does not name the block order"
[ "$(post /completion '{"prompt":"Hello","n_predict":4,"temperature":0,"ignore_eos":true}')" = 200 ] || fail "completion in the block order"
py "assert j['tokens_predicted'] == 4, j"
kill -TERM "$PID"
set +e
wait "$PID"; rc=$?
set -e
PID=
[ $rc -eq 0 ] || fail "exit status $rc after SIGTERM (block order)"
echo "server.sh: ok"
