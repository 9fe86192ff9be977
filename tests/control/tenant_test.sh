#!/usr/bin/env bash
# Tenant isolation end to end (issue 29, items 1, 8, 9): a controller with --quota a=16
# --quota b=16 --max-gpus c=8, a hollow agent with 8 nodes x 8 GPUs, jobs through the CLI.
# Checks: b's 8 jobs of 8 GPUs at priority 0 run; a's 8 at priority 1000 take back a's
# guarantee (16) and no more, b keeps 48; a's waiting jobs say why in `gpool jobs` and
# `gpool jobs describe`; a job over its tenant's cap is refused at submit, naming the cap; a
# job larger than the cluster is kept and says so; a GPU fraction below the unit (0.001) is
# refused by the CLI and in a YAML spec.
# Usage: tenant_test.sh PATH/TO/gpool
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/controller.sh"
GPOOL=${1:?usage: tenant_test.sh GPOOL_BINARY}
scratch_dir
fail() {
  echo "FAIL: $*" >&2
  echo "--- jobs" >&2; "$GPOOL" jobs --controller "$ADDR" >&2 || true
  echo "--- controller log" >&2; cat "$TMP"/ctl.log >&2 || true
  exit 1
}

"$GPOOL" controller --store "sqlite:$TMP/state.db" --listen 127.0.0.1:0 --interval-ms 100 \
  --quota a=16 --quota b=16 --max-gpus c=8 >"$TMP/ctl.log" 2>&1 &
CTL_PID=$!
wait_controller "$TMP/ctl.log" "$CTL_PID"
"$GPOOL" agent --controller "$ADDR" --hollow 8 --heartbeat-ms 100 >"$TMP/agent.log" 2>&1 &
AGENT_PID=$!
for _ in $(seq 100); do
  n=$("$GPOOL" nodes --controller "$ADDR" | tail -1)
  case "$n" in "8 nodes (8 ready)"*) break ;; esac
  sleep 0.1
done
case "$n" in "8 nodes (8 ready)"*) ;; *) fail "expected 8 ready nodes, got: $n" ;; esac

sub() { "$GPOOL" submit --controller "$ADDR" --duration 600s "$@" -- train; }
# GPUs of running jobs of tenant $1.
running_gpus() {
  "$GPOOL" jobs ls -o json --controller "$ADDR" | python3 -c '
import json,sys
print(sum(j.get("gpus",0) for j in json.load(sys.stdin).get("jobs",[]) if j["state"]=="running" and j["tenant"]==sys.argv[1]))' "$1"
}

# Item 8: a fraction below one milli-GPU is refused, never rounded to a whole GPU.
if sub --tenant a --gpu-fraction 0.0004 >"$TMP/out" 2>"$TMP/err"; then fail "--gpu-fraction 0.0004 accepted: $(cat "$TMP/out")"; fi
grep -q "below the unit of 0.001 GPU" "$TMP/err" || fail "error does not name the unit: $(cat "$TMP/err")"
printf 'tenant: a\ngpu_fraction: 0.0004\nduration: 10s\ncommand: [x]\n' >"$TMP/frac.yaml"
if "$GPOOL" submit --controller "$ADDR" -f "$TMP/frac.yaml" >"$TMP/out" 2>"$TMP/err"; then fail "YAML gpu_fraction 0.0004 accepted"; fi
grep -q "frac.yaml:2: gpu_fraction: .*below the unit" "$TMP/err" || fail "YAML error: $(cat "$TMP/err")"

# Item 9: more than the tenant may ever hold is refused at submit, naming the cap.
if sub --tenant c --gpus 16 >"$TMP/out" 2>"$TMP/err"; then fail "16 GPUs over c's cap of 8 accepted"; fi
grep -q "more than tenant c may ever hold" "$TMP/err" || fail "cap error: $(cat "$TMP/err")"

# Item 1: b fills the cluster at priority 0, then a arrives at priority 1000.
for _ in $(seq 8); do sub --tenant b --gpus 8 --priority 0 >/dev/null; done
for _ in $(seq 100); do [ "$(running_gpus b)" = 64 ] && break; sleep 0.1; done
[ "$(running_gpus b)" = 64 ] || fail "b's 8 jobs did not all start"
for _ in $(seq 8); do sub --tenant a --gpus 8 --priority 1000 >/dev/null; done
for _ in $(seq 100); do [ "$(running_gpus a)" = 16 ] && break; sleep 0.1; done
sleep 1  # ten more scheduling cycles: nothing more may move
[ "$(running_gpus a)" = 16 ] || fail "a runs $(running_gpus a) GPUs, want its guarantee of 16"
[ "$(running_gpus b)" = 48 ] || fail "b runs $(running_gpus b) GPUs, want 48 (64 less a's 16)"

# Item 9: every pending job says why; a job larger than the cluster is kept and says so.
big=$(sub --tenant a --gpus 100000)
for _ in $(seq 50); do
  "$GPOOL" jobs describe "$big" --controller "$ADDR" >"$TMP/desc"
  grep -q "^Waiting: " "$TMP/desc" && break
  sleep 0.1
done
grep -q "^Waiting: .*asks 100000 GPUs; the cluster has 64 in all" "$TMP/desc" || fail "describe: $(cat "$TMP/desc")"
"$GPOOL" jobs --controller "$ADDR" >"$TMP/jobs"
pending=$(grep -c "^j[0-9]* .* pending " "$TMP/jobs" || true)  # job rows, not the summary
why=$(grep "^j[0-9]* .* pending " "$TMP/jobs" | grep -c "(.*guarantee\|(next to start\|(asks " || true)
[ "$pending" -gt 0 ] && [ "$pending" = "$why" ] || fail "$pending pending jobs, $why with a reason: $(cat "$TMP/jobs")"
grep -q "^j[0-9]*  a .* pending .*(waiting for room for 8 GPUs: it would take tenant a past its guarantee of 16 GPUs" "$TMP/jobs" ||
  fail "a's waiting jobs do not name a's guarantee: $(cat "$TMP/jobs")"
echo "tenant_test: OK"
