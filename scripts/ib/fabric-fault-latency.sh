#!/usr/bin/env bash
# Fault -> controller view latency on a large simulated fabric (not a CI test; minutes).
#
# ibsim simulates a 3-level fat-tree of 36-port switches (7 pods x 18 leaves x 18 hosts = 2,268
# HCAs); `gpool controller --fabric` loads the same net file and sweeps it with ibnetdiscover
# through umad2sim every --fabric-sweep-ms. Two paths are timed, each REPEAT times:
#   sweep:  `Unlink` of a leaf uplink in ibsim -> `gpool fabric health` shows the dead link
#           (detection by the discovery sweep; includes the time the sweep takes);
#   report: `gpool fabric report --link ... --state down` (what an OpenSM trap handler would
#           call) -> health shows it (the controller's own update: incremental re-route,
#           domains, health).
# Health is polled every 20 ms, so each number is up to ~20 ms + one CLI call late.
#
# MODE=events times the event path instead (no discovery sweep at all): OpenSM runs as a daemon
# with the gpool event plugin (libgpoolosmevents.so, next to the binary in ../lib or $PLUGIN),
# `gpool fabric watch` confirms each trap with PortInfo probes of the trapping switch and calls
# FabricService.Event. Per repeat: a leaf uplink down, the same link up, a core switch down and up.
# Each number is from the `Unlink`/`ReLink` console command (taken just before it is written) to
# (a) the watcher's Event RPC returning (the controller has applied it: re-route, domains,
# health) and (b) the first `gpool fabric health` poll that shows it; (a) is split into trap
# delivery (OpenSM hands the trap to the plugin), watcher receive, probe, and RPC. "up" includes
# the controller's --fabric-hold-down-ms (HOLD, default 0 here so that the path is measured).
# Usage: scripts/ib/fabric-fault-latency.sh [GPOOL_BIN] [REPEAT] [sweep|events]
# Env: FABRIC (`gpool fabric gen fat-tree` flags; default the 2,268-HCA tree; the faults name its
# switches, so another fabric only suits REPEAT=0, a start-and-stop smoke run).
set -euo pipefail
GPOOL=${1:-build/bin/gpool}
REPEAT=${2:-3}
MODE=${3:-sweep}
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/ib/ibsim-lib.sh"
if [ "$MODE" = events ]; then exec "$here/scripts/ib/fabric-event-latency.sh" "$GPOOL" "$REPEAT"; fi
W=$(mktemp -d)
CTL_PID=
cleanup() { ibsim_stop_pids "$CTL_PID"; ibsim_stop; rm -rf "$W"; }  # bounded: see ibsim-lib.sh
now() { date +%s.%N; }
ms() { python3 -c "print(round(($2 - $1) * 1000))"; }

# shellcheck disable=SC2086  # FABRIC is a list of flags
"$GPOOL" fabric gen fat-tree ${FABRIC:---levels 3 --radix 36 --pods 7} --format ibsim --out "$W/net" >/dev/null
ibsim_start "$W/net" -N 4096 -S 1024 -P 32768
trap cleanup EXIT
"$GPOOL" controller --store "sqlite:$W/state.db" --listen 127.0.0.1:0 --fabric "$W/net" \
  --fabric-sweep "cd $IBSIM_DIR && LD_PRELOAD=$IBSIM_UMAD2SIM timeout -k 2 30 ibnetdiscover" \
  --fabric-sweep-ms 100 --fabric-hold-down-ms 1000 >"$W/ctl.log" 2>&1 &
CTL_PID=$!
for _ in $(seq 600); do grep -qs grpc "$W/ctl.log" && break; sleep 0.1; done
ADDR=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$W/ctl.log")
C=(--controller "$ADDR")
hosts=$("$GPOOL" fabric show -o json "${C[@]}" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["hosts"]))')
echo "fabric: $hosts hosts; sweep: ibnetdiscover through umad2sim"
t0=$(now); ibsim_run 60 ibnetdiscover >/dev/null; t1=$(now)
echo "one ibnetdiscover of this fabric: $(ms "$t0" "$t1") ms"

dead() { "$GPOOL" fabric health -o json "${C[@]}" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["dead_links"]))'; }
wait_dead() {  # N: polls until N dead links; prints nothing
  for _ in $(seq 1500); do [ "$(dead)" = "$1" ] && return 0; sleep 0.02; done
  echo "timeout waiting for $1 dead links" >&2; return 1
}
# Leaf uplinks: leaf-pP-L ports 19..36 go up (18 down, 18 up on a 36-port 1:1 leaf).
for i in $(seq 1 "$REPEAT"); do
  link="leaf-p$((i % 7))-$((i % 18))[$((19 + i))]"
  sw=${link%%[*}; port=${link##*[}; port=${port%]}
  t0=$(now); ibsim_console "Unlink \"$sw\"[$port]" >/dev/null; wait_dead 1; t1=$(now)
  echo "sweep  #$i $link: $(ms "$t0" "$t1") ms"
  ibsim_console "ReLink \"$sw\"[$port]" >/dev/null; wait_dead 0
  t0=$(now); "$GPOOL" fabric report --link "$link" --state down "${C[@]}" >/dev/null; wait_dead 1; t1=$(now)
  echo "report #$i $link: $(ms "$t0" "$t1") ms"
  # The sweep still sees the link, so it comes back up by itself after the hold-down.
  wait_dead 0
done
