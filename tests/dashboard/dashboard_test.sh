#!/usr/bin/env bash
# End-to-end test of the web dashboard in a real headless Chromium: a controller on a temp SQLite
# store with its HTTP endpoint, a hollow agent with 8 nodes x 8 GPUs, the page loaded from the
# controller and its rendered DOM dumped (`chromium --headless=new --dump-dom`: the page's own
# JavaScript has fetched /api/state and /api/history and drawn them).
# Checks (one page load after a job was submitted through the CLI): the page shows the live node,
# GPU and allocation counts and draws the chart; the job appears
# in the jobs table, its placement is highlighted on exactly its GPUs when selected (#job=ID),
# and a hostile job command is shown as text, not run as HTML; /api/history answers with
# samples and rejects a bad `since`.
# Usage: dashboard_test.sh PATH/TO/gpool [PATH/TO/chromium]
set -euo pipefail
GPOOL=${1:?usage: dashboard_test.sh GPOOL_BINARY [CHROMIUM]}
CHROMIUM=${2:-$(command -v chromium || command -v chromium-browser || true)}
[ -x "$CHROMIUM" ] || { echo "FAIL: chromium not found (scripts/setup.sh installs it)" >&2; exit 1; }
TMP=$(mktemp -d)
CTL_PID= AGENT_PID=
cleanup() {
  for p in $AGENT_PID $CTL_PID; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/ctl.log "$TMP"/chrome.err; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}

"$GPOOL" controller --store "sqlite:$TMP/state.db" --listen 127.0.0.1:0 --http 127.0.0.1:0 \
  --interval-ms 100 --quota research=32 --quota prod=16 >"$TMP/ctl.log" 2>&1 &
CTL_PID=$!
for _ in $(seq 100); do
  grep -q grpc "$TMP/ctl.log" 2>/dev/null && break
  kill -0 "$CTL_PID" 2>/dev/null || fail "controller exited"
  sleep 0.1
done
ADDR=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$TMP/ctl.log")
HTTP=$(sed -n 's/.*http \(http:[^ ]*\).*/\1/p' "$TMP/ctl.log")
[ -n "$ADDR" ] && [ -n "$HTTP" ] || fail "controller printed no addresses"

"$GPOOL" agent --controller "$ADDR" --hollow 8 --heartbeat-ms 200 >"$TMP/agent.log" 2>&1 &
AGENT_PID=$!
nodes=0
for _ in $(seq 100); do
  nodes=$(curl -sf "${HTTP}api/state" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["nodes"]))')
  [ "$nodes" = 8 ] && break
  sleep 0.1
done
[ "$nodes" = 8 ] || fail "expected 8 nodes, got $nodes"
# The chart needs two samples (one per second).
for _ in $(seq 50); do
  n=$(curl -sf "${HTTP}api/history" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["samples"]))')
  [ "$n" -ge 2 ] && break
  sleep 0.2
done
[ "$n" -ge 2 ] || fail "/api/history has $n samples after 10 s"
code=$(curl -s -o "$TMP/bad" -w '%{http_code}' "${HTTP}api/history?since=soon")
[ "$code" = 400 ] && grep -q since "$TMP/bad" || fail "bad since: HTTP $code $(cat "$TMP/bad")"

# Renders URL and writes the DOM after the page's scripts ran. Virtual time runs the page's
# polling timers without waiting for them in real time and pauses while fetches are pending.
dump() {
  timeout 45 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --no-first-run --user-data-dir="$TMP/chrome" --virtual-time-budget=5000 --dump-dom "$1" \
    >"$2" 2>"$TMP/chrome.err" || fail "chromium failed on $1"
}
attr() { sed -n "s/.*<body[^>]* $1=\"\([^\"]*\)\".*/\1/p" "$2"; }
text_of() { sed -n "s/.*id=\"$1\"[^>]*>\([^<]*\)<.*/\1/p" "$2" | head -1; }

# A job through the CLI, with a command that would be markup if the page did not escape it.
JOB=$("$GPOOL" submit --controller "$ADDR" --tenant research --gpus 16 --duration 600s \
      -- python train.py '<img src=x onerror=document.title=1>') || fail "submit failed"
for _ in $(seq 100); do
  "$GPOOL" jobs describe "$JOB" --controller "$ADDR" -o json | grep -q '"running"' && break
  sleep 0.1
done
"$GPOOL" jobs describe "$JOB" --controller "$ADDR" -o json | grep -q '"running"' || fail "$JOB not running"

# One page load (Chromium's start is the slow part): live counts, the job, its placement.
dump "$HTTP#job=$JOB" "$TMP/page2.html"
[ "$(attr data-loaded "$TMP/page2.html")" = 1 ] || fail "page did not load its data: $(head -c 600 "$TMP/page2.html")"
[ "$(attr data-nodes "$TMP/page2.html")" = 8 ] || fail "page shows $(attr data-nodes "$TMP/page2.html") nodes, want 8"
[ "$(text_of kpi-gpus "$TMP/page2.html")" = 64 ] || fail "GPU card shows '$(text_of kpi-gpus "$TMP/page2.html")', want 64"
[ "$(text_of kpi-idle "$TMP/page2.html")" = 48 ] || fail "idle card shows '$(text_of kpi-idle "$TMP/page2.html")', want 48"
[ "$(grep -o 'class="gpu idle"' "$TMP/page2.html" | wc -l)" = 48 ] || fail "fabric view does not draw 48 idle GPUs"
grep -q 'class="total"' "$TMP/page2.html" || fail "utilization chart not drawn"
grep -q "id=\"job-$JOB\"" "$TMP/page2.html" || fail "job $JOB not in the jobs table"
grep -q "<b>$JOB</b>" "$TMP/page2.html" || fail "job $JOB not shown as the selected job"
[ "$(text_of kpi-alloc "$TMP/page2.html")" = 16 ] || fail "allocated card shows '$(text_of kpi-alloc "$TMP/page2.html")', want 16"
[ "$(text_of kpi-running "$TMP/page2.html")" = 1 ] || fail "running card shows '$(text_of kpi-running "$TMP/page2.html")', want 1"
sel=$(grep -o 'class="gpu busy sel"' "$TMP/page2.html" | wc -l)
[ "$sel" = 16 ] || fail "selected job highlights $sel GPUs, want 16"
grep -q 'data-tenant="research"' "$TMP/page2.html" || fail "tenant research not shown"
grep -q '&lt;img src=x' "$TMP/page2.html" || fail "job command not shown as escaped text"
grep -q '<img src="x"' "$TMP/page2.html" && fail "job command was injected as HTML"
echo "dashboard e2e: OK"
