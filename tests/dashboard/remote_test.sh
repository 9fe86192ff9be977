#!/usr/bin/env bash
# Remote GPUs on the fabric and in the dashboard, end to end: a controller with a fabric (the
# generated 2-level fat-tree of 8-port switches: 8 leaves x 4 hosts, 4 spines) on a temp SQLite
# store, a hollow agent whose nodes are the fabric's hosts, and the page in a real headless
# Chromium.
# The test needs GPUs lent across leaves, which the scheduler avoids while the host's own leaf
# has any (remote_placement.h), so the placement is written, not scheduled: a 2-GPU job is
# placed and started for real, the controller is stopped, the job's stored record gets what a
# remote placement writes (Allocation.remote: 2 GPUs of a host in another leaf, via_server), and
# the controller recovers it on restart (with its lease key, the hollow nodes advertising a GPU
# server). Everything after that is the product's own path (agent_pool_test schedules real
# remote placements):
# Checks: /api/fabric counts the remote flows on the route between the task's host and the
# lender (both directions, the leaf uplinks included) under the job's id, and `gpool fabric show`
# lists them; the tenant's partition holds both hosts' ports; a dead uplink on that route makes
# `gpool fabric health` report the job; the page draws a dashed arc from the host to the lender
# titled with the job, highlights the lender's GPUs as the selected job's, and names the job as
# on a broken route.
# Usage: remote_test.sh PATH/TO/gpool [PATH/TO/chromium]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/controller.sh"
GPOOL=${1:?usage: remote_test.sh GPOOL_BINARY [CHROMIUM]}
CHROMIUM=${2:-$(command -v chromium || command -v chromium-browser || true)}
[ -x "$CHROMIUM" ] || { echo "FAIL: chromium not found (scripts/setup.sh installs it)" >&2; exit 1; }
scratch_dir
FABRIC="gen:fat-tree:levels=2,radix=8"
fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/ctl.log "$TMP"/chrome.err; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}

start() {  # a controller on the store and the hollow agent; sets ADDR, HTTP, C
  # The restart's log must not hold the first run's address while the new controller starts.
  rm -f "$TMP/ctl.log"
  "$GPOOL" controller --store "sqlite:$TMP/state.db" --listen 127.0.0.1:0 --http 127.0.0.1:0 \
    --interval-ms 100 --fabric "$FABRIC" --fabric-sweep-ms 100 --partitions "$TMP/partitions.conf" \
    --lease-key "$TMP/lease.key" >"$TMP/ctl.log" 2>&1 &
  CTL_PID=$!
  wait_controller "$TMP/ctl.log" "$CTL_PID"
  HTTP=$(sed -n 's/.*http \(http:[^ ]*\).*/\1/p' "$TMP/ctl.log")
  [ -n "$HTTP" ] || fail "controller printed no HTTP address"
  C=(--controller "$ADDR")
  "$GPOOL" agent --controller "$ADDR" --hollow 0 --fabric "$FABRIC" --heartbeat-ms 100 \
    --gpu-server 127.0.0.1:9 >"$TMP/agent.log" 2>&1 &
  AGENT_PID=$!
  local n=0 _
  for _ in $(seq 100); do
    n=$("$GPOOL" nodes -o json "${C[@]}" | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("nodes",[])))')
    [ "$n" = 32 ] && break; sleep 0.1
  done
  [ "$n" = 32 ] || fail "expected the fabric's 32 hosts as nodes, got $n"
}
stop() {
  kill "$AGENT_PID" "$CTL_PID"
  wait "$AGENT_PID" 2>/dev/null || true
  wait "$CTL_PID" 2>/dev/null || true
  AGENT_PID= CTL_PID=
}
job_json() { "$GPOOL" jobs describe "$1" -o json "${C[@]}"; }

openssl rand -hex 32 >"$TMP/lease.key"  # the lent GPUs' leases are signed with it
start
JOB=$("$GPOOL" submit --gpus 2 --tenant red --duration 600s "${C[@]}" -- train) || fail "submit failed"
for _ in $(seq 100); do grep -q '"running"' <<<"$(job_json "$JOB")" && break; sleep 0.1; done
HOST=$(job_json "$JOB" | python3 -c 'import json,sys; a=json.load(sys.stdin)["allocations"]; assert len(a)==1; print(a[0]["node"])') ||
  fail "$JOB is not running on one node: $(job_json "$JOB")"
# The lender: the first host on another leaf.
LENDER=$("$GPOOL" fabric show -o json "${C[@]}" | python3 -c '
import json,sys
hosts = json.load(sys.stdin)["hosts"]
leaf = [h["leaf"] for h in hosts if h["name"] == sys.argv[1]][0]
print([h["name"] for h in hosts if h["leaf"] != leaf][0])' "$HOST")
stop

python3 - "$TMP/state.db" "$JOB" "$LENDER" <<'PY' || fail "could not edit the job record"
import json, sqlite3, sys
db, job, lender = sys.argv[1:4]
c = sqlite3.connect(db)
key, value = c.execute("SELECT key, value FROM kv WHERE CAST(key AS TEXT) = ?", ("/jobs/" + job,)).fetchone()
j = json.loads(value)
a = j["allocations"][0]
a["remote"] = [{"node": lender, "gpu_mask": 3}]  # its GPUs 0 and 1
a["via_server"] = True
text = json.dumps(j)
c.execute("UPDATE kv SET value = ? WHERE key = ?", (text.encode() if isinstance(value, bytes) else text, key))
c.commit()
PY

start
for _ in $(seq 100); do grep -q '"running"' <<<"$(job_json "$JOB")" && break; sleep 0.1; done
job_json "$JOB" | python3 -c '
import json,sys
a = json.load(sys.stdin)["allocations"][0]
assert a["remote"][0]["node"] == sys.argv[1], a' "$LENDER" || fail "recovered $JOB has no remote GPUs: $(job_json "$JOB")"

# The route model's paths between the two hosts, both ways; their links carry the job's flows.
"$GPOOL" fabric path "$HOST" "$LENDER" -o json "${C[@]}" >"$TMP/there.json" || fail "fabric path failed"
"$GPOOL" fabric path "$LENDER" "$HOST" -o json "${C[@]}" >"$TMP/back.json" || fail "fabric path back failed"
UPLINK=$(python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["links"][1]; print("%s[%d]" % (l["a"], l["a_port"]))' "$TMP/there.json")
python3 - "$HTTP" "$JOB" "$TMP/there.json" "$TMP/back.json" <<'PY' || fail "/api/fabric does not carry the remote flows"
import json, sys, urllib.request
http, job, there, back = sys.argv[1:5]
key = lambda l: tuple(sorted(["%s[%d]" % (l["a"], l["a_port"]), "%s[%d]" % (l["b"], l["b_port"])]))
want = {}
for f in (there, back):
    links = json.load(open(f))["links"]
    assert len(links) == 4, links  # host - leaf - spine - leaf - host
    for l in links: want[key(l)] = want.get(key(l), 0) + 1
d = json.load(urllib.request.urlopen(http + "api/fabric"))
got = {key(l): l for l in d["links"] if job in l.get("jobs", [])}
assert set(got) == set(want), (sorted(got), sorted(want))
for k, n in want.items(): assert got[k]["flows"] == n, (k, got[k], n)
PY
grep -Eq "^(leaf|spine)-[0-9]+\[[0-9]+\] +(leaf|spine)-[0-9]+\[[0-9]+\] .* $JOB\$" <<<"$("$GPOOL" fabric show "${C[@]}")" ||
  fail "fabric show lists no switch link loaded by $JOB: $("$GPOOL" fabric show "${C[@]}")"
# The tenant's partition: the host's port and the lender's.
for _ in $(seq 50); do grep -q "^red=" "$TMP/partitions.conf" 2>/dev/null && break; sleep 0.1; done
red=$(grep '^red=' "$TMP/partitions.conf") || fail "no red partition"
[ "$(grep -o '=full' <<<"$red" | wc -l)" = 2 ] || fail "red partition is not the host's and the lender's ports: $red"

# The uplink dies: the job is on a broken route.
"$GPOOL" fabric report --link "$UPLINK" --state down "${C[@]}" >/dev/null || fail "report down failed"
"$GPOOL" fabric health -o json "${C[@]}" | python3 -c '
import json,sys
h = json.load(sys.stdin)
assert [j["id"] for j in h["affected_jobs"]] == [sys.argv[1]], h["affected_jobs"]
assert any(sys.argv[2] in l for l in h["affected_jobs"][0]["links"]), h["affected_jobs"]' "$JOB" "$UPLINK" ||
  fail "fabric health does not report $JOB on $UPLINK: $("$GPOOL" fabric health "${C[@]}")"

# The page, with the job selected.
timeout 45 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
  --no-first-run --user-data-dir="$TMP/chrome" --virtual-time-budget=5000 --dump-dom "$HTTP#job=$JOB" \
  >"$TMP/page.html" 2>"$TMP/chrome.err" || fail "chromium failed"
grep -q 'data-loaded="1"' "$TMP/page.html" || fail "page did not load its data: $(head -c 600 "$TMP/page.html")"
arcs=$(grep -o '<path class="remote[^"]*"[^>]*>' "$TMP/page.html") || fail "no remote arc drawn"
[ "$(wc -l <<<"$arcs")" = 1 ] || fail "want one arc, got: $arcs"
grep -q "class=\"remote sel\".*data-job=\"$JOB\" data-host=\"$HOST\" data-lender=\"$LENDER\"" <<<"$arcs" ||
  fail "the arc is not $JOB's from $HOST to $LENDER: $arcs"
grep -q "<title>job $JOB (red): task 0 on $HOST uses 2 GPUs of $LENDER through its GPU server</title>" "$TMP/page.html" ||
  fail "the arc's title does not name the job: $(grep -o '<path class="remote.*</path>' "$TMP/page.html")"
grep -q 'class="dash"' "$TMP/page.html" || fail "the legend does not explain the arcs"
sel=$(grep -o 'class="gpu busy sel"' "$TMP/page.html" | wc -l)
[ "$sel" = 4 ] || fail "selected job highlights $sel GPUs, want 4 (2 on $HOST, 2 of $LENDER)"
grep -q "jobs on broken routes: $JOB" "$TMP/page.html" || fail "the page does not name $JOB as on a broken route"
# (the DOM dump writes the entities &larr; and &times; as the characters)
grep -q "id=\"detail-remote\"[^>]*>$HOST ← $LENDER×2<" "$TMP/page.html" ||
  fail "job details do not list the remote GPUs: $(grep -o 'id="detail-remote".\{0,200\}' "$TMP/page.html")"
echo "dashboard remote GPUs e2e: OK"
