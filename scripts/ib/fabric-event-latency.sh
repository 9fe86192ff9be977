#!/usr/bin/env bash
# Fault -> controller view through the EVENT path on the 2,268-HCA fat-tree (not a CI test;
# minutes). See scripts/ib/fabric-fault-latency.sh (MODE=events) for what is timed.
# Usage: scripts/ib/fabric-event-latency.sh [GPOOL_BIN] [REPEAT]
# Env: PLUGIN (libgpoolosmevents.so), HOLD (controller hold-down ms, default 0), ENGINE (minhop),
# FABRIC (`gpool fabric gen fat-tree` flags; default the 2,268-HCA tree; the faults name its
# switches, so another fabric only suits REPEAT=0, a start-and-stop smoke run).
# Cleanup stops what the script started (watcher, controller, OpenSM, ibsim) with bounded waits.
set -euo pipefail
GPOOL=$(readlink -f "${1:-build/bin/gpool}")
REPEAT=${2:-3}
PLUGIN=$(readlink -f "${PLUGIN:-$(dirname "$GPOOL")/../lib/libgpoolosmevents.so}")
HOLD=${HOLD:-0}
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/ib/ibsim-lib.sh"
W=$(mktemp -d)
CTL_PID= WATCH_PID=
cleanup() {
  ibsim_stop_pids "$WATCH_PID" "$CTL_PID"
  ibsim_stop  # OpenSM, then ibsim
  rm -rf "$W"
}
now() { date +%s%N; }
ms() { echo $((($2 - $1) / 1000000)); }

# shellcheck disable=SC2086  # FABRIC is a list of flags
"$GPOOL" fabric gen fat-tree ${FABRIC:---levels 3 --radix 36 --pods 7} --format ibsim --out "$W/net" >/dev/null
ibsim_start "$W/net" -N 4096 -S 1024 -P 32768
trap cleanup EXIT
"$GPOOL" controller --store "sqlite:$W/state.db" --listen 127.0.0.1:0 --fabric "$W/net" \
  --fabric-hold-down-ms "$HOLD" >"$W/ctl.log" 2>&1 &
CTL_PID=$!
for _ in $(seq 600); do grep -qs grpc "$W/ctl.log" && break; sleep 0.1; done
ADDR=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$W/ctl.log")
C=(--controller "$ADDR")

mkdir -p "$W/plugin"; cp "$PLUGIN" "$W/plugin/libgpoolosmevents.so"
echo "event_plugin_name gpoolosmevents" >"$W/osm.conf"
export GPOOL_OSM_EVENTS="$W/ev.sock"
t0=$(now)
LD_LIBRARY_PATH="$W/plugin" ibsim_opensm_daemon "${ENGINE:-minhop}" -F "$W/osm.conf"
echo "OpenSM (${ENGINE:-minhop}) up: $(ms "$t0" "$(now)") ms"
t0=$(now)
(cd "$IBSIM_DIR" && LD_PRELOAD="$IBSIM_UMAD2SIM" exec "$GPOOL" fabric watch --events "$W/ev.sock" \
   --fabric "$W/net" "${C[@]}" --ready-file "$W/ready" >"$W/watch.log" 2>"$W/watch.err") &
WATCH_PID=$!
for _ in $(seq 1200); do [ -e "$W/ready" ] && break; sleep 0.05; done
[ -e "$W/ready" ] || { echo "watcher not ready: $(cat "$W/watch.err")" >&2; exit 1; }
echo "watcher ready (learned LIDs by one discovery): $(ms "$t0" "$(now)") ms; $(head -1 "$W/watch.log")"

health() { "$GPOOL" fabric health -o json "${C[@]}"; }
wait_until() {  # JQ_CONDITION: polls health; prints nothing
  for _ in $(seq 3000); do health | jq -e "$1" >/dev/null && return 0; sleep 0.02; done
  echo "timeout waiting for $1" >&2; return 1
}
# The first watcher line after line $1 matching $2: prints "trap recv probed reported".
split_of() {
  for _ in $(seq 500); do
    l=$(grep -m1 -E "$2" <<<"$(tail -n +"$(($1 + 1))" "$W/watch.log")" || true)
    [ -n "$l" ] && break; sleep 0.02
  done
  echo "$l" | sed -n 's/.*trap_ns=\([0-9]*\) recv_ns=\([0-9]*\) probed_ns=\([0-9]*\) reported_ns=\([0-9]*\).*/\1 \2 \3 \4/p'
}
RESULTS="$W/results"
: >"$RESULTS"
measure() {  # KIND CONSOLE_CMD JQ_CONDITION WATCH_REGEX
  local kind=$1 cmd=$2 cond=$3 re=$4 mark t0 t1 trap recv probed rep
  mark=$(wc -l <"$W/watch.log"); UPS=$(ups)
  t0=$(now); ibsim_console "$cmd" >/dev/null; wait_until "$cond"; t1=$(now)
  read -r trap recv probed rep < <(split_of "$mark" "$re") || true
  if [ -z "${rep:-}" ]; then echo "$kind: no watcher line for /$re/" >&2; return 1; fi
  [ "$trap" != 0 ] || trap=$recv  # decided by a re-probe after OpenSM's sweep, not a trap
  printf '%-12s %-28s controller %5d ms (trap %5d, recv %3d, probe %4d, rpc %3d)  health poll %5d ms\n' \
    "$kind" "$cmd" "$(ms "$t0" "$rep")" "$(ms "$t0" "$trap")" "$(ms "$trap" "$recv")" "$(ms "$recv" "$probed")" \
    "$(ms "$probed" "$rep")" "$(ms "$t0" "$t1")"
  echo "$kind $(ms "$t0" "$rep") $(ms "$t0" "$t1") $(ms "$t0" "$trap") $(ms "$trap" "$recv") $(ms "$recv" "$probed") $(ms "$probed" "$rep")" >>"$RESULTS"
}
ups() { grep -c '^osm subnet_up' "$W/watch.log" || true; }
# Each fault starts on an idle SM: wait for the subnet_up of OpenSM's sweep after the fault
# (3-6 s on a quiet machine, far longer at load 30), up to MAX_SETTLE_S, then SETTLE_S more.
settle() {
  local i
  for i in $(seq $((${MAX_SETTLE_S:-180} * 10))); do [ "$(ups)" -gt "$UPS" ] && break; sleep 0.1; done
  sleep "${SETTLE_S:-1}"
}

for i in $(seq 1 "$REPEAT"); do
  sw="leaf-p$((i % 7))-$((i % 18))"; port=$((19 + i % 18))
  peer=$(awk -v s="\"$sw\"" -v p="[$port]" '$1=="Switch" {cur=$3} cur==s && $1==p {print $2}' "$W/net")
  re="^change link (${sw}\\[${port}\\]|$(echo "$peer" | sed 's/"//g; s/\[/\\[/; s/\]/\\]/')) "
  measure "link-down" "Unlink \"$sw\"[$port]" '.dead_links | length == 1' "${re}down"
  settle
  measure "link-up" "ReLink \"$sw\"[$port]" '.healthy' "${re}up"
  settle
  core="core-$((i * 5 % 162))"
  measure "switch-down" "Unlink \"$core\"" ".dead_switches == [\"$core\"]" "^change switch $core down"
  settle
  measure "switch-up" "ReLink \"$core\"" '.healthy' "^change switch $core up"
  settle
done
echo
echo "summary (ms): kind n p50 max of: fault->controller updated | fault->health poll | trap delivery | watcher recv | probe | rpc"
for k in link-down link-up switch-down switch-up; do
  python3 - "$RESULTS" "$k" <<'PY'
import sys
rows = [list(map(int, l.split()[1:])) for l in open(sys.argv[1]) if l.split()[0] == sys.argv[2]]
if not rows: sys.exit(0)
def p50(v): v = sorted(v); return v[(len(v) - 1) // 2]
cols = list(zip(*rows))
print(f"{sys.argv[2]:12} n={len(rows)} " + " | ".join(f"{p50(c)}/{max(c)}" for c in cols))
PY
done
grep -c . "$W/watch.err" >/dev/null && { echo "watcher warnings:"; sort "$W/watch.err" | uniq -c | sort -rn | sed -n 1,5p; } || true
t0=$(now); for _ in 1 2 3 4 5; do health >/dev/null; done
echo "one \`gpool fabric health -o json\` call (CLI start + RPC + JSON of 2,268 hosts): $(($(ms "$t0" "$(now)") / 5)) ms"
echo "watcher: $(grep -c '^change' "$W/watch.log") changes, $(ups) OpenSM sweeps seen"
