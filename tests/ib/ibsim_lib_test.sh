#!/usr/bin/env bash
# scripts/ib/ibsim-lib.sh against the real ibsim/OpenSM/diags: start, discover, unlink/relink,
# OpenSM once and as a daemon, refusals, teardown. Usage: ibsim_lib_test.sh GPOOL_BIN
set -euo pipefail
gpool=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/ib/ibsim-lib.sh"
work=$(mktemp -d)
cleanup() { ibsim_stop; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$gpool" fabric gen fat-tree --radix 8 --leaves 4 --rate 4xHDR --format ibsim --out "$work/net" >/dev/null
ibsim_start "$work/net"
trap cleanup EXIT  # ibsim_start set its own trap; keep ours, which also calls ibsim_stop
dir=$IBSIM_DIR pid=$IBSIM_PID

cas() { ibsim_run 30 ibnetdiscover | grep -c '^Ca'; }
[ "$(cas)" = 16 ] || fail "ibnetdiscover: expected 16 CAs"
ibsim_console 'Unlink "leaf-0"[1]' >/dev/null || fail "Unlink refused"
[ "$(cas)" = 15 ] || fail "after Unlink: expected 15 CAs"
ibsim_console 'ReLink "leaf-0"[1]' >/dev/null || fail "ReLink refused"
[ "$(cas)" = 16 ] || fail "after ReLink: expected 16 CAs"
if ibsim_console 'Unlink "no-such-node"[1]' >/dev/null; then fail "unknown node accepted"; fi

# 12 clients in a row: only works if each gives its ibsim slot back (10 slots).
for i in $(seq 1 12); do ibsim_run 10 ibstat >/dev/null || fail "client $i"; done

ibsim_opensm_once updn || fail "opensm -o failed: $(tail -5 "$IBSIM_OSM_DIR/opensm.log")"
[ "$(grep -c '^Unicast lids' "$IBSIM_OSM_DIR/opensm-lfts.dump")" = 8 ] || fail "lfts dump: expected 8 switch tables"

ibsim_opensm_daemon minhop || fail "opensm daemon"
ups=$(grep -c "SUBNET UP" "$IBSIM_OSM_DIR/opensm.log")
ibsim_console 'Unlink "leaf-1"[5]' >/dev/null
for i in $(seq 1 3000); do
  [ "$(grep -c "SUBNET UP" "$IBSIM_OSM_DIR/opensm.log")" -gt "$ups" ] && break
  sleep 0.02
done
[ "$(grep -c "SUBNET UP" "$IBSIM_OSM_DIR/opensm.log")" -gt "$ups" ] || fail "no resweep after Unlink"
ibsim_opensm_stop

ibsim_stop
[ ! -d "$dir" ] || fail "scratch dir $dir left behind"
if kill -0 "$pid" 2>/dev/null; then fail "ibsim $pid still running"; fi
echo "ibsim_lib_test: OK"
