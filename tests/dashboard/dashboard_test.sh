#!/usr/bin/env bash
# End-to-end test of the web dashboard in a real headless Chromium: a controller on a temp SQLite
# store with its HTTP endpoint, a hollow agent with 8 nodes x 8 GPUs, the page loaded from the
# controller and its rendered DOM dumped (`chromium --headless=new --dump-dom`: the page's own
# JavaScript has fetched /api/state and /api/history and drawn them).
# Checks (one page load after a job was submitted through the CLI): the page shows the live node,
# GPU and allocation counts and draws the chart; the job appears
# in the jobs table, its placement is highlighted on exactly its GPUs when selected (#job=ID),
# and a hostile job command is shown as text, not run as HTML; a pending job's row says why it
# waits; /api/history answers with samples and rejects a bad `since`.
# The CLI's per-task --cpus/--mem reach the job (`gpool jobs describe`).
# Auth is on (--auth-tokens; src/control/http_auth.h): the page gets the admin token from its URL
# fragment (#token=...), the HTTP API answers 401 without a token and a tenant token sees only
# its tenant's jobs; an expired token is refused by both the HTTP and the gRPC API.
# Usage: dashboard_test.sh PATH/TO/gpool [PATH/TO/chromium]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/controller.sh"
GPOOL=${1:?usage: dashboard_test.sh GPOOL_BINARY [CHROMIUM]}
CHROMIUM=${2:-$(command -v chromium || command -v chromium-browser || true)}
[ -x "$CHROMIUM" ] || { echo "FAIL: chromium not found (scripts/setup.sh installs it)" >&2; exit 1; }
scratch_dir
ADMIN=admin-token-$RANDOM$RANDOM-dash RESEARCH=research-token-$RANDOM$RANDOM PROD=prod-token-$RANDOM$RANDOM
AGENT=agent-token-$RANDOM$RANDOM-dash EXPIRED=expired-token-$RANDOM$RANDOM
cat >"$TMP/tokens" <<TOK
$ADMIN admin
$RESEARCH tenant research
$PROD tenant prod
$AGENT agent
$EXPIRED tenant research expires=2020-01-01
TOK
fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/ctl.log "$TMP"/chrome.err; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}

"$GPOOL" controller --store "sqlite:$TMP/state.db" --listen 127.0.0.1:0 --http 127.0.0.1:0 \
  --interval-ms 100 --quota research=32 --quota prod=16 --auth-tokens "$TMP/tokens" >"$TMP/ctl.log" 2>&1 &
CTL_PID=$!
for _ in $(seq 100); do
  grep -q grpc "$TMP/ctl.log" 2>/dev/null && break
  kill -0 "$CTL_PID" 2>/dev/null || fail "controller exited"
  sleep 0.1
done
ADDR=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$TMP/ctl.log")
HTTP=$(sed -n 's/.*http \(http:[^ ]*\).*/\1/p' "$TMP/ctl.log")
[ -n "$ADDR" ] && [ -n "$HTTP" ] || fail "controller printed no addresses"

"$GPOOL" agent --controller "$ADDR" --token "$AGENT" --hollow 8 --heartbeat-ms 200 >"$TMP/agent.log" 2>&1 &
AGENT_PID=$!
get() { curl -sf -H "Authorization: Bearer $1" "${HTTP}$2"; }  # TOKEN PATH
nodes=0
for _ in $(seq 100); do
  nodes=$(get "$ADMIN" api/state | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["nodes"]))')
  [ "$nodes" = 8 ] && break
  sleep 0.1
done
[ "$nodes" = 8 ] || fail "expected 8 nodes, got $nodes"
# The chart needs two samples (one per second).
for _ in $(seq 50); do
  n=$(get "$ADMIN" api/history | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["samples"]))')
  [ "$n" -ge 2 ] && break
  sleep 0.2
done
[ "$n" -ge 2 ] || fail "/api/history has $n samples after 10 s"
code=$(curl -s -o "$TMP/bad" -w '%{http_code}' -H "Authorization: Bearer $ADMIN" "${HTTP}api/history?since=soon")
[ "$code" = 400 ] && grep -q since "$TMP/bad" || fail "bad since: HTTP $code $(cat "$TMP/bad")"

# Renders URL and writes the DOM after the page's scripts ran. Virtual time runs the page's
# polling timers without waiting for them in real time and pauses while fetches are pending.
dump() {
  timeout 45 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --no-first-run --user-data-dir="$TMP/chrome" --virtual-time-budget=5000 --dump-dom "$1" \
    >"$2" 2>"$TMP/chrome.err" || fail "chromium failed on $1"
}
attr() { sed -n "s/.*<body[^>]* $1=\"\([^\"]*\)\".*/\1/p" "$2"; }
text_of() { sed -n "s/.*id=\"$1\"[^>]*>\([^<]*\)<.*/\1/p" "$2" | sed -n 1p; }

# A job through the CLI, with a command that would be markup if the page did not escape it.
JOB=$("$GPOOL" submit --controller "$ADDR" --token "$RESEARCH" --gpus 16 --duration 600s \
      -- python train.py '<img src=x onerror=document.title=1>') || fail "submit failed"
PJOB=$("$GPOOL" submit --controller "$ADDR" --token "$PROD" --gpus 8 --cpus 2.5 --mem 16GiB \
        --duration 600s -- serve) || fail "prod submit failed"
grep -q 'CPU, memory: 2.5 CPUs, 16 GiB per task' <<<"$("$GPOOL" jobs describe "$PJOB" --controller "$ADDR" --token "$PROD")" ||
  fail "describe does not show the CPU/memory request: $("$GPOOL" jobs describe "$PJOB" --controller "$ADDR" --token "$PROD")"
for j in "$JOB" "$PJOB"; do
  for _ in $(seq 100); do
    grep -q '"running"' <<<"$("$GPOOL" jobs describe "$j" --controller "$ADDR" --token "$ADMIN" -o json)" && break
    sleep 0.1
  done
  grep -q '"running"' <<<"$("$GPOOL" jobs describe "$j" --controller "$ADDR" --token "$ADMIN" -o json)" ||
    fail "$j not running"
done

# HTTP auth: no token -> 401 naming what is missing; an expired token -> 401 saying so (and the
# gRPC API says the same); a tenant sees its own jobs only; the static page is public.
code=$(curl -s -o "$TMP/r" -w '%{http_code}' "${HTTP}api/state")
[ "$code" = 401 ] && grep -q "missing 'Authorization: Bearer TOKEN'" "$TMP/r" || fail "no token: HTTP $code $(cat "$TMP/r")"
code=$(curl -s -o "$TMP/r" -w '%{http_code}' -H "Authorization: Bearer $EXPIRED" "${HTTP}api/state")
[ "$code" = 401 ] && grep -q 'token expired at 2020-01-01T00:00:00Z' "$TMP/r" ||
  fail "expired token: HTTP $code $(cat "$TMP/r")"
if "$GPOOL" jobs --controller "$ADDR" --token "$EXPIRED" >"$TMP/r" 2>&1; then fail "gRPC took an expired token"; fi
grep -q 'token expired at 2020-01-01T00:00:00Z' "$TMP/r" || fail "gRPC expired token: $(cat "$TMP/r")"
ids() { python3 -c 'import json,sys; print(" ".join(sorted(j["id"] for j in json.load(sys.stdin)["jobs"])))'; }
[ "$(get "$RESEARCH" api/state | ids)" = "$JOB" ] || fail "research token sees: $(get "$RESEARCH" api/state | ids)"
[ "$(get "$ADMIN" api/state | ids)" = "$(printf '%s\n' "$JOB" "$PJOB" | sort | xargs)" ] ||
  fail "admin token sees: $(get "$ADMIN" api/state | ids)"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $RESEARCH" "${HTTP}metrics")
[ "$code" = 403 ] || fail "tenant token on /metrics: HTTP $code, want 403"
code=$(curl -s -o /dev/null -w '%{http_code}' "${HTTP}app.js")
[ "$code" = 200 ] || fail "/app.js without a token: HTTP $code, want 200"

# One page load (Chromium's start is the slow part): live counts, the job, its placement. The
# admin token comes in the fragment, as `make demo` prints it.
# A job larger than the cluster waits; the jobs table says why (the scheduler's reason).
BIG=$("$GPOOL" submit --controller "$ADDR" --token "$PROD" --gpus 100000 --duration 60s -- big) ||
  fail "big submit failed"
for _ in $(seq 50); do
  grep -q '"pending_reason"' <<<"$("$GPOOL" jobs describe "$BIG" --controller "$ADDR" --token "$ADMIN" -o json)" && break
  sleep 0.1
done
dump "$HTTP#token=$ADMIN&job=$JOB" "$TMP/page2.html"
[ "$(attr data-loaded "$TMP/page2.html")" = 1 ] || fail "page did not load its data: $(head -c 600 "$TMP/page2.html")"
[ "$(attr data-nodes "$TMP/page2.html")" = 8 ] || fail "page shows $(attr data-nodes "$TMP/page2.html") nodes, want 8"
[ "$(text_of kpi-gpus "$TMP/page2.html")" = 64 ] || fail "GPU card shows '$(text_of kpi-gpus "$TMP/page2.html")', want 64"
[ "$(text_of kpi-idle "$TMP/page2.html")" = 40 ] || fail "idle card shows '$(text_of kpi-idle "$TMP/page2.html")', want 40"
[ "$(grep -o 'class="gpu idle"' "$TMP/page2.html" | wc -l)" = 40 ] || fail "fabric view does not draw 40 idle GPUs"
grep -q 'class="total"' "$TMP/page2.html" || fail "utilization chart not drawn"
grep -q "id=\"job-$JOB\"" "$TMP/page2.html" || fail "job $JOB not in the jobs table"
grep -q "<b>$JOB</b>" "$TMP/page2.html" || fail "job $JOB not shown as the selected job"
[ "$(text_of kpi-alloc "$TMP/page2.html")" = 24 ] || fail "allocated card shows '$(text_of kpi-alloc "$TMP/page2.html")', want 24"
[ "$(text_of kpi-running "$TMP/page2.html")" = 2 ] || fail "running card shows '$(text_of kpi-running "$TMP/page2.html")', want 2"
grep -q "id=\"job-$PJOB\"" "$TMP/page2.html" || fail "admin page does not list prod's job $PJOB"
sel=$(grep -o 'class="gpu busy sel"' "$TMP/page2.html" | wc -l)
[ "$sel" = 16 ] || fail "selected job highlights $sel GPUs, want 16"
grep -q 'data-tenant="research"' "$TMP/page2.html" || fail "tenant research not shown"
grep -q '&lt;img src=x' "$TMP/page2.html" || fail "job command not shown as escaped text"
grep -q '<img src="x"' "$TMP/page2.html" && fail "job command was injected as HTML"
grep -q "$ADMIN" "$TMP/page2.html" && fail "the token appears in the page DOM"
grep -q "id=\"job-$BIG\".*<td class=\"why\"[^>]*>asks 100000 GPUs; the cluster has 64 in all<" "$TMP/page2.html" ||
  fail "the jobs table does not say why $BIG waits"

# The page without a token says why it shows nothing.
dump "$HTTP" "$TMP/page3.html"
[ "$(attr data-denied "$TMP/page3.html")" = 401 ] || fail "tokenless page: data-denied='$(attr data-denied "$TMP/page3.html")', want 401"
grep -q '#token=TOKEN' "$TMP/page3.html" || fail "tokenless page does not say how to pass a token"
echo "dashboard e2e: OK"
