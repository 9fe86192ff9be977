#!/usr/bin/env bash
# demo-cluster.sh BUILD_DIR: the control plane on the brief's 2,048 GPUs, hollow.
#   A controller on a temp SQLite store with token auth (an admin, three tenants with quotas, a
#   cluster token for the agent), a hollow agent simulating 256 nodes x 8 H100 over the real
#   gRPC protocol, and a realistic mix through the CLI: large training gangs with leaf locality,
#   fine-tunes, non-preemptible prod inference on GPU fractions, interns' notebooks, one job
#   from a YAML spec. Prints job, node and tenant summaries, a `gpool top` frame and the
#   dashboard URL. Ends by itself after DEMO_SECONDS (default 30); Ctrl-C stops everything.
set -euo pipefail
build=${1:-build}
GPOOL=$build/bin/gpool
[ -x "$GPOOL" ] || { echo "demo-cluster: $GPOOL not built" >&2; exit 1; }
seconds=${DEMO_SECONDS:-30}
end=$((SECONDS + seconds))  # counted from the start, setup included
tmp=$(mktemp -d)
ctl= agent=
cleanup() {
  trap - EXIT INT TERM
  for p in $agent $ctl; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo; echo "demo-cluster: interrupted, stopping"; exit 130' INT TERM

# Tokens: random, one per role (docs/control-plane.md, "Auth").
tok() { head -c 18 /dev/urandom | base64 | tr '+/' '-_'; }
admin=$(tok) research=$(tok) prod=$(tok) interns=$(tok) agent_tok=$(tok) metrics=$(tok)
cat >"$tmp/tokens" <<TOK
$admin admin
$research tenant research
$prod tenant prod
$interns tenant interns
$agent_tok agent
$metrics metrics
TOK

port=${GPOOL_DEMO_PORT:-0}
# The brief's example fabric: an NDR fat-tree whose hosts give the hollow nodes their names, so
# the scheduler's leaf/pod domains and the dashboard's fabric view are the real topology.
fabric_flag=(--fabric gen:brief)
"$GPOOL" controller --store "sqlite:$tmp/state.db" --listen "127.0.0.1:$port" --http 127.0.0.1:0 \
  --auth-tokens "$tmp/tokens" --quota research=1024 --quota prod=512 --quota interns=128 \
  --node-timeout-ms 5000 "${fabric_flag[@]}" >"$tmp/ctl.log" 2>&1 &
ctl=$!
for _ in $(seq 100); do grep -qs grpc "$tmp/ctl.log" && break; sleep 0.1; done
addr=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$tmp/ctl.log")
http=$(sed -n 's/.*http \(http:[^ ]*\).*/\1/p' "$tmp/ctl.log")
[ -n "$addr" ] || { cat "$tmp/ctl.log" >&2; exit 1; }
# The HTTP API takes the same tokens (401 without one). The dashboard reads its token from the
# URL fragment once (it never reaches the server's logs) and keeps it for the tab.
echo "demo-cluster: runs for ${seconds} s, then stops by itself and removes its state; keep it up"
echo "  longer with DEMO_SECONDS=600 make demo (Ctrl-C stops it at any time)."
echo "The tokens below are demo-only secrets: random, made for this run, valid only for this"
echo "throwaway controller, and gone when it stops. Never reuse them."
echo "controller: grpc $addr (token auth on)"
echo "dashboard (admin):    ${http}#token=$admin"
echo "dashboard (research): ${http}#token=$research   (only research's jobs)"
echo "data: curl -H 'Authorization: Bearer $admin' ${http}api/state; metrics: the same with the metrics token $metrics"


"$GPOOL" agent --controller "$addr" --token "$agent_tok" --hollow 256 --heartbeat-ms 1000 \
  "${fabric_flag[@]}" >"$tmp/agent.log" 2>&1 &
agent=$!
A=(--controller "$addr" --token "$admin")
for _ in $(seq 100); do
  n=$("$GPOOL" nodes "${A[@]}" | tail -1)
  case "$n" in "256 nodes"*) break ;; esac
  sleep 0.2
done
echo "hollow cluster: $n"

# The mix. Durations are short so that jobs finish within the demo.
as() { local t=$1; shift; "$GPOOL" submit --controller "$addr" --token "$t" "$@" >/dev/null; }
for i in $(seq 4); do
  as "$research" --tenant research --gpus 256 --locality leaf --duration 20s -- python train.py --run "$i"
done
for i in $(seq 40); do as "$research" --gpus 8 --duration $((5 + i % 10))s -- python finetune.py; done
for i in $(seq 30); do
  as "$prod" --gpus 1 --gpu-fraction 0.25 --gpu-mem 20GiB --kind inference --non-preemptible \
    --priority 10 --duration 15s -- serve --model "m$i"
done
for i in $(seq 60); do
  as "$interns" --gpus 1 --kind interactive --min-runtime 5s --duration $((3 + i % 7))s -- jupyter
done
cat >"$tmp/pretrain.yaml" <<'YAML'
tenant: prod
gpus: 1024
locality: pod
kind: training
priority: 5
duration: 10s
command: [python, pretrain.py, --config, big.yaml]
YAML
as "$prod" -f "$tmp/pretrain.yaml"
echo "submitted 135 jobs (4 x 256-GPU gangs, 40 fine-tunes, 30 quarter-GPU inference, 60 notebooks, 1 x 1024-GPU from YAML)"

while [ $SECONDS -lt $end ]; do
  sleep 4
  echo "--- t=${SECONDS}s: $("$GPOOL" jobs "${A[@]}" | tail -1); $("$GPOOL" nodes "${A[@]}" | tail -1)"
  # The first pending job and why it waits (the scheduler's reason, last column).
  pending=$("$GPOOL" jobs "${A[@]}" --state pending)
  echo "$pending" | awk '/^j/ && !n++ { print "    " $0 }'
done
echo
jobs_out=$("$GPOOL" jobs "${A[@]}")  # whole output first, then cut with sed, which reads to the end (head would SIGPIPE the writer under pipefail)
echo "$jobs_out" | sed -n 1,12p
echo "..."
echo "research sees only its own jobs: $("$GPOOL" jobs --controller "$addr" --token "$research" | tail -1)"
"$GPOOL" top --iterations 1 "${A[@]}" | sed -n 1,14p
curl -sf -H "Authorization: Bearer $metrics" "${http}metrics" | grep -E '^gpool_(queue_length|gpus|nodes|tenant_gpus|job_bind_latency_seconds_(count|sum)|job_queue_seconds_count|store_commit_seconds_count)' || true
echo "demo-cluster: done"
