#!/usr/bin/env bash
# kill -9 of the controller in the middle of a burst of submits, then a restart on the same
# store and address. 4 concurrent CLI loops submit 12 jobs each (a submit in flight at the kill
# retries with its one request id until the controller is back; one started while it is away
# fails at once, nothing sent, and counts as given up). Checks: every acknowledged job id is in
# the restarted controller, no request id maps to two jobs, and there are no jobs beyond the
# acknowledged ones except for submits that gave up (at most one each).
# Usage: crash_burst_test.sh PATH/TO/gpool
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/controller.sh"
GPOOL=${1:?usage: crash_burst_test.sh GPOOL_BINARY}
TMP=$(mktemp -d)
CTL_PID=
LOOPS=()
cleanup() {
  for p in "${LOOPS[@]}" $CTL_PID; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- controller logs" >&2; cat "$TMP"/ctl*.log >&2 || true; exit 1; }

start_controller() {  # $1 = listen address, $2 = log name
  "$GPOOL" controller --store "sqlite:$TMP/state.db" --listen "$1" --interval-ms 100 >"$TMP/$2" 2>&1 &
  CTL_PID=$!
  wait_controller "$TMP/$2" "$CTL_PID"
}

start_controller 127.0.0.1:0 ctl1.log
for l in $(seq 4); do
  (
    for i in $(seq 12); do
      if id=$("$GPOOL" submit --gpus 1 --tenant "t$((l % 3))" --duration 60s --controller "$ADDR" -- job "$l" "$i" 2>>"$TMP/errors.$l"); then
        echo "$id" >>"$TMP/acked.$l"
      else
        echo x >>"$TMP/gaveup.$l"
      fi
    done
  ) &
  LOOPS+=($!)
done
for _ in $(seq 300); do
  [ "$(cat "$TMP"/acked.* 2>/dev/null | wc -l)" -ge 16 ] && break
  sleep 0.05
done
[ "$(cat "$TMP"/acked.* 2>/dev/null | wc -l)" -ge 16 ] || fail "burst did not get going"
echo "t=$SECONDS kill"; kill -9 "$CTL_PID"; wait "$CTL_PID" 2>/dev/null || true
acked_at_kill=$(cat "$TMP"/acked.* | wc -l)
sleep 0.3
start_controller "$ADDR" ctl2.log
echo "t=$SECONDS restarted"; for p in "${LOOPS[@]}"; do wait "$p" || true; done; echo "t=$SECONDS loops done"
LOOPS=()
"$GPOOL" jobs ls -o json --controller "$ADDR" >"$TMP/jobs.json"
cat "$TMP"/acked.* >"$TMP/acked"
gaveup=$({ cat "$TMP"/gaveup.* 2>/dev/null || true; } | wc -l)  # no file when nothing gave up
python3 - "$TMP/jobs.json" "$TMP/acked" "$gaveup" <<'PY' || fail "check failed"
import json, sys
jobs = json.load(open(sys.argv[1])).get("jobs", [])
acked = [l.strip() for l in open(sys.argv[2]) if l.strip()]
gaveup = int(sys.argv[3])
ids = {j["id"] for j in jobs}
missing = [a for a in acked if a not in ids]
assert not missing, f"acknowledged jobs lost: {missing[:5]}"
assert len(set(acked)) == len(acked), "one job acknowledged to two submits"
reqs = [j["client_request_id"] for j in jobs]
assert len(set(reqs)) == len(reqs), "a request id has two jobs"
extra = len(jobs) - len(acked)
assert 0 <= extra <= gaveup, f"{extra} unacknowledged jobs, {gaveup} submits gave up"
print(f"{len(acked)} acknowledged, {len(jobs)} jobs, {gaveup} gave up")
PY
echo "kill -9 after $acked_at_kill acknowledged submits"
echo "control crash burst: OK"
