#!/usr/bin/env bash
# recur-server at its limits (issue 8): each oversized or abusive request gets a clear HTTP error
# with a JSON message, or a clean stop, and the server keeps serving: an oversize body, a huge
# n_predict, n_probs, a prompt of n_ctx tokens, thousands of stop strings or logit_bias entries,
# too many or too long banned strings and regexes, a chat template output past 16 MiB, deeply
# nested JSON, a client that leaves mid-stream; a --banned-string-file past the limits stops the
# start; then a clean SIGTERM exit (which, in the sanitizer build, is where LeakSanitizer reports
# leaks).
#   bash tests/cli/server_limits.sh BUILD_DIR TESTDATA_DIR
set -euo pipefail
BUILD=$1
DATA=$2
SRV=$BUILD/recur-server
MODEL=$DATA/models/pub-qwen35-Q8_0.gguf
TMPL=$DATA/templates/jinja/Qwen3.5-27B.jinja
NCTX=1024
source "$(dirname "$0")/lib/harness.sh"
START_S=$(date +%s)
step() { echo "server_limits.sh: [$(( $(date +%s) - START_S ))s] $*"; }

: >"$WORK/log"
"$SRV" -m "$MODEL" --chat-template-file "$TMPL" --port 0 -c "$NCTX" -np 1 -t 2 >"$WORK/log" 2>&1 &
PID=$!
wait_port
wait_ready

# postf PATH FILE -> status echoed, body in $WORK/out
postf() { curl -s -o "$WORK/out" -w '%{http_code}' "$URL$1" --data-binary @"$2"; }
post() { printf '%s' "$2" >"$WORK/req"; postf "$1" "$WORK/req"; }
py() { python3 -c "import json,sys; j=json.load(open('$WORK/out')); $1" || fail "check failed: $1 (body: $(head -c 600 "$WORK/out"))"; }
# a 4xx with llama-server's error object and a message that names the problem
err_is() { py "e=j['error']; assert e['code']==$1 and e['type']=='invalid_request_error' and '$2' in e['message'], e"; }
alive() { [ "$(post /completion '{"prompt":"Once upon","n_predict":2,"temperature":0}')" = 200 ] || fail "not serving after: $1"; }
# gen FILE PYTHON-EXPR: writes json.dumps(EXPR) into FILE
gen() { python3 -c "import json; open('$1','w').write(json.dumps($2))"; }
# expect CODE PATH WHAT PYTHON-EXPR [MESSAGE]: the request json.dumps(EXPR) to PATH answers CODE
# (and, given MESSAGE, an error object naming it)
expect() {
  gen "$WORK/req" "$4"
  [ "$(postf "$2" "$WORK/req")" = "$1" ] || fail "$3"
  [ -z "${5:-}" ] || err_is "$1" "$5"
}

step "an oversize body: 413 with a message, before the body is read"
head -c $((33 << 20)) /dev/zero | tr '\0' ' ' >"$WORK/big"
[ "$(postf /completion "$WORK/big")" = 413 ] || fail "body limit"
err_is 413 "too large"
rm -f "$WORK/big"
alive "an oversize body"

step "an empty prompt: 400 (fuzz_request found NULL + 0 there: seeds/request/regress-empty-prompt*)"
for body in '{"prompt":""}' '{"prompt":[""]}' '{"prompt":[]}'; do
  [ "$(post /completion "$body")" = 400 ] || fail "empty prompt $body"
  err_is 400 "empty"
done

step "a huge n_predict stops cleanly at the context; an impossible one is refused"
expect 200 /completion "n_predict INT32_MAX" "{'prompt': [5] * ($NCTX - 8), 'n_predict': 2147483647, 'ignore_eos': True, 'temperature': 0}"
py "assert j['stop_type']=='limit' and 0 < j['tokens_predicted'] <= 8 and j['tokens_evaluated']==$NCTX - 8, j"
[ "$(post /completion '{"prompt":"x","n_predict":1e12}')" = 400 ] || fail "n_predict 1e12"
err_is 400 "n_predict"

step "n_probs: up to 100 answered, above refused"
[ "$(post /completion '{"prompt":"Once upon","n_predict":2,"n_probs":100}')" = 200 ] || fail "n_probs 100"
py "p=j['completion_probabilities']; assert len(p)==2 and all(len(e['top_logprobs'])==100 for e in p)"
[ "$(post /completion '{"prompt":"x","n_probs":2147483647}')" = 400 ] || fail "n_probs huge"
err_is 400 "n_probs"
[ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":1000}')" = 400 ] ||
  fail "top_logprobs huge"
err_is 400 "top_logprobs"

step "a prompt of n_ctx tokens is refused; n_ctx - 1 tokens leave room for one"
expect 400 /completion "n_ctx prompt tokens" "{'prompt': [5] * $NCTX, 'n_predict': 4}"
py "e=j['error']; assert e['type']=='exceed_context_size_error' and e['n_prompt_tokens']==$NCTX and e['n_ctx']==$NCTX, e"
expect 200 /completion "n_ctx - 1 prompt tokens" "{'prompt': [5] * ($NCTX - 1), 'n_predict': 4, 'ignore_eos': True}"
py "assert j['tokens_evaluated']==$NCTX - 1 and j['tokens_predicted']<=1 and j['stop_type']=='limit', j"

step "thousands of stop strings or logit_bias entries: 400; at the limit: answered"
expect 400 /completion "5000 stop strings" "{'prompt': 'x', 'n_predict': 2, 'stop': ['s%d' % i for i in range(5000)]}" "stop"
expect 200 /completion "256 stop strings" "{'prompt': 'x', 'n_predict': 2, 'stop': ['w' * 256] + ['s%d' % i for i in range(255)]}"
expect 400 /completion "a 100 KB stop string" "{'prompt': 'x', 'n_predict': 2, 'stop': ['w' * 100000]}" "stop"
expect 400 /completion "5000 logit_bias entries" "{'prompt': 'x', 'n_predict': 2, 'logit_bias': [[i % 500, -1] for i in range(5000)]}" "logit_bias"
expect 200 /v1/completions "500 logit_bias entries" "{'prompt': 'x', 'n_predict': 2, 'logit_bias': {str(i): -1 for i in range(500)}}"
alive "stop strings and logit_bias"

step "banned strings and regexes: 400 past 256 patterns, 1024 bytes each or 64 KiB in all; at the limits: answered"
expect 400 /completion "5000 banned strings" "{'prompt': 'x', 'n_predict': 2, 'banned_strings': ['s%d' % i for i in range(5000)]}" "at most 256 patterns"
expect 400 /completion "257 patterns of three kinds" "{'prompt': 'x', 'n_predict': 2, 'banned_strings': ['s%d' % i for i in range(200)],
  'banned_regex': ['r%d' % i for i in range(28)], 'banned_regex_case_insensitive': ['c%d' % i for i in range(29)]}" "got 257"
expect 200 /completion "256 patterns" "{'prompt': 'x', 'n_predict': 2, 'banned_strings': ['s%d' % i for i in range(200)],
  'banned_regex': ['r%d' % i for i in range(28)], 'banned_regex_case_insensitive': ['c%d' % i for i in range(28)]}"
expect 400 /v1/chat/completions "a 1025-byte regex" "{'messages': [{'role': 'user', 'content': 'x'}], 'max_tokens': 2, 'banned_regex': ['a' * 1025]}" "at most 1024 bytes"
expect 400 /completion "70 KB of banned strings" "{'prompt': 'x', 'n_predict': 2, 'banned_strings': ['%03d' % i + 'w' * 1000 for i in range(70)]}" "in all"
expect 200 /completion "64 patterns, 64 KB in all" "{'prompt': 'x', 'n_predict': 2, 'banned_strings': ['%03d' % i + 'w' * 1020 for i in range(63)] + ['a' * 1024]}"
alive "banned strings"

step "a chat template whose output passes 16 MiB: 400"
python3 -c "
import json
m = [{'role': 'user', 'content': 'a' * 8500000}, {'role': 'assistant', 'content': 'b' * 8500000}, {'role': 'user', 'content': 'hi'}]
open('$WORK/req', 'w').write(json.dumps({'messages': m, 'max_tokens': 1}))"
[ "$(postf /v1/chat/completions "$WORK/req")" = 400 ] || fail "17 MB of template output"
err_is 400 "longer than 16777216 bytes"
rm -f "$WORK/req"
alive "a template output past the limit"

step "deeply nested JSON: 400 past the parser's depth (2048), and past the template's (512)"
python3 -c "open('$WORK/req','w').write('{\"prompt\":' + '[' * 100000 + ']' * 100000 + '}')"
[ "$(postf /completion "$WORK/req")" = 400 ] || fail "100000 levels"
err_is 400 "JSON"
python3 -c "
import json
d = '[' * 2000 + ']' * 2000
open('$WORK/req', 'w').write('{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":' + d + '}}]}')"
code=$(postf /v1/chat/completions "$WORK/req")
[ "$code" = 400 ] || fail "nested tools: $code"
err_is 400 "nested"
alive "deeply nested JSON"

step "a client that leaves mid-stream: its slot comes back"
events() { cat "$WORK/stream" 2>/dev/null | grep -c '^data: ' || true; }
# the whole stream (n_ctx tokens) takes a second or two: on a busy machine it may be over before
# this loop sees its first events, which tests nothing; then try again
for try in 1 2 3 4 5; do
  rm -f "$WORK/stream"
  curl -s -N -o "$WORK/stream" "$URL/completion" \
    -d '{"prompt":"Hi","n_predict":100000,"ignore_eos":true,"stream":true}' &
  CURL=$!
  for _ in $(seq 600); do
    [ "$(events)" -ge 3 ] && break
    sleep 0.05
  done
  [ "$(events)" -ge 3 ] || fail "no stream events before the client left"
  kill "$CURL" 2>/dev/null || true   # the stream may have ended just now: checked below
  wait "$CURL" 2>/dev/null || true
  grep -q '"stop":true' "$WORK/stream" || break
  [ "$try" = 5 ] && fail "the stream ended before the client left, 5 times"
  step "the stream ended before the client left: again"
done
for _ in $(seq 600); do
  curl -s -o "$WORK/out" "$URL/slots"
  grep -q '"is_processing":false' "$WORK/out" && break
  sleep 0.05
done
py "s=j[0]; assert not s['is_processing'], s"
alive "a client that left"

step "a session of 50 more requests (completion, chat, streamed, cancelled by a short timeout)"
for i in $(seq 50); do
  max=60
  case $((i % 5)) in
    0) body='{"prompt":"Once upon a time","n_predict":4}'; path=/completion ;;
    1) body='{"prompt":"Once upon","n_predict":4,"stream":true,"n_probs":2}'; path=/completion ;;
    2) body='{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stop":["a"]}'; path=/v1/chat/completions ;;
    3) body='{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true,"logprobs":true}'; path=/v1/chat/completions ;;
    4) body='{"prompt":"Hi","n_predict":100000,"ignore_eos":true,"stream":true}'; path=/completion; max=0.3 ;;
  esac
  code=$(curl -s -m "$max" -o /dev/null -w '%{http_code}' "$URL$path" -d "$body" || true)
  [ "$code" = 200 ] || { [ $((i % 5)) = 4 ] && [ "$code" = 000 ]; } || fail "request $i ($path): $code"
done
for _ in $(seq 600); do
  curl -s -o "$WORK/out" "$URL/slots"
  grep -q '"is_processing":false' "$WORK/out" && break
  sleep 0.05
done
alive "50 requests"

step "--banned-string-file past the limits: the server does not start, and says why"
python3 -c "open('$WORK/ban-many', 'w').write(''.join('s%d\\n' % i for i in range(300)))"
python3 -c "open('$WORK/ban-long', 'w').write('short\\n' + 'w' * 2000 + '\\n')"
python3 -c "open('$WORK/ban-big', 'w').write(''.join('%03d' % i + 'w' * 1000 + '\\n' for i in range(70)))"
for f in ban-many:strings ban-long:line ban-big:bytes; do
  rc=0
  "$SRV" -m "$MODEL" --port 0 --banned-string-file "$WORK/${f%%:*}" >"$WORK/out" 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "--banned-string-file ${f%%:*}: exit status $rc"
  grep -q "banned-string-file .*${f##*:}.*at most 256 strings of 1024 bytes" "$WORK/out" ||
    fail "--banned-string-file ${f%%:*}: $(cat "$WORK/out")"
done

step "SIGTERM: exit status 0"
kill -TERM "$PID"
for _ in $(seq 400); do
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.05
done
set +e
wait "$PID"; rc=$?
set -e
PID=
[ $rc -eq 0 ] || fail "exit status $rc after SIGTERM"
echo "server_limits.sh: ok"
