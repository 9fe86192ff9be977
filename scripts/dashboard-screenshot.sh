#!/usr/bin/env bash
# dashboard-screenshot.sh BUILD_DIR OUT.png: the README's dashboard screenshot, reproducibly.
#   A controller and hollow agents for 256 nodes x 8 GPUs (224 H100 + 32 A100; 4 of the H100
#   nodes then stop heartbeating, so they show as down), long jobs from three tenants through the
#   CLI, then headless Chromium screenshots the dashboard with one 256-GPU job selected.
#   Everything it starts is stopped on exit.
set -euo pipefail
build=${1:-build}
out=${2:-docs/img/dashboard.png}
GPOOL=$build/bin/gpool
[ -x "$GPOOL" ] || { echo "dashboard-screenshot: $GPOOL not built" >&2; exit 1; }
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

"$GPOOL" controller --store "sqlite:$tmp/state.db" --listen 127.0.0.1:0 --http 127.0.0.1:0 \
  --node-timeout-ms 3000 --quota research=1024 --quota prod=512 --quota interns=128 >"$tmp/ctl.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -qs grpc "$tmp/ctl.log" && break; sleep 0.1; done
addr=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$tmp/ctl.log")
http=$(sed -n 's/.*http \(http:[^ ]*\).*/\1/p' "$tmp/ctl.log")
[ -n "$addr" ] || { cat "$tmp/ctl.log" >&2; exit 1; }
"$GPOOL" agent --controller "$addr" --hollow 220 --prefix h100 --gpu-model H100-80GB >"$tmp/a1.log" 2>&1 &
pids+=($!)
"$GPOOL" agent --controller "$addr" --hollow 32 --prefix a100 --gpu-model A100-80GB >"$tmp/a2.log" 2>&1 &
pids+=($!)
"$GPOOL" agent --controller "$addr" --hollow 4 --prefix h100x --gpu-model H100-80GB >"$tmp/a3.log" 2>&1 &
doomed=$!
pids+=($doomed)
for _ in $(seq 200); do
  case "$("$GPOOL" nodes --controller "$addr" | tail -1)" in "256 nodes"*) break ;; esac
  sleep 0.2
done
kill "$doomed"  # these 4 nodes go down after --node-timeout-ms

submit() { "$GPOOL" submit --controller "$addr" "$@" >/dev/null; }
for i in 1 2 3; do submit --tenant research --gpus 256 --duration 1h -- python train.py --run "$i"; done
for i in $(seq 4); do submit --tenant prod --gpus 64 --priority 10 --duration 1h -- serve --model llm$i; done
for i in $(seq 24); do submit --tenant research --gpus 8 --duration 1h -- python finetune.py --seed "$i"; done
for i in $(seq 30); do submit --tenant prod --gpus $((1 + i % 4)) --priority 10 --duration 1h -- serve --model m$i; done
for i in $(seq 40); do submit --tenant interns --gpus 1 --duration 1h -- jupyter lab; done
submit --tenant research --gpus 512 --duration 1h -- python pretrain.py --size 70b
submit --tenant interns --gpus 8 --duration 1h -- python sweep.py
sleep 12  # a few history samples, and the 4 killed nodes time out
mkdir -p "$(dirname "$out")"
chromium --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
  --user-data-dir="$tmp/chrome" --hide-scrollbars --window-size=1440,1000 --virtual-time-budget=3000 \
  --screenshot="$tmp/shot.png" "${http}#job=j00000002" 2>/dev/null || true
[ -s "$tmp/shot.png" ] || { echo "dashboard-screenshot: chromium wrote no screenshot" >&2; exit 1; }
cp "$tmp/shot.png" "$out"
echo "dashboard-screenshot: wrote $out ($(stat -c %s "$out") bytes)"
