#!/usr/bin/env bash
# `gpool fabric export --format slurm --node-name-map` against Slurm's own parser: a generated
# 3-level fat-tree exported with site names for some hosts and switches is loaded by a real
# slurmctld and slurmd (topology/tree), and `scontrol show topology` lists the switches and nodes
# by those names, every leaf under each of its spines. The nodes Slurm runs are the fabric's
# hosts, so slurm.conf is made from the exported hosts.
# Usage: topology_test.sh PATH/TO/gpool
set -euo pipefail
. "$(dirname "$0")/lib.sh"
in_netns "$@"
GPOOL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
TMP=$(mktemp -d)
SLURM_DIR=$TMP/slurm
cleanup() { stop_slurm; rm -rf "$TMP"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$SLURM_DIR"/slurmctld.log; do [ -f "$f" ] && tail -n 20 "$f" >&2; done; exit 1; }

# 3 levels, radix 4: 4 pods x (2 leaves + 2 spines), 4 cores, 16 hosts.
"$GPOOL" fabric gen fat-tree --levels 3 --radix 4 --out "$TMP/ft.topo" >/dev/null
"$GPOOL" fabric export "$TMP/ft.topo" --format json --out "$TMP/ft.json"
# Site names for the first host and its leaf, and one core, by GUID.
python3 - "$TMP/ft.json" "$TMP/site.map" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))
nodes = {n["name"]: n for n in f["nodes"]}
ca = next(n for n in f["nodes"] if n["type"] == "Ca")
leaf = next(e["b"]["node"] if e["a"]["node"] == ca["name"] else e["a"]["node"]
            for e in f["edges"] if ca["name"] in (e["a"]["node"], e["b"]["node"]))
core = next(n for n in f["nodes"] if n["type"] == "Switch" and n["name"].startswith("core"))
with open(sys.argv[2], "w") as out:
    out.write("# site names\n")
    out.write('%s "gpu-a01 mlx5_0"\n' % ca["guid"])
    out.write('%s "rack-a-leaf"\n' % nodes[leaf]["guid"])
    out.write('%s spine-room-core\n' % core["guid"])
PY
mkdir -p "$SLURM_DIR"
"$GPOOL" fabric export "$TMP/ft.topo" --format slurm --node-name-map "$TMP/site.map" \
  --out "$SLURM_DIR/topology.conf"
grep -q "SwitchName=rack-a-leaf .*Nodes=.*gpu-a01" "$SLURM_DIR/topology.conf" ||
  fail "mapped leaf and host not in the export: $(cat "$SLURM_DIR/topology.conf")"
grep -q "SwitchName=spine-room-core " "$SLURM_DIR/topology.conf" || fail "mapped core not in the export"
# A bad map is refused, naming the file and line.
printf '0x1 "a"\nnot-a-guid b\n' >"$TMP/bad.map"
if "$GPOOL" fabric export "$TMP/ft.topo" --format slurm --node-name-map "$TMP/bad.map" 2>"$TMP/bad.err"; then
  fail "a bad node-name map was accepted"
fi
grep -q "bad.map:2: 'not-a-guid' is not a GUID" "$TMP/bad.err" || fail "unclear error: $(cat "$TMP/bad.err")"

# Slurm's nodes are the exported hosts, all on this machine: each CA's host (the first word of
# its description), the mapped one by its site name.
names=$(python3 - "$TMP/ft.json" <<'PY'
import json, sys
cas = [n for n in json.load(open(sys.argv[1]))["nodes"] if n["type"] == "Ca"]
hosts = sorted({n["description"].split()[0] for n in cas[1:]} | {"gpu-a01"})
print(" ".join(hosts))
PY
)
[ "$(wc -w <<<"$names")" = 16 ] || fail "expected 16 hosts, got: $names"
SLURM_NODE_NAMES=$names start_slurm "TopologyPlugin=topology/tree"
topo=$(scontrol show topology) || fail "scontrol show topology failed"
grep -q "SwitchName=rack-a-leaf Level=0 .*Nodes=.*gpu-a01" <<<"$topo" || fail "leaf not loaded: $topo"
grep -q "SwitchName=spine-room-core Level=2 " <<<"$topo" || fail "core not loaded at level 2: $topo"
# Every leaf sits under each of its pod's two spines.
leaf_parents=$(grep -c "Level=1 .*Switches=[^ ]*rack-a-leaf" <<<"$topo" || true)
[ "$leaf_parents" = 2 ] || fail "the mapped leaf is not under both its spines: $topo"
echo "topology_test: ok"
