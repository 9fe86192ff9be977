# Shared helpers of the agent tests (sourced). Needs GPOOL and TMP; sets ADDR.
. "$(dirname "${BASH_SOURCE[0]}")/../lib/controller.sh"
CTL_PID= AGENT_PIDS=
cleanup() {
  for p in $AGENT_PIDS $CTL_PID; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/*.log; do echo "--- $f" >&2; tail -n 40 "$f" >&2; done
  exit 1
}

start_controller() {  # extra controller flags in "$@"
  "$GPOOL" --log-level info controller --store "sqlite:$TMP/state.db" --listen 127.0.0.1:0 \
    --interval-ms 100 --node-timeout-ms 5000 "$@" >"$TMP/ctl.log" 2>&1 &
  CTL_PID=$!
  wait_controller "$TMP/ctl.log" "$CTL_PID"
}

# Checks on `gpool ... -o json` with grep (the JSON is printed one field per line; python's
# start-up costs seconds on a loaded machine).
state_is() { "$GPOOL" jobs describe "$1" -o json --controller "$ADDR" | grep -q "^ *\"state\": \"$2\""; }
node_count_is() { test "$("$GPOOL" nodes -o json --controller "$ADDR" | grep -c '"last_heartbeat_ms"')" = "$1"; }
power_count_is() { test "$("$GPOOL" nodes -o json --controller "$ADDR" | grep -c "\"power\": \"$1\"")" = "$2"; }
# The `gpool nodes` table's STATE column (ready, down, or a power state).
node_state_is() { "$GPOOL" nodes --controller "$ADDR" | grep -q "^$1 *$2 "; }

# wait_for SECONDS DESCRIPTION COMMAND...: retries COMMAND every 0.1 s (a liveness bound).
# Whether job $1 has ended (finished or failed); $GPOOL and $ADDR as the tests set them.
job_ended() {
  grep -Eq '"state": "(finished|failed)"' <<<"$("$GPOOL" jobs describe "$1" -o json --controller "$ADDR")"
}
wait_for() {
  local secs=$1 what=$2; shift 2
  echo "[${SECONDS}s] waiting for: $what" >&2
  local end=$((SECONDS + secs))
  while [ $SECONDS -lt $end ]; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  fail "timed out waiting for: $what"
}
