#!/usr/bin/env bash
# scripts/ib/fabric-event-latency.sh and fabric-fault-latency.sh (sweep mode) on a small fabric
# with REPEAT=0: each starts ibsim, the controller and (events) OpenSM + the watcher, prints its
# summary and must then exit: its cleanup stops everything it started, with bounded waits.
# Usage: latency_scripts_test.sh GPOOL_BIN PLUGIN_SO
set -euo pipefail
gpool=$(readlink -f "$1")
plugin=$(readlink -f "$2")
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

run() {  # NAME SCRIPT ARGS...: in its own session; killed (the whole session) after 150 s
  local name=$1 pid i; shift
  FABRIC="--levels 2 --radix 4" PLUGIN="$plugin" TMPDIR="$work" \
    setsid "$@" >"$work/$name.out" 2>"$work/$name.err" &
  pid=$!
  for i in $(seq 1 1500); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    fail "$name did not exit within 150 s (cleanup hung); output: $(tail -5 "$work/$name.out")"
  fi
  wait "$pid" || fail "$name exited $?: $(tail -5 "$work/$name.err")"
}

run events "$here/scripts/ib/fabric-event-latency.sh" "$gpool" 0
grep -q "^OpenSM (minhop) up:" "$work/events.out" || fail "events: OpenSM never came up: $(cat "$work/events.out")"
grep -q "^watcher: " "$work/events.out" || fail "events: no final line: $(cat "$work/events.out")"

run sweep "$here/scripts/ib/fabric-fault-latency.sh" "$gpool" 0 sweep
grep -q "^one ibnetdiscover of this fabric:" "$work/sweep.out" || fail "sweep: $(cat "$work/sweep.out")"

# Nothing the scripts started outlives them: their scratch folders were under $work.
for p in $(pgrep -x ibsim) $(pgrep -x opensm) $(pgrep -x gpool); do
  case $(readlink "/proc/$p/cwd" 2>/dev/null) in "$work"*) fail "left running: $(ps -o args= -p "$p")";; esac
  if grep -qF "$work" <<<"$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"; then
    fail "left running: $(ps -o args= -p "$p")"
  fi
done
echo "latency_scripts_test: OK"
