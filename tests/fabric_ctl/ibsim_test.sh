#!/usr/bin/env bash
# The controller's fabric on the real IB stack: ibsim simulates a 2-level fat-tree (8-port
# switches, 4 leaves x 4 hosts), OpenSM runs as a daemon through umad2sim with the QoS/partition
# config the controller generates, and the controller sweeps the fabric with `gpool fabric
# discover` (src/ib, libibnetdisc).
# Checks:
#   - partitions: the ports of one tenant's running job get the tenant's P_Key (smpquery pkeys),
#     a path record between them carries the P_Key and the tenant's SL (saquery -p --pkey), a
#     path between two tenants' ports returns nothing, and a cancelled job's ports lose the P_Key
#     (membership follows job end through SIGHUP);
#   - failures: `Unlink` of an uplink on a running gang's route -> the sweep finds it, `gpool
#     fabric health` shows the dead link and the job; `ReLink` -> healthy again.
# Usage: ibsim_test.sh PATH/TO/gpool
set -euo pipefail
GPOOL=$(readlink -f "${1:?usage: ibsim_test.sh GPOOL_BINARY}")
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/ib/ibsim-lib.sh"
W=$(mktemp -d)
. "$here/tests/fabric_ctl/ibsim_ctl_lib.sh"
fail() {
  echo "FAIL: $*" >&2
  echo "--- controller log" >&2; tail -30 "$W/ctl.log" >&2 || true
  echo "--- partitions" >&2; cat "$W/p.conf" >&2 || true
  exit 1
}

"$GPOOL" fabric gen fat-tree --radix 8 --leaves 4 --format ibsim --out "$W/net" >/dev/null
ibsim_start "$W/net"
trap ctl_cleanup EXIT

# The controller: the same net file, sweeps through umad2sim, writes OpenSM's files.
ctl_start --interval-ms 100 \
  --fabric "$W/net" --fabric-sweep "cd $IBSIM_DIR && LD_PRELOAD=$IBSIM_UMAD2SIM timeout -k 2 10 $GPOOL fabric discover" \
  --fabric-sweep-ms 300 --fabric-hold-down-ms 500 \
  --partitions "$W/p.conf" --opensm-pid "$W/osm.pid" --tenant-sl red=2 --tenant-sl blue=5
[ -s "$W/p.conf.opensm.conf" ] || fail "no opensm.conf written"

ibsim_opensm_daemon minhop -F "$W/p.conf.opensm.conf" || fail "opensm: $(tail -5 "$IBSIM_OSM_DIR/opensm.log")"
echo "$IBSIM_OSM_PID" >"$W/osm.pid"

ctl_hollow_agent "$W/net" 16

nodes_of() {
  for _ in $(seq 100); do
    st=$("$GPOOL" jobs describe "$1" -o json "${C[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    [ "$st" = running ] && break; sleep 0.1
  done
  [ "$st" = running ] || fail "job $1 is $st"
  "$GPOOL" jobs describe "$1" -o json "${C[@]}" | python3 -c 'import json,sys; [print(a["node"]) for a in json.load(sys.stdin)["allocations"]]'
}
red=$("$GPOOL" submit --gpus 16 --tenant red --duration 600s "${C[@]}" -- x)
blue=$("$GPOOL" submit --gpus 64 --tenant blue --duration 600s "${C[@]}" -- x)
mapfile -t rn < <(nodes_of "$red")
mapfile -t bn < <(nodes_of "$blue")
[ "${#rn[@]}" = 2 ] && [ "${#bn[@]}" = 8 ] || fail "unexpected placements: ${rn[*]} / ${bn[*]}"

guids() { grep "^$1=" "$W/p.conf" | grep -o '0x[0-9a-f]\{16\}'; }
pkey() { grep "^$1=" "$W/p.conf" | sed -n "s/^$1=0x\([0-9a-f]*\).*/\1/p"; }
for _ in $(seq 100); do [ "$(guids blue | wc -l)" = 8 ] && [ "$(guids red | wc -l)" = 2 ] && break; sleep 0.1; done
mapfile -t rg < <(guids red)
mapfile -t bg < <(guids blue)
[ "${#rg[@]}" = 2 ] && [ "${#bg[@]}" = 8 ] || fail "partitions do not list the jobs' ports"
rk=$(pkey red); bk=$(pkey blue)
full_red=$(printf '0x%04x' $((0x$rk | 0x8000)))

lid_of() { ibsim_run 20 smpquery -G portinfo "$1" 1 | sed -n 's/^Lid:\.*\([0-9]*\)$/\1/p'; }
pkeys_of() { ibsim_run 20 smpquery -G pkeys "$1" 1 | grep -o '0x[0-9a-f]\{4\}' | tr '\n' ' '; }
# OpenSM got SIGHUP when the files changed: wait for the red ports to carry red's P_Key.
ok=
for _ in $(seq 60); do
  if grep -q "$full_red" <<<"$(pkeys_of "${rg[0]}")" && grep -q "$full_red" <<<"$(pkeys_of "${rg[1]}")"; then ok=1; break; fi
  sleep 0.5
done
[ -n "$ok" ] || fail "red ports never got P_Key $full_red: $(pkeys_of "${rg[0]}")"
grep -q "$full_red" <<<"$(pkeys_of "${bg[0]}")" && fail "a blue port has red's P_Key"
r1=$(lid_of "${rg[0]}"); r2=$(lid_of "${rg[1]}"); b1=$(lid_of "${bg[0]}")
[ -n "$r1" ] && [ -n "$r2" ] && [ -n "$b1" ] || fail "no LIDs ($r1 $r2 $b1)"
pr=$(ibsim_run 20 saquery -p --slid "$r1" --dlid "$r2" --pkey "0x$rk")
grep -qiE "pkey\.*0x8?0*${rk#"${rk%%[!0]*}"}$" <<<"$pr" || fail "red path record lacks P_Key 0x$rk: $pr"
grep -q "sl\.*0x2$" <<<"$pr" || fail "red path record lacks SL 2: $pr"
cross=$(ibsim_run 20 saquery -p --slid "$r1" --dlid "$b1" 2>/dev/null || true)
grep -q "dlid" <<<"$cross" && fail "a path between red and blue exists: $cross"

# Failure on the real stack: blue's gang spans two leaves; unlink the uplink that one of its
# ring flows (task i -> task i+1, docs/control-plane.md) takes.
sw=
for i in $(seq 0 7); do
  path=$("$GPOOL" fabric path "${bn[$i]}" "${bn[$(((i + 1) % 8))]}" -o json "${C[@]}")
  read -r sw port < <(echo "$path" | python3 -c 'import json,sys; l=json.load(sys.stdin)["links"]; print(l[1]["a"], l[1]["a_port"]) if len(l)==4 else print("")') || true
  [ -n "$sw" ] && break
done
[ -n "$sw" ] || fail "no ring flow of $blue crosses leaves"
ibsim_console "Unlink \"$sw\"[$port]" >/dev/null || fail "ibsim refused Unlink"
for _ in $(seq 100); do
  "$GPOOL" fabric health -o json "${C[@]}" >"$W/h.json"
  python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["dead_links"] else 1)' "$W/h.json" && break
  sleep 0.2
done
python3 - "$W/h.json" "$sw" "$port" "$blue" <<'PY' || fail "health after Unlink: $(cat "$W/h.json")"
import json, sys
h = json.load(open(sys.argv[1])); sw, port, job = sys.argv[2], int(sys.argv[3]), sys.argv[4]
assert not h["healthy"]
assert [(l["a"], l["a_port"]) for l in h["dead_links"]] == [(sw, port)], h["dead_links"]
assert [j["id"] for j in h["affected_jobs"]] == [job], h["affected_jobs"]
PY
ibsim_console "ReLink \"$sw\"[$port]" >/dev/null || fail "ibsim refused ReLink"
for _ in $(seq 100); do
  grep -q '^healthy' <<<"$("$GPOOL" fabric health "${C[@]}" | sed -n 1p)" && break; sleep 0.2
done
grep -q '^healthy' <<<"$("$GPOOL" fabric health "${C[@]}" | sed -n 1p)" || fail "not healthy after ReLink"

# Membership follows job end: cancel red, its ports lose the P_Key.
"$GPOOL" jobs cancel "$red" "${C[@]}" >/dev/null
ok=
for _ in $(seq 60); do
  grep -q "$full_red" <<<"$(pkeys_of "${rg[0]}")" || { ok=1; break; }
  sleep 0.5
done
[ -n "$ok" ] || fail "red's port kept P_Key $full_red after the job ended"
echo PASS
