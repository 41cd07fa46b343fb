# harness.sh — what the server shell tests share (sourced, not run: tests/cli/lib is not globbed
# into CTest): a work folder removed at exit with the server killed, fail() showing the tail of the
# server's log, and the wait for a server started on port 0 to print its port and load its model.
# The sourcing script starts the server with its output in "$WORK/log" and sets PID, emptying the
# log first (`: >"$WORK/log"`) in this shell: a background job's own `>` runs in the child after the
# fork, so without it wait_port could read the previous server's "listening on" line, and then find
# the log truncated under it.
WORK=$(mktemp -d)
PID=
harness_cleanup() {
  [ -n "$PID" ] && kill -KILL "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap harness_cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- server log:"; tail -20 "$WORK/log" || true; exit 1; }

# wait_port: the port the server printed ("listening on ..."): sets PORT and URL
wait_port() {
  for _ in $(seq 600); do
    grep -q "listening on" "$WORK/log" && break
    sleep 0.05
  done
  PORT=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/log")
  [ -n "$PORT" ] || fail "no port in the log"
  URL=http://127.0.0.1:$PORT
}

# wait_ready: /health answers 200 (the model is loaded)
wait_ready() {
  for _ in $(seq 1200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && return
    sleep 0.05
  done
  fail "the server did not get ready"
}
