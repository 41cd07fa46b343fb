#!/usr/bin/env bash
# recur-server on a full disk (issue 8), without root:
#  - ENOSPC: the save's temporary file NAME.tmp is a symlink to /dev/full (every write fails with
#    "No space left on device", as on a full file system);
#  - EFBIG: the server runs under `ulimit -f` (RLIMIT_FSIZE) below the save's size; the server
#    ignores SIGXFSZ, so the write fails instead of the process being killed.
# A slot save then answers HTTP 500 with a JSON error naming the cause; a --cache-dir write logs
# a line; the server keeps serving; the previous file is byte-identical and still restores; no
# .tmp file is left behind.
#   bash tests/cli/disk_full.sh BUILD_DIR TESTDATA_DIR
set -euo pipefail
BUILD=$1
DATA=$2
SRV=$BUILD/recur-server
MODEL=$DATA/models/pub-qwen35-Q8_0.gguf
TMPL=$DATA/templates/jinja/Qwen3.5-27B.jinja
source "$(dirname "$0")/lib/harness.sh"
SLOTS=$WORK/slots
CACHE=$WORK/cache
mkdir -p "$SLOTS" "$CACHE"
step() { echo "disk_full.sh: $*"; }
[ -w /dev/full ] || { echo "disk_full.sh: no writable /dev/full"; exit 1; }

# start [FSIZE_KIB]: a server on a free port, under a file-size limit when given (its log is
# far smaller than the limit)
start() {
  : >"$WORK/log"
  (
    [ -n "${1:-}" ] && ulimit -f "$1"
    exec "$SRV" -m "$MODEL" --chat-template-file "$TMPL" --port 0 -c 512 -np 2 -t 2 \
      --slot-save-path "$SLOTS" --cache-dir "$CACHE"
  ) >"$WORK/log" 2>&1 &
  PID=$!
  wait_port
  wait_ready
}
# stop: SIGTERM; the server must exit by itself with status 0
stop() {
  kill -TERM "$PID"
  local rc=0
  wait "$PID" || rc=$?
  PID=
  [ "$rc" = 0 ] || fail "the server exited with status $rc"
}
post() { printf '%s' "$2" >"$WORK/req"; curl -s -o "$WORK/out" -w '%{http_code}' "$URL$1" --data-binary @"$WORK/req"; }
py() { python3 -c "import json,sys; j=json.load(open('$WORK/out')); $1" || fail "check failed: $1 (body: $(head -c 600 "$WORK/out"))"; }
alive() { [ "$(post /completion '{"prompt":"Once upon","n_predict":2,"temperature":0}')" = 200 ] || fail "not serving after: $1"; }
GEN='{"prompt":"The sea was calm that night and the ship","n_predict":16,"temperature":0,"id_slot":0}'
# wait_log TEXT: until the log holds TEXT (the cache write happens after 2 s idle)
wait_log() {
  for _ in $(seq 600); do grep -q "$1" "$WORK/log" && return; sleep 0.05; done
  fail "no log line '$1'"
}

step "a first save and a prompt-cache file, on a disk with room"
start
[ "$(post /completion "$GEN")" = 200 ] || fail "generate"
[ "$(post /slots/0?action=save '{"filename":"conv.bin"}')" = 200 ] || fail "first save"
wait_log "prompt cache written"
stop
cp "$SLOTS/conv.bin" "$WORK/conv.ref"
cp "$CACHE/prompt-cache.bin" "$WORK/cache.ref"
SAVE_KIB=$(( $(stat -c %s "$WORK/conv.ref") / 1024 ))
step "the save is $SAVE_KIB KiB, the prompt cache $(( $(stat -c %s "$WORK/cache.ref") / 1024 )) KiB"

step "ENOSPC: slot save over the earlier one -> 500 with the cause, old file intact, no .tmp"
ln -s /dev/full "$SLOTS/conv.bin.tmp"
start
[ "$(post /completion "$GEN")" = 200 ] || fail "generate"
code=$(post /slots/0?action=save '{"filename":"conv.bin"}')
[ "$code" = 500 ] || fail "save on a full disk answered $code"
py "e=j['error']; assert e['code']==500 and 'No space left on device' in e['message'], e"
cmp -s "$SLOTS/conv.bin" "$WORK/conv.ref" || fail "the earlier save changed"
[ ! -e "$SLOTS/conv.bin.tmp" ] && [ ! -L "$SLOTS/conv.bin.tmp" ] || fail "conv.bin.tmp left behind"
alive "a failed save"
[ "$(post /slots/1?action=restore '{"filename":"conv.bin"}')" = 200 ] || fail "the earlier save does not restore"
py "assert j['n_restored'] > 0, j"
stop

# (the prompt cache was written meanwhile, on a disk with room: the new reference)
cp "$CACHE/prompt-cache.bin" "$WORK/cache.ref"
step "ENOSPC: the --cache-dir write fails with a log line, the earlier file stays"
ln -s /dev/full "$CACHE/prompt-cache.bin.tmp"
start
# one change, then nothing until the check: the failed write removes the symlink, so a later
# change would be written to a disk with room again
[ "$(post /completion '{"prompt":"Another prompt, so that the cache changed","n_predict":8}')" = 200 ] || fail "generate"
wait_log "prompt cache not written: .*No space left on device"
cmp -s "$CACHE/prompt-cache.bin" "$WORK/cache.ref" || fail "the earlier prompt-cache.bin changed"
[ ! -e "$CACHE/prompt-cache.bin.tmp" ] && [ ! -L "$CACHE/prompt-cache.bin.tmp" ] || fail "prompt-cache.bin.tmp left behind"
alive "a failed cache write"
stop

cp "$CACHE/prompt-cache.bin" "$WORK/cache.ref"
step "EFBIG: under ulimit -f $(( SAVE_KIB / 2 )) KiB: save -> 500, cache write -> log line, server alive"
start $(( SAVE_KIB / 2 ))
[ "$(post /completion "$GEN")" = 200 ] || fail "generate"
code=$(post /slots/0?action=save '{"filename":"conv.bin"}')
[ "$code" = 500 ] || fail "save over the file-size limit answered $code"
py "e=j['error']; assert e['code']==500 and 'File too large' in e['message'], e"
cmp -s "$SLOTS/conv.bin" "$WORK/conv.ref" || fail "the earlier save changed"
[ ! -e "$SLOTS/conv.bin.tmp" ] || fail "conv.bin.tmp left behind"
alive "a save over the file-size limit"
[ "$(post /completion '{"prompt":"A third prompt, new to the cache","n_predict":8}')" = 200 ] || fail "generate"
wait_log "prompt cache not written: .*File too large"
cmp -s "$CACHE/prompt-cache.bin" "$WORK/cache.ref" || fail "the earlier prompt-cache.bin changed"
[ ! -e "$CACHE/prompt-cache.bin.tmp" ] || fail "prompt-cache.bin.tmp left behind"
[ "$(post /slots/1?action=restore '{"filename":"conv.bin"}')" = 200 ] || fail "the earlier save does not restore"
alive "a cache write over the file-size limit"
stop
grep -q "shutting down" "$WORK/log" || fail "no clean shutdown"
cmp -s "$CACHE/prompt-cache.bin" "$WORK/cache.ref" || fail "the exit's cache write changed prompt-cache.bin"
[ ! -e "$CACHE/prompt-cache.bin.tmp" ] || fail "prompt-cache.bin.tmp left behind at exit"
echo "disk_full.sh: ok"
