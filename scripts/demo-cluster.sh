#!/usr/bin/env bash
# demo-cluster.sh BUILD_DIR: the control plane on the brief's 2,048 GPUs, hollow.
#   A controller on a temp SQLite store, a hollow agent simulating 256 nodes x 8 GPUs over the
#   real gRPC protocol, a realistic job mix from three tenants through the CLI; prints job, node
#   and tenant summaries and the HTTP URL. Ends by itself after DEMO_SECONDS (default 30) and
#   stops everything on exit (or Ctrl-C).
set -euo pipefail
build=${1:-build}
GPOOL=$build/bin/gpool
[ -x "$GPOOL" ] || { echo "demo-cluster: $GPOOL not built" >&2; exit 1; }
seconds=${DEMO_SECONDS:-30}
end=$((SECONDS + seconds))  # counted from the start, setup included
tmp=$(mktemp -d)
ctl= agent=
cleanup() {
  for p in $agent $ctl; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

port=${GPOOL_DEMO_PORT:-0}
"$GPOOL" controller --store "sqlite:$tmp/state.db" --listen "127.0.0.1:$port" --http 127.0.0.1:0 \
  --quota research=1024 --quota prod=512 --quota interns=128 >"$tmp/ctl.log" 2>&1 &
ctl=$!
for _ in $(seq 100); do grep -q grpc "$tmp/ctl.log" && break; sleep 0.1; done
addr=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$tmp/ctl.log")
http=$(sed -n 's/.*http \(http:[^ ]*\).*/\1/p' "$tmp/ctl.log")
[ -n "$addr" ] || { cat "$tmp/ctl.log" >&2; exit 1; }
echo "controller: grpc $addr, dashboard data ${http}api/state, metrics ${http}metrics"

"$GPOOL" agent --controller "$addr" --hollow 256 --heartbeat-ms 1000 >"$tmp/agent.log" 2>&1 &
agent=$!
for _ in $(seq 100); do
  n=$("$GPOOL" nodes --controller "$addr" | tail -1)
  case "$n" in "256 nodes"*) break ;; esac
  sleep 0.2
done
echo "hollow cluster: $n"

# A mix: a few large training gangs, many single-node fine-tunes, small inference/dev jobs.
# Durations are short so that jobs finish within the demo.
submit() { "$GPOOL" submit --controller "$addr" "$@" >/dev/null; }
for i in $(seq 4); do submit --tenant research --gpus 256 --duration 20s -- python train.py --run "$i"; done
for i in $(seq 40); do submit --tenant research --gpus 8 --duration $((5 + i % 10))s -- python finetune.py; done
for i in $(seq 30); do submit --tenant prod --gpus $((1 + i % 4)) --priority 10 --duration 15s -- serve --model m$i; done
for i in $(seq 60); do submit --tenant interns --gpus 1 --duration $((3 + i % 7))s -- jupyter; done
submit --tenant prod --gpus 1024 --duration 10s -- python pretrain.py
echo "submitted 135 jobs"

while [ $SECONDS -lt $end ]; do
  sleep 4
  echo "--- t=${SECONDS}s: $("$GPOOL" jobs --controller "$addr" | tail -1); $("$GPOOL" nodes --controller "$addr" | tail -1)"
done
echo
jobs_out=$("$GPOOL" jobs --controller "$addr")  # whole output first: head would SIGPIPE it
echo "$jobs_out" | head -12
echo "..."
"$GPOOL" tenants --controller "$addr"
curl -sf "${http}metrics" | grep -E '^gpool_(queue_length|gpus|nodes|scheduling_cycle_seconds_(count|sum))' || true
echo "demo-cluster: done"
