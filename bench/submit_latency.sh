#!/usr/bin/env bash
# submit_latency.sh BUILD [REPS]: what a user waits for, from the command to a bound 128-GPU gang,
# gpool beside Slurm on the same cluster shape, measured alternately in one run.
#   gpool: `gpool submit --gpus 128 --wait` (the CLI process, its channel, and the submit, which
#          on an idle cluster runs the scheduling cycle itself and commits the job with its bind
#          in one store commit: docs/control-plane.md, "Bind at submit") to a controller on SQLite
#          with a hollow agent of NODES x 8 GPUs on the brief's NDR fabric.
#   Slurm: `salloc -N16 --gres=gpu:8 --no-shell` (Slurm's immediate-allocation path, which does
#          not wait for the backfill pass) to slurmctld with NODES slurmd processes of 8 fake GPUs,
#          8 nodes per leaf switch under 2 spines (topology/tree), in a network namespace.
# Each repetition runs one of each, alternating which goes first, and frees the allocation after
# (gpool jobs cancel / scancel) outside the timed part. Then CLIENTS parallel CLI clients submit
# single-GPU jobs to gpool for a few seconds each (jobs/s by client count). Prints medians and
# the gpool / salloc ratio, and the controller's own part (accepted submit to committed bind, from
# its /metrics). Needs root (network namespace) and Slurm (scripts/setup.sh).
# Environment: NODES (default 256), CLIENTS (default "1 2 4 8").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/slurm/lib.sh"
in_netns "$@"
build=$(cd "${1:-build}" && pwd)
reps=${2:-21}
GPOOL=$build/bin/gpool
nodes=${NODES:-256}
TMP=$(mktemp -d)
SLURM_DIR=$TMP/slurm
PIDS=
cleanup() {
  stop_slurm
  for p in $PIDS; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "submit_latency: $*" >&2; exit 1; }

# gpool
"$GPOOL" controller --store "sqlite:$TMP/state.db" --listen 127.0.0.1:0 --http 127.0.0.1:0 \
  --fabric gen:brief >"$TMP/ctl.log" 2>&1 &
PIDS="$PIDS $!"
for _ in $(seq 100); do grep -qs grpc "$TMP/ctl.log" && break; sleep 0.1; done
addr=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$TMP/ctl.log")
http=$(sed -n 's/.* http \(http:[^ ]*\).*/\1/p' "$TMP/ctl.log")
[ -n "$addr" ] || fail "controller did not start: $(cat "$TMP/ctl.log")"
"$GPOOL" agent --controller "$addr" --hollow "$nodes" --fabric gen:brief >"$TMP/agent.log" 2>&1 &
PIDS="$PIDS $!"
for _ in $(seq 200); do
  grep -q "($nodes ready)" <<<"$("$GPOOL" nodes --controller "$addr" | tail -n 1)" && break
  sleep 0.1
done

# Slurm: 8 nodes per leaf, leaves under 2 spines.
mkdir -p "$SLURM_DIR"
{
  leaves=$((nodes / 8))
  for l in $(seq 0 $((leaves - 1))); do
    printf 'SwitchName=leaf%03d Nodes=n[%03d-%03d]\n' "$l" $((l * 8 + 1)) $((l * 8 + 8))
  done
  half=$((leaves / 2))
  printf 'SwitchName=spine0 Switches=leaf[000-%03d]\n' $((half - 1))
  printf 'SwitchName=spine1 Switches=leaf[%03d-%03d]\n' "$half" $((leaves - 1))
  echo "SwitchName=core Switches=spine[0-1]"
} >"$SLURM_DIR/topology.conf"
SLURM_NODES=$nodes SLURM_GPUS_PER_NODE=8 start_slurm "TopologyPlugin=topology/tree"

# Microseconds from bash's own clock: no process inside the timed span. (A `$(date +%s%N)` at
# each end forked a subshell and a `date`, 2-13 ms on this loaded 2-core machine, added to both
# systems' figures.) [.,]: the decimal point follows the locale.
gpool_one() {
  local t0 t1 j
  t0=${EPOCHREALTIME/[.,]/}
  j=$("$GPOOL" submit --controller "$addr" --gpus 128 --duration 600s --wait=30s -- train)
  t1=${EPOCHREALTIME/[.,]/}
  echo $((t1 - t0)) >>"$TMP/gpool.us"
  "$GPOOL" jobs cancel "$j" --controller "$addr" >/dev/null
}
slurm_one() {
  local t0 t1 out
  t0=${EPOCHREALTIME/[.,]/}
  out=$(salloc -N16 --gres=gpu:8 --no-shell 2>&1)
  t1=${EPOCHREALTIME/[.,]/}
  echo $((t1 - t0)) >>"$TMP/slurm.us"
  local id
  id=$(sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p' <<<"$out")
  [ -n "$id" ] || fail "salloc: $out"
  scancel "$id"
  while [ -n "$(squeue -h -j "$id" 2>/dev/null)" ]; do sleep 0.05; done
}
gpool_one; slurm_one; : >"$TMP/gpool.us"; : >"$TMP/slurm.us"  # warm-up, not counted
for i in $(seq "$reps"); do
  if [ $((i % 2)) = 0 ]; then gpool_one; slurm_one; else slurm_one; gpool_one; fi
done
median_ms() { sort -n "$1" | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.1f", m/1000}'; }
range_ms() { sort -n "$1" | awk '{a[NR]=$1} END {printf "%.1f-%.1f", a[1]/1000, a[NR]/1000}'; }
g=$(median_ms "$TMP/gpool.us") s=$(median_ms "$TMP/slurm.us")
echo "128-GPU gang, submit to bound, $nodes nodes x 8 GPUs, $reps alternating reps:"
echo "  gpool submit --wait  median $g ms (range $(range_ms "$TMP/gpool.us"))"
echo "  salloc --no-shell    median $s ms (range $(range_ms "$TMP/slurm.us"))"
awk -v g="$g" -v s="$s" 'BEGIN {printf "  ratio gpool/salloc   %.2fx\n", g / s}'
# The controller's share: accepted submit -> committed bind (gpool_job_bind_latency_seconds, the
# gang binds of this run and the warm-up), and its store commits; the rest is the CLI process.
curl -sf "${http}metrics" | awk '
  /^gpool_job_bind_latency_seconds_sum/ {bs=$2} /^gpool_job_bind_latency_seconds_count/ {bc=$2}
  /^gpool_job_bind_latency_seconds_bucket\{le="0.002"\}/ {b2=$2}
  /^gpool_job_bind_latency_seconds_bucket\{le="0.005"\}/ {b5=$2}
  END {if (bc > 0) printf "  controller: submit accepted -> bind committed, mean %.2f ms over %d binds (%d <= 2 ms, %d <= 5 ms)\n", bs / bc * 1000, bc, b2, b5}'

# Parallel CLI submits: jobs/s with 1, 2, 4, 8 clients, 3 s each.
echo "parallel CLI submits of 1-GPU jobs to gpool (jobs/s):"
for k in ${CLIENTS:-1 2 4 8}; do
  : >"$TMP/count"
  end=$((SECONDS + 3))
  clients=()
  for c in $(seq "$k"); do
    (n=0; while [ $SECONDS -lt $end ]; do
      "$GPOOL" submit --controller "$addr" --gpus 1 --duration 1s -- x >/dev/null; n=$((n + 1))
    done; echo "$n" >>"$TMP/count") &
    clients+=($!)
  done
  wait "${clients[@]}"  # not a bare wait: the controller and agent run in the background too
  awk -v k="$k" '{n+=$1} END {printf "  %d client(s): %.0f jobs/s\n", k, n / 3}' "$TMP/count"
done
