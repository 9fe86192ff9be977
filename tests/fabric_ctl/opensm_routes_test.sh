#!/usr/bin/env bash
# The controller on OpenSM's routes (`gpool controller --fabric-lfts`), on the real IB stack:
# ibsim simulates a 2-level fat-tree (8-port switches, 4 leaves x 4 hosts), OpenSM (updn rooted
# at spine-3) runs as a daemon through umad2sim and writes opensm-lfts.dump (-D 0x43), the model is discovered
# after OpenSM assigned LIDs, and the controller (default engine minhop) reads OpenSM's dump.
# Checks:
#   - the leaf domains' bandwidth is what OpenSM's routes use (one uplink of four per leaf);
#   - `gpool fabric path` shows, for every ring flow of the running jobs, the path OpenSM's LFTs
#     give (traced here from the dump over the controller's own link list), hop for hop;
#   - OpenSM's routes differ from gpool's own minhop on this fabric (`gpool fabric route
#     --engine minhop --lft-out`): an uplink is chosen whose failure hits a different set of jobs
#     under the two; after `Unlink` of it the controller reports exactly the jobs whose OpenSM
#     routes crossed it as affected;
#   - OpenSM re-routes around the dead link and rewrites the dump; the controller re-reads it:
#     the routes are complete again and the flows' paths are the new dump's.
# Usage: opensm_routes_test.sh PATH/TO/gpool
set -euo pipefail
GPOOL=$(readlink -f "${1:?usage: opensm_routes_test.sh GPOOL_BINARY}")
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/ib/ibsim-lib.sh"
W=$(mktemp -d)
. "$here/tests/fabric_ctl/ibsim_ctl_lib.sh"
fail() {
  echo "FAIL: $*" >&2
  echo "--- controller log" >&2; tail -30 "$W/ctl.log" >&2 || true
  echo "--- opensm log" >&2; tail -10 "$IBSIM_OSM_DIR/opensm.log" >&2 || true
  exit 1
}

"$GPOOL" fabric gen fat-tree --radix 8 --leaves 4 --format ibsim --out "$W/net" >/dev/null
ibsim_start "$W/net"
trap ctl_cleanup EXIT

# On a regular fat-tree OpenSM's engines and gpool's pick the same ports LID by LID (the same
# "least used port" rule). Here OpenSM runs updn with spine-3 as its only root (`-a`, a common
# site choice), so all traffic between leaves goes over spine-3, unlike gpool's minhop.
# Discovery works before an SM (directed routes); it gives spine-3's GUID.
ibsim_run 30 "$GPOOL" fabric discover --out "$W/pre.topo" >/dev/null || fail "discover before OpenSM"
grep -B1 'Switch.*"spine-3"' "$W/pre.topo" | sed -n 's/^switchguid=\(0x[0-9a-f]*\).*/\1/p' >"$W/roots"
[ -s "$W/roots" ] || fail "no GUID for spine-3 in $(cat "$W/pre.topo")"
# OpenSM first (it assigns the LIDs the model must carry), sweeping every second so that it
# notices the Unlink below and re-routes.
ibsim_opensm_daemon updn -s 1 -a "$W/roots" || fail "opensm: $(tail -5 "$IBSIM_OSM_DIR/opensm.log")"
DUMP=$IBSIM_OSM_DIR/opensm-lfts.dump
for _ in $(seq 100); do [ -s "$DUMP" ] && break; sleep 0.1; done
[ -s "$DUMP" ] || fail "OpenSM wrote no $DUMP"
ibsim_run 30 "$GPOOL" fabric discover --out "$W/model.topo" >/dev/null || fail "discover"
# gpool's own routes on the same model, for comparison.
"$GPOOL" fabric route "$W/model.topo" --engine minhop --lft-out "$W/gpool-lfts.dump" >/dev/null

ctl_start --interval-ms 100 \
  --fabric "$W/model.topo" --fabric-lfts "$DUMP" \
  --fabric-sweep "cd $IBSIM_DIR && LD_PRELOAD=$IBSIM_UMAD2SIM timeout -k 2 10 $GPOOL fabric discover" \
  --fabric-sweep-ms 300 --fabric-hold-down-ms 500

ctl_hollow_agent "$W/net" 16

"$GPOOL" fabric health -o json "${C[@]}" >"$W/h0.json"
python3 - "$W/h0.json" "$DUMP" <<'PY' || fail "health before: $(cat "$W/h0.json")"
import json, sys
h = json.load(open(sys.argv[1]))
assert h["routes"] == "opensm:" + sys.argv[2], h["routes"]
assert h["routes_error"] == "" and int(h["unreachable_pairs"]) == 0, h
# The scheduler's view follows the routes: every leaf sends all its off-leaf traffic up its one
# link to spine-3, so each leaf domain has a quarter of its uplink bandwidth.
deg = {d["name"]: (d["bandwidth_gbps"], d["nominal_gbps"]) for d in h["degraded"] if d["level"] == "leaf"}
assert sorted(deg) == ["leaf-0", "leaf-1", "leaf-2", "leaf-3"], h["degraded"]
assert all(abs(now * 4 - nom) < 1e-6 for now, nom in deg.values()), deg
assert not h["dead_links"] and not h["affected_jobs"], h
PY

# Jobs of 6, 6 and 4 nodes (8 GPUs each) fill the 4 leaves of 4 hosts: each spans two leaves,
# so its ring crosses uplinks.
jobs=()
for g in 48 48 32; do jobs+=("$("$GPOOL" submit --gpus $g --tenant t --duration 600s "${C[@]}" -- x)"); done
: >"$W/jobs.txt"
for j in "${jobs[@]}"; do
  for _ in $(seq 100); do
    st=$("$GPOOL" jobs describe "$j" -o json "${C[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    [ "$st" = running ] && break; sleep 0.1
  done
  [ "$st" = running ] || fail "job $j is $st"
  "$GPOOL" jobs describe "$j" -o json "${C[@]}" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["id"], *[a["node"] for a in d["allocations"]])' >>"$W/jobs.txt"
done
"$GPOOL" fabric show --all -o json "${C[@]}" >"$W/show.json"

# routes.py: traces flows over a dump and the controller's link list.
cat >"$W/routes.py" <<'PY'
import json, re, sys
def links(show):
    adj = {}
    for l in json.load(open(show))["links"]:
        a, b = (l["a"], l["a_port"]), (l["b"], l["b_port"])
        adj[a] = b; adj[b] = a
    return adj
def dump(path):
    lft, ca_lid, sw = {}, {}, None
    for line in open(path):
        m = re.match(r"Unicast lids .* of switch .*\('(.*)'\):", line)
        if m:
            sw = m.group(1); lft[sw] = {}; continue
        m = re.match(r"(0x[0-9a-fA-F]+)\s+(\d+)(.*)", line)
        if m and sw is not None:
            lid = int(m.group(1), 16); lft[sw][lid] = int(m.group(2))
            c = re.search(r"Channel Adapter portguid 0x[0-9a-f]+: '(.*)'", m.group(3))
            if c: ca_lid[c.group(1)] = lid
    return lft, ca_lid
def trace(adj, lft, ca_lid, src, dst):
    """Hops [(node, port)] from CA src to CA dst; None when the route breaks."""
    hops, at = [(src, 1)], adj.get((src, 1))
    for _ in range(64):
        if at is None: return None
        node = at[0]
        if node == dst: return hops
        port = lft.get(node, {}).get(ca_lid[dst])
        if port is None or port == 0: return None
        hops.append((node, port)); at = adj.get((node, port))
    return None
def job_flows(nodes):
    cas = [n + " mlx5_0" for n in nodes]
    if len(cas) == 2: return [(cas[0], cas[1]), (cas[1], cas[0])]
    return [(cas[i], cas[(i + 1) % len(cas)]) for i in range(len(cas))]
def link_of(adj, hop):
    return frozenset([hop, adj[hop]])
PY

# Every ring flow: the controller's path is OpenSM's, hop for hop. Then pick the uplink.
while read -r id nodes; do
  python3 -c "import sys; sys.path.insert(0, '$W'); import routes
for s, d in routes.job_flows('$nodes'.split()): print(s.split()[0], d.split()[0])"
done <"$W/jobs.txt" | sort -u >"$W/flows.txt"
while read -r s d; do
  "$GPOOL" fabric path "$s" "$d" -o json "${C[@]}" >"$W/path-$s-$d.json" || fail "fabric path $s $d"
done <"$W/flows.txt"
python3 - "$W" "$DUMP" >"$W/pick.txt" <<'PY' || fail "paths / choice: $(cat "$W/pick.txt")"
import json, sys
sys.path.insert(0, sys.argv[1]); import routes
W = sys.argv[1]
adj = routes.links(W + "/show.json")
osm = routes.dump(sys.argv[2]); gp = routes.dump(W + "/gpool-lfts.dump")
assert osm[1] == gp[1], "the two dumps give CAs different LIDs"
for line in open(W + "/flows.txt"):
    s, d = line.split()
    got = [(l["a"], l["a_port"]) for l in json.load(open(f"{W}/path-{s}-{d}.json"))["links"]]
    want = routes.trace(adj, *osm, s + " mlx5_0", d + " mlx5_0")
    assert got == want, f"{s} -> {d}: controller {got}, OpenSM's dump {want}"
jobs = [l.split() for l in open(W + "/jobs.txt")]
def affected(t):
    out = {}
    for j in jobs:
        for s, d in routes.job_flows(j[1:]):
            for hop in routes.trace(adj, *t, s, d) or []:
                out.setdefault(routes.link_of(adj, hop), set()).add(j[0])
    return out
ao, ag = affected(osm), affected(gp)
uplinks = sorted((sorted(l) for l in ao if all(" " not in n for n, _ in l)), key=str)
pick = [l for l in uplinks if ao.get(frozenset(l), set()) != ag.get(frozenset(l), set())]
assert pick, "OpenSM's routes and gpool's minhop hit the same jobs on every uplink"
l = pick[0]
sw, port = l[0]
print(sw, port, " ".join(sorted(ao[frozenset(l)])), "|", " ".join(sorted(ag.get(frozenset(l), set()))))
PY
read -r sw port rest <"$W/pick.txt"
expect=${rest%%|*}
echo "uplink $sw[$port]: OpenSM's routes put jobs [${expect% }] on it, gpool's minhop [${rest#*|}]"

before=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["routes_loaded_ms"])' "$W/h0.json")
ibsim_console "Unlink \"$sw\"[$port]" >/dev/null || fail "ibsim refused Unlink"
for _ in $(seq 100); do
  "$GPOOL" fabric health -o json "${C[@]}" >"$W/h1.json"
  python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["dead_links"] else 1)' "$W/h1.json" && break
  sleep 0.2
done
python3 - "$W/h1.json" "$sw" "$port" "$expect" <<'PY' || fail "health after Unlink: $(cat "$W/h1.json")"
import json, sys
h = json.load(open(sys.argv[1])); sw, port, want = sys.argv[2], int(sys.argv[3]), sorted(sys.argv[4].split())
ends = {(l["a"], l["a_port"]) for l in h["dead_links"]} | {(l["b"], l["b_port"]) for l in h["dead_links"]}
assert len(h["dead_links"]) == 1 and (sw, port) in ends, h["dead_links"]
assert sorted(j["id"] for j in h["affected_jobs"]) == want, (h["affected_jobs"], want)
PY

# OpenSM's next sweep re-routes around the dead link and rewrites the dump; the controller
# picks it up: complete routes again, none over the dead link.
ok=
for _ in $(seq 150); do
  "$GPOOL" fabric health -o json "${C[@]}" >"$W/h2.json"
  if python3 -c 'import json,sys; h=json.load(open(sys.argv[1])); sys.exit(0 if int(h["routes_loaded_ms"]) > int(sys.argv[2]) and int(h["unreachable_pairs"]) == 0 and h["routes_error"] == "" else 1)' "$W/h2.json" "$before"; then ok=1; break; fi
  sleep 0.2
done
[ -n "$ok" ] || fail "controller did not load OpenSM's re-routed dump: $(cat "$W/h2.json")"
grep -q "loaded OpenSM's routes from $DUMP" "$W/ctl.log" || fail "no reload logged"
while read -r s d; do
  "$GPOOL" fabric path "$s" "$d" -o json "${C[@]}" >"$W/path-$s-$d.json" || fail "fabric path $s $d after re-route"
done <"$W/flows.txt"
python3 - "$W" "$DUMP" "$sw" "$port" <<'PY' || fail "paths after re-route"
import json, sys
sys.path.insert(0, sys.argv[1]); import routes
W, sw, port = sys.argv[1], sys.argv[3], int(sys.argv[4])
adj = routes.links(W + "/show.json")
osm = routes.dump(sys.argv[2])
for line in open(W + "/flows.txt"):
    s, d = line.split()
    got = [(l["a"], l["a_port"]) for l in json.load(open(f"{W}/path-{s}-{d}.json"))["links"]]
    assert got == routes.trace(adj, *osm, s + " mlx5_0", d + " mlx5_0"), (s, d, got)
    dead = routes.link_of(adj, (sw, port))
    assert all(routes.link_of(adj, h) != dead for h in got), (s, d, got)
PY
echo PASS
