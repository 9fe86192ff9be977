#!/usr/bin/env bash
# `make demo`: gpool's main job on embedded defaults.
#   1. Fabric: the brief's 2,048-GPU NDR fat-tree, generated, routed, analysed, with a failure.
#   2. Scheduler: the simulator replays a workload under gpool's policy and the baselines.
#   3. Pooled GPUs: a node without GPUs runs a CUDA sample on GPUs of two other nodes' GPU
#      servers, placed by the scheduler (three real agents; skipped without the CUDA samples).
#   4. Control plane, the main job: a controller on embedded SQLite, a hollow cluster of 2,048
#      GPUs on the brief's NDR fat-tree over the real gRPC protocol, a job mix from three
#      tenants, and the HTTP endpoints: the dashboard's URL is printed at the start.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
ran=0
echo "gpool demo: fabric, scheduler, pool and control plane on this machine, no GPU needed."
echo "It stops by itself: the control-plane part stays up ${DEMO_SECONDS:-30} s (DEMO_SECONDS=600 make demo"
echo "keeps it up longer, to use the dashboard). Ctrl-C stops everything at any time."
for part in demo-fabric demo-sim demo-pool demo-cluster; do
  if [ -x "$here/$part.sh" ]; then
    echo
    echo "=================== $part ==================="
    "$here/$part.sh" "$build"
    ran=$((ran + 1))
  fi
done
if [ "$ran" -eq 0 ]; then
  echo "demo: no demo parts are built yet" >&2
  exit 1
fi
