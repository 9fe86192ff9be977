#!/usr/bin/env bash
# Demo part "sim": gpool's policy against the baselines on a short synthetic gang workload over
# the Lingjun Clos topology (847 hosts, 6,776 GPUs), then a compressed openb slice. ~30 s.
# Usage: scripts/demo-sim.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
gpool="$build/bin/gpool"
[ -x "$gpool" ] || { echo "demo-sim: $gpool not built" >&2; exit 1; }
data="$root/../shared/data"
out=$(mktemp -d /tmp/gpool-demo-sim.XXXXXX)
if [ -f "$data/topologies/alibaba-lingjun-2023-topo.csv" ]; then
  nodes="$data/topologies/alibaba-lingjun-2023-topo.csv"
  runtimes="$data/traces/philly-2017/philly_runtime.csv"
  jobs=1500
else
  echo "demo-sim: ../shared/data not found; using the small samples in testdata/sim" >&2
  nodes="$root/testdata/sim/lingjun_sample.csv"
  runtimes="$root/testdata/sim/philly_runtime_sample.csv"
  jobs=500
fi
echo "gpool sim: $jobs synthetic gangs (1..1024 GPUs, load 2) on $(basename "$nodes"), all policies"
"$gpool" sim --trace "$runtimes" --trace-format "synthetic:jobs=$jobs,load=2" \
  --nodes "$nodes" --compare all --seed 1 --out "$out/synthetic" -q
echo
echo "report: $out/synthetic/report.html  (metrics.json, timeline.csv beside it)"
