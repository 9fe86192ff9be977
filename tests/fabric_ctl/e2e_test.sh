#!/usr/bin/env bash
# End to end: the controller with a fabric (a generated 2-level fat-tree of 8-port switches: 8
# leaves x 4 hosts, 4 spines), a hollow agent whose nodes are the fabric's hosts, the fabric
# CLI, failures reported through `gpool fabric report`, and the generated OpenSM partitions.
# Checks: a 4-node gang lands in one leaf; `fabric path` crosses 3 switches between leaves; a
# dead uplink on a running gang's route makes `fabric health` report the link, the degraded
# leaf and the job; the next gang avoids the degraded leaf; after the link is back for the
# hold-down the fabric is healthy; partitions.conf lists exactly the tenant's hosts' port
# GUIDs and drops them when the job ends; /api/fabric answers with the documented shape.
# Usage: e2e_test.sh PATH/TO/gpool
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/controller.sh"
GPOOL=${1:?usage: e2e_test.sh GPOOL_BINARY}
scratch_dir
fail() { echo "FAIL: $*" >&2; echo "--- controller log" >&2; tail -50 "$TMP/ctl.log" >&2 || true; exit 1; }
FABRIC="gen:fat-tree:levels=2,radix=8"

"$GPOOL" controller --store "sqlite:$TMP/state.db" --listen 127.0.0.1:0 --http 127.0.0.1:0 \
  --interval-ms 100 --fabric "$FABRIC" --fabric-sweep-ms 100 --fabric-hold-down-ms 300 \
  --partitions "$TMP/partitions.conf" --tenant-sl blue=3 >"$TMP/ctl.log" 2>&1 &
CTL_PID=$!
wait_controller "$TMP/ctl.log" "$CTL_PID"
HTTP=$(sed -n 's/.*http \(http:[^ ]*\).*/\1/p' "$TMP/ctl.log")
C=(--controller "$ADDR")

"$GPOOL" agent --controller "$ADDR" --hollow 0 --fabric "$FABRIC" --heartbeat-ms 100 >"$TMP/agent.log" 2>&1 &
AGENT_PID=$!
for _ in $(seq 100); do
  n=$("$GPOOL" nodes -o json "${C[@]}" | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("nodes",[])))')
  [ "$n" = 32 ] && break; sleep 0.1
done
[ "$n" = 32 ] || fail "expected the fabric's 32 hosts as nodes, got $n"
grep -q '^host0001 ' <<<"$("$GPOOL" nodes "${C[@]}")" || fail "nodes are not named after the fabric's hosts"

wait_running() {  # $1 = job id; prints its nodes, one per line
  for _ in $(seq 100); do
    st=$("$GPOOL" jobs describe "$1" -o json "${C[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    [ "$st" = running ] && break; sleep 0.1
  done
  [ "$st" = running ] || fail "job $1 is $st, not running"
  "$GPOOL" jobs describe "$1" -o json "${C[@]}" | python3 -c '
import json,sys
for a in json.load(sys.stdin)["allocations"]: print(a["node"])'
}
snapshot() { "$GPOOL" fabric show -o json "${C[@]}" >"$TMP/show.json"; }
leaf_of() {  # host -> leaf domain, from the last snapshot
  python3 -c "
import json,sys
print([h['leaf'] for h in json.load(open('$TMP/show.json'))['hosts'] if h['name']=='$1'][0])"
}

# A 4-node gang fits one leaf exactly: the fabric's domains put it there.
j1=$("$GPOOL" submit --gpus 32 --tenant red --duration 600s "${C[@]}" -- train)
mapfile -t n1 < <(wait_running "$j1")
[ "${#n1[@]}" = 4 ] || fail "j1 has ${#n1[@]} nodes"
snapshot
leaves=$(for n in "${n1[@]}"; do leaf_of "$n"; done | sort -u | wc -l)
[ "$leaves" = 1 ] || fail "a 4-node gang spans $leaves leaves: ${n1[*]}"

# An 8-node gang spans two leaves; its path between them crosses leaf, spine, leaf.
j2=$("$GPOOL" submit --gpus 64 --tenant blue --duration 600s "${C[@]}" -- train)
mapfile -t n2 < <(wait_running "$j2")
[ "${#n2[@]}" = 8 ] || fail "j2 has ${#n2[@]} nodes"
snapshot
a= b=  # a ring flow of the gang (task i -> task i+1) that crosses leaves
for i in $(seq 0 7); do
  x=${n2[$i]} y=${n2[$(((i + 1) % 8))]}
  if [ "$(leaf_of "$x")" != "$(leaf_of "$y")" ]; then a=$x b=$y; break; fi
done
[ -n "$b" ] || fail "j2 does not span two leaves"
"$GPOOL" fabric path "$a" "$b" "${C[@]}" >"$TMP/path.txt" || fail "fabric path failed"
grep -q "4 links, 3 switches" "$TMP/path.txt" || fail "unexpected path: $(cat "$TMP/path.txt")"
uplink=$("$GPOOL" fabric path "$a" "$b" -o json "${C[@]}" | python3 -c '
import json,sys; l=json.load(sys.stdin)["links"][1]; print("%s[%d]" % (l["a"], l["a_port"]))')
leaf_a=$(leaf_of "$a")
grep -q "$j2" <<<"$("$GPOOL" fabric show "${C[@]}")" || fail "fabric show lists no link loaded by $j2"

# Partitions: red and blue each have their hosts' GUIDs, blue with SL 3.
for _ in $(seq 50); do grep -q "^blue=" "$TMP/partitions.conf" 2>/dev/null && break; sleep 0.1; done
red_line=$(grep '^red=' "$TMP/partitions.conf") || fail "no red partition: $(cat "$TMP/partitions.conf")"
[ "$(echo "$red_line" | grep -o '=full' | wc -l)" = 4 ] || fail "red partition is not its 4 ports: $red_line"
blue_line=$(grep '^blue=' "$TMP/partitions.conf")
[ "$(echo "$blue_line" | grep -o '=full' | wc -l)" = 8 ] || fail "blue partition is not its 8 ports: $blue_line"
blue_pkey=$(echo "$blue_line" | sed -n 's/^blue=\(0x[0-9a-f]*\).*/\1/p')
grep -q "any, pkey $blue_pkey : 3" "$TMP/partitions.conf.qos-policy" || fail "blue has no SL 3 in the QoS policy"
grep -q "^qos TRUE" "$TMP/partitions.conf.opensm.conf" || fail "opensm.conf fragment lacks qos TRUE"
[ "$(grep -v '^#' "$TMP/partitions.conf" | tail -1)" = "Default=0x7fff : SELF=full ;" ] || fail "SELF=full is not last"

# The uplink on j2's route dies.
"$GPOOL" fabric report --link "$uplink" --state down "${C[@]}" >/dev/null || fail "report down failed"
"$GPOOL" fabric health -o json "${C[@]}" >"$TMP/health.json"
python3 - "$TMP/health.json" "$j2" "$uplink" "$leaf_a" <<'PY' || fail "health after the failure: $(cat "$TMP/health.json")"
import json, sys
h = json.load(open(sys.argv[1])); job, link, leaf = sys.argv[2:5]
assert not h["healthy"], "healthy"
assert any("%s[%d]" % (l["a"], l["a_port"]) == link or "%s[%d]" % (l["b"], l["b_port"]) == link
           for l in h["dead_links"]), "dead link missing"
assert any(d["name"] == leaf for d in h["degraded"]), "leaf %s not degraded" % leaf
assert [j["id"] for j in h["affected_jobs"]] == [job], "affected: %s" % h["affected_jobs"]
PY
grep -q "DEGRADED" <<<"$("$GPOOL" fabric health "${C[@]}")" || fail "health table does not say DEGRADED"

# The first free leaf (where the next gang would go) loses an uplink: a new 4-node gang avoids it.
free_leaf=$("$GPOOL" fabric show -o json "${C[@]}" | BUSY="${n1[*]} ${n2[*]}" python3 -c '
import json, os, sys
busy = set(os.environ["BUSY"].split())
hosts = json.load(sys.stdin)["hosts"]
used = {h["leaf"] for h in hosts if h["name"] in busy}
print([h["leaf"] for h in hosts if h["leaf"] not in used][0])')
"$GPOOL" fabric report --link "${free_leaf}[5]" --state down "${C[@]}" >/dev/null || fail "report down failed"
j3=$("$GPOOL" submit --gpus 32 --tenant red --duration 600s "${C[@]}" -- train)
mapfile -t n3 < <(wait_running "$j3")
snapshot
for n in "${n3[@]}"; do [ "$(leaf_of "$n")" != "$free_leaf" ] || fail "j3 placed on the degraded leaf $free_leaf"; done
"$GPOOL" fabric report --link "${free_leaf}[5]" --state up "${C[@]}" >/dev/null

# Back up: healthy after the hold-down, nobody affected.
"$GPOOL" fabric report --link "$uplink" --state up "${C[@]}" >/dev/null
for _ in $(seq 50); do
  grep -q '^healthy' <<<"$("$GPOOL" fabric health "${C[@]}" | sed -n 1p)" && break; sleep 0.1
done
grep -q '^healthy' <<<"$("$GPOOL" fabric health "${C[@]}" | sed -n 1p)" || fail "not healthy after the link came back"

# Membership follows job end: cancelling j2 empties blue's partition
"$GPOOL" jobs cancel "$j2" "${C[@]}" >/dev/null
# (blue has no quota, so its partition may go away altogether; either way no port is in it).
for _ in $(seq 50); do grep -q '^blue=0x[0-9a-f]* : 0x' "$TMP/partitions.conf" || break; sleep 0.1; done
if grep -q '^blue=0x[0-9a-f]* : 0x' "$TMP/partitions.conf"; then fail "blue still has ports: $(grep '^blue' "$TMP/partitions.conf")"; fi
grep -q '^red=0x[0-9a-f]* : 0x' "$TMP/partitions.conf" || fail "red lost its ports"

# /api/fabric: the documented shape.
python3 - "$HTTP" <<'PY' || fail "/api/fabric"
import json, sys, urllib.request
d = json.load(urllib.request.urlopen(sys.argv[1] + "api/fabric?links=all"))
for k in ("engine", "generation", "num_links", "switches", "hosts", "links", "health"):
    assert k in d, k
assert len(d["hosts"]) == 32 and len(d["switches"]) == 12, (len(d["hosts"]), len(d["switches"]))
assert len(d["links"]) == d["num_links"] == 64, len(d["links"])
assert d["health"]["healthy"] is True
assert any(l["flows"] > 0 for l in d["links"])
PY

# Errors name what is wrong.
if "$GPOOL" fabric path host0001 nosuch "${C[@]}" 2>"$TMP/err"; then fail "path to an unknown host"; fi
grep -q "nosuch" "$TMP/err" || fail "error does not name the host: $(cat "$TMP/err")"
if "$GPOOL" fabric report --link "leaf-0[99]" --state down "${C[@]}" 2>"$TMP/err"; then fail "bad port accepted"; fi
echo PASS
