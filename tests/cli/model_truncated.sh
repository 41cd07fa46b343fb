#!/usr/bin/env bash
# A model file cut short (an interrupted download) fails at load in recur-cli and recur-server:
# exit status 1 (no crash, no run on garbage), one message that names the file and says it is
# truncated. Cuts: in the metadata, in the middle of the tensor-info table, right after the
# header (no tensor data), in the middle of the data, one byte before the end.
# (tests/ref/test_model_errors.c checks the same through the library, at more places.)
#   bash tests/cli/model_truncated.sh BUILD_DIR TESTDATA_DIR
set -euo pipefail
BUILD=$1
DATA=$2
MODEL=$DATA/models/pub-qwen35-Q8_0.gguf
TMPL=$DATA/templates/jinja/Qwen3.5-27B.jinja
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

SIZE=$(stat -c %s "$MODEL")
DATA_OFF=$("$BUILD/recur-gguf" info "$MODEL" | sed -n 's/^data offset: *\([0-9]*\)$/\1/p')
[ -n "$DATA_OFF" ] || fail "no data offset from recur-gguf info"
# the info record of the 20th tensor: its name, after its u64 length
NAME=$("$BUILD/recur-gguf" info "$MODEL" | awk '$1 == 20 && $NF ~ /weight$/ { print $NF }')
[ -n "$NAME" ] || fail "no 20th tensor in recur-gguf info"
INFO_OFF=$(python3 -c "
import struct, sys
b = open('$MODEL', 'rb').read($DATA_OFF)
n = b'$NAME'
i = b.rfind(struct.pack('<Q', len(n)) + n)
assert i > 0, 'not found'
print(i)")
[ "$INFO_OFF" -lt "$DATA_OFF" ] || fail "tensor info at $INFO_OFF, data at $DATA_OFF"

# cut OFFSET WHAT: both programs refuse the first OFFSET bytes with a message holding WHAT
cut_at() {
  local f=$WORK/cut-$1.gguf rc
  head -c "$1" "$MODEL" >"$f"
  rc=0
  "$BUILD/recur-cli" -m "$f" -p "Once upon a time" -n 4 >"$WORK/out" 2>"$WORK/err" || rc=$?
  [ "$rc" = 1 ] || fail "recur-cli on a file cut at $1 bytes: exit status $rc ($(cat "$WORK/err"))"
  grep -q "$f: gguf: .*truncated" "$WORK/err" && grep -q "$2" "$WORK/err" ||
    fail "recur-cli, cut at $1: '$(cat "$WORK/err")' does not name the file, say truncated and '$2'"
  [ ! -s "$WORK/out" ] || fail "recur-cli, cut at $1, printed: $(head -c 200 "$WORK/out")"
  rc=0
  timeout 60 "$BUILD/recur-server" -m "$f" --chat-template-file "$TMPL" --port 0 -t 2 >"$WORK/err" 2>&1 || rc=$?
  [ "$rc" = 1 ] || fail "recur-server on a file cut at $1 bytes: exit status $rc ($(cat "$WORK/err"))"
  grep -q "$f: gguf: .*truncated" "$WORK/err" && grep -q "$2" "$WORK/err" ||
    fail "recur-server, cut at $1: '$(cat "$WORK/err")' does not name the file, say truncated and '$2'"
  rm -f "$f"
  echo "model_truncated.sh: cut at $1 of $SIZE bytes: $(grep 'truncated' "$WORK/err")"
}

cut_at 100 "cannot fit"                                # the counts promise more than is left
cut_at $(( INFO_OFF + 4 )) "name"                      # inside a tensor's info record
cut_at $(( INFO_OFF + 8 + ${#NAME} + 2 )) "n_dims"
cut_at "$DATA_OFF" "past the end of the file"          # the whole header, no tensor data
cut_at $(( SIZE / 2 )) "past the end of the file"
cut_at $(( SIZE - 1 )) "past the end of the file"
echo "model_truncated.sh: ok"
