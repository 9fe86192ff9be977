#!/usr/bin/env bash
# The event path alone, on the real IB stack: ibsim simulates a 2-level fat-tree (8-port
# switches, 4 leaves x 4 hosts); OpenSM runs as a daemon through umad2sim with the gpool event
# plugin (libgpoolosmevents.so) loaded; `gpool fabric watch` receives its traps, probes the
# trapping switch's ports and reports to the controller, which runs WITHOUT a discovery sweep.
# Checks:
#   - `Unlink` of an uplink on a running gang's route -> `gpool fabric health` shows exactly that
#     dead link and the job as affected, and the watcher says it learned it from a trap;
#   - `ReLink` -> healthy again (after the hold-down);
#   - `Unlink` of a whole spine switch -> health lists it as a dead switch (its neighbours' traps,
#     some of which can be lost on routes through it: the watcher re-probes after OpenSM's sweep);
#     `ReLink` -> healthy.
# Usage: ibsim_events_test.sh PATH/TO/gpool PATH/TO/libgpoolosmevents.so
set -euo pipefail
GPOOL=$(readlink -f "${1:?usage: ibsim_events_test.sh GPOOL_BINARY PLUGIN_SO}")
PLUGIN=$(readlink -f "${2:?usage: ibsim_events_test.sh GPOOL_BINARY PLUGIN_SO}")
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/ib/ibsim-lib.sh"
W=$(mktemp -d)
. "$here/tests/fabric_ctl/ibsim_ctl_lib.sh"
fail() {
  echo "FAIL: $*" >&2
  echo "--- controller log" >&2; tail -20 "$W/ctl.log" >&2 || true
  echo "--- watcher" >&2; tail -30 "$W/watch.log" >&2 || true
  echo "--- opensm" >&2; grep -E "gpoolosmevents|plugin|Received Generic" "$IBSIM_OSM_DIR/opensm.stdout" "$IBSIM_OSM_DIR/opensm.log" 2>/dev/null | tail -20 >&2 || true
  exit 1
}

"$GPOOL" fabric gen fat-tree --radix 8 --leaves 4 --format ibsim --out "$W/net" >/dev/null
ibsim_start "$W/net"
trap ctl_cleanup EXIT

# The controller: the same net file, NO sweep (events only), a short hold-down.
ctl_start --interval-ms 100 \
  --fabric "$W/net" --fabric-hold-down-ms 500

# OpenSM with the plugin (OpenSM dlopens lib<name>.so from the library path).
mkdir -p "$W/plugin"
cp "$PLUGIN" "$W/plugin/libgpoolosmevents.so"
echo "event_plugin_name gpoolosmevents" >"$W/osm.conf"
export GPOOL_OSM_EVENTS="$W/ev.sock"
LD_LIBRARY_PATH="$W/plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  ibsim_opensm_daemon minhop -F "$W/osm.conf" || fail "opensm did not come up"
grep -q "gpoolosmevents: forwarding events to $W/ev.sock" "$IBSIM_OSM_DIR/opensm.stdout" ||
  fail "OpenSM did not load the plugin: $(cat "$IBSIM_OSM_DIR/opensm.stdout")"

# The watcher, through umad2sim like any IB tool (an ASan build needs its runtime first).
preload=$IBSIM_UMAD2SIM
asan_rt=$(ldd "$GPOOL" | awk '/libasan/ {print $3}')
[ -z "$asan_rt" ] || preload="$asan_rt:$IBSIM_UMAD2SIM"
(cd "$IBSIM_DIR" && LD_PRELOAD="$preload" exec "$GPOOL" fabric watch --events "$W/ev.sock" \
   --fabric "$W/net" "${C[@]}" --ready-file "$W/watch.ready" >"$W/watch.log" 2>&1) &
WATCH_PID=$!
ctl_track "$WATCH_PID"
for _ in $(seq 300); do
  [ -e "$W/watch.ready" ] && break
  kill -0 "$WATCH_PID" 2>/dev/null || fail "watcher exited"
  sleep 0.1
done
[ -e "$W/watch.ready" ] || fail "watcher not ready"
grep -q "LIDs known" "$W/watch.log" || fail "watcher did not start"

ctl_hollow_agent "$W/net" 16
job=$("$GPOOL" submit --gpus 64 --tenant blue --duration 600s "${C[@]}" -- x)
for _ in $(seq 100); do
  st=$("$GPOOL" jobs describe "$job" -o json "${C[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  [ "$st" = running ] && break; sleep 0.1
done
[ "$st" = running ] || fail "job $job is $st"
mapfile -t nodes < <("$GPOOL" jobs describe "$job" -o json "${C[@]}" |
  python3 -c 'import json,sys; [print(a["node"]) for a in json.load(sys.stdin)["allocations"]]')
[ "${#nodes[@]}" = 8 ] || fail "unexpected placement: ${nodes[*]}"
grep -q '^healthy' <<<"$("$GPOOL" fabric health "${C[@]}" | sed -n 1p)" || fail "not healthy at start"

wait_health() {  # PYTHON_CONDITION_ON_h: polls health (the event path has no fixed delay)
  for _ in $(seq 150); do
    "$GPOOL" fabric health -o json "${C[@]}" >"$W/h.json"
    python3 -c "import json,sys; h=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$W/h.json" && return 0
    sleep 0.2
  done
  return 1
}

# A link on the gang's route: the uplink one of its ring flows (task i -> i+1) takes.
sw=
for i in $(seq 0 7); do
  path=$("$GPOOL" fabric path "${nodes[$i]}" "${nodes[$(((i + 1) % 8))]}" -o json "${C[@]}")
  read -r sw port < <(echo "$path" | python3 -c 'import json,sys; l=json.load(sys.stdin)["links"]; print(l[1]["a"], l[1]["a_port"]) if len(l)==4 else print("")') || true
  [ -n "$sw" ] && break
done
[ -n "$sw" ] || fail "no ring flow of $job crosses leaves"
ibsim_console "Unlink \"$sw\"[$port]" >/dev/null || fail "ibsim refused Unlink"
wait_health 'h["dead_links"]' || fail "no dead link after Unlink $sw[$port]: $(cat "$W/h.json")"
python3 - "$W/h.json" "$sw" "$port" "$job" <<'PY' || fail "health after Unlink: $(cat "$W/h.json")"
import json, sys
h = json.load(open(sys.argv[1])); sw, port, job = sys.argv[2], int(sys.argv[3]), sys.argv[4]
assert not h["healthy"]
ends = [{(l["a"], l["a_port"]), (l["b"], l["b_port"])} for l in h["dead_links"]]
assert len(ends) == 1 and (sw, port) in ends[0], h["dead_links"]
assert [j["id"] for j in h["affected_jobs"]] == [job], h["affected_jobs"]
PY
grep -q "^change link .* down trap_ns=[1-9]" "$W/watch.log" || fail "the watcher did not report the link from a trap"

ibsim_console "ReLink \"$sw\"[$port]" >/dev/null || fail "ibsim refused ReLink"
wait_health 'h["healthy"]' || fail "not healthy after ReLink: $(cat "$W/h.json")"
grep -q "^change link .* up " "$W/watch.log" || fail "the watcher did not report the link up"

# A whole spine switch: every link of it is observed down, so the switch is.
spine=$("$GPOOL" fabric show --all -o json "${C[@]}" |
  python3 -c 'import json,sys; print([s["name"] for s in json.load(sys.stdin)["switches"] if s["name"].startswith("spine")][0])')
[ -n "$spine" ] || fail "no spine switch in the fabric"
ibsim_console "Unlink \"$spine\"" >/dev/null || fail "ibsim refused Unlink $spine"
wait_health "h['dead_switches'] == ['$spine']" || fail "$spine not dead: $(cat "$W/h.json")"
ibsim_console "ReLink \"$spine\"" >/dev/null || fail "ibsim refused ReLink $spine"
wait_health 'h["healthy"]' || fail "not healthy after ReLink $spine: $(cat "$W/h.json")"
kill -0 "$WATCH_PID" 2>/dev/null || fail "the watcher died"
echo PASS
