#!/usr/bin/env bash
# High-availability tests on real etcd: a three-member etcd cluster on loopback, controllers on
# `--store etcd://...` (lease TTL 2 s), a hollow agent (4 nodes x 8 GPUs) and the CLI, all given
# every controller address.
#   failover: kill -9 the leader during a burst of submits: a standby leads, every acknowledged
#             job survives exactly once, the new leader schedules, no GPU is bound twice.
#   fencing:  SIGSTOP the leader past its lease, a standby takes over; a submit sent to the
#             paused leader is answered, after SIGCONT, with UNAVAILABLE and never written.
#   restart:  kill one etcd member: service continues. Then kill -9 everything and restart:
#             every job and allocation is intact.
#   pause:    with the shortest node timeout the controller accepts on etcd (4000 ms), SIGSTOP
#             the leader with every GPU busy: the agent finds the new leader within its grace,
#             and no job is requeued. (The end-to-end check of the timing contract in
#             agent_timing.h; whether the old 5 s call deadline lost nodes here depended on where
#             the lease expiry fell, so the parts are pinned by ControllerEndpointsTest and
#             NodeTimeoutTest.)
# Usage: ha_test.sh PATH/TO/gpool failover|fencing|restart
set -euo pipefail
GPOOL=${1:?usage: ha_test.sh GPOOL_BINARY MODE}
MODE=${2:?usage: ha_test.sh GPOOL_BINARY failover|fencing|restart}
ETCD=${ETCD:-/usr/bin/etcd}
TTL=2
NODE_TIMEOUT_MS=5000
[ "$MODE" = pause ] && NODE_TIMEOUT_MS=4000
TMP=$(mktemp -d)
declare -A PIDS=()  # name -> pid of everything we started
cleanup() {
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/ctl*.log; do echo "--- $f" >&2; tail -n 30 "$f" >&2 || true; done
  exit 1
}
log() { echo "[${SECONDS}s] $*"; }
# N ports that were free a moment ago (one python start: it is slow on a loaded machine).
free_ports() {
  python3 -c '
import socket,sys
ss=[socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1",0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}
NE=3 NC=3
read -r -a PORTS <<<"$(free_ports $((2 * NE + NC)))"

# ---- etcd ----
EC=("${PORTS[@]:0:NE}") EP=("${PORTS[@]:NE:NE}")
INITIAL=$(for i in $(seq 0 $((NE - 1))); do printf 'e%d=http://127.0.0.1:%s,' "$i" "${EP[$i]}"; done)
INITIAL=${INITIAL%,}
ENDPOINTS=$(for i in $(seq 0 $((NE - 1))); do printf '127.0.0.1:%s,' "${EC[$i]}"; done)
ENDPOINTS=${ENDPOINTS%,}
start_etcd() {  # $1 = member index
  local i=$1
  "$ETCD" --name "e$i" --data-dir "$TMP/e$i" \
    --listen-client-urls "http://127.0.0.1:${EC[$i]}" --advertise-client-urls "http://127.0.0.1:${EC[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${EP[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${EP[$i]}" \
    --initial-cluster "$INITIAL" --initial-cluster-state new --initial-cluster-token gpool-ha \
    --heartbeat-interval 50 --election-timeout 500 --max-txn-ops 10000 --max-request-bytes 16777216 \
    >"$TMP/etcd$i.log" 2>&1 &
  PIDS[etcd$i]=$!
}
wait_etcd() {  # every member started by us reports healthy (it has a raft leader)
  for i in $(seq 0 $((NE - 1))); do
    [ -n "${PIDS[etcd$i]:-}" ] || continue
    for _ in $(seq 300); do
      grep -q '"true"' <<<"$(curl -sf --max-time 1 "http://127.0.0.1:${EC[$i]}/health")" && continue 2
      sleep 0.1
    done
    fail "etcd member $i not healthy"
  done
}

# ---- controllers (fixed ports, so addresses survive restarts) ----
CP=("${PORTS[@]:$((2 * NE)):NC}")
CTLS=$(for i in $(seq 0 $((NC - 1))); do printf '127.0.0.1:%s,' "${CP[$i]}"; done)
CTLS=${CTLS%,}
start_ctl() {  # $1 = controller index
  local i=$1
  "$GPOOL" controller --store "etcd://$ENDPOINTS" --listen "127.0.0.1:${CP[$i]}" \
    --interval-ms 100 --node-timeout-ms "$NODE_TIMEOUT_MS" --lease-ttl-s $TTL >>"$TMP/ctl$i.log" 2>&1 &
  PIDS[ctl$i]=$!
}
# The index of the leading controller, from /control/leader in etcd ("" when none).
leader_index() {
  local addr
  addr=$(ETCDCTL_API=3 etcdctl --endpoints "$ENDPOINTS" --dial-timeout 1s get /control/leader --print-value-only 2>/dev/null || true)
  for i in $(seq 0 $((NC - 1))); do [ "$addr" = "127.0.0.1:${CP[$i]}" ] && { echo "$i"; return; }; done
  echo ""
}
wait_leader() {  # waits for a leader other than $1 (may be empty); prints its index
  for _ in $(seq 200); do
    l=$(leader_index)
    if [ -n "$l" ] && [ "$l" != "${1:-}" ]; then echo "$l"; return 0; fi
    sleep 0.05
  done
  return 1
}
start_agent() {
  "$GPOOL" agent --controller "$CTLS" --hollow 4 --heartbeat-ms 100 >>"$TMP/agent.log" 2>&1 &
  PIDS[agent]=$!
}

jobs_json() { "$GPOOL" jobs ls -o json --controller "$CTLS"; }
# check_no_double, count_state
source "$(dirname "$0")/jobs_lib.sh"
wait_running() {  # $1 = expected number of running jobs
  for _ in $(seq 150); do [ "$(jobs_json | count_state running)" = "$1" ] && return 0; sleep 0.1; done
  fail "expected $1 running jobs: $(jobs_json | count_state running) running"
}
wait_nodes() {
  for _ in $(seq 150); do
    n=$("$GPOOL" nodes -o json --controller "$CTLS" | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("nodes",[])))')
    [ "$n" = 4 ] && return 0; sleep 0.1
  done
  fail "expected 4 nodes"
}

for i in $(seq 0 $((NE - 1))); do start_etcd "$i"; done
wait_etcd
log "etcd up"
start_ctl 0; start_ctl 1
L=$(wait_leader "") || fail "no controller became leader"
log "controller $L leads"
start_agent
wait_nodes
log "4 nodes registered"

case "$MODE" in
failover)
  # A burst of 24 submits (2 GPUs each, 16 fit on 32 GPUs) with the leader killed in the middle.
  : >"$TMP/acked"
  (
    for i in $(seq 24); do
      id=$("$GPOOL" submit --gpus 2 --duration 600s --request-id "burst-$i" --controller "$CTLS" -- train) \
        && echo "burst-$i $id" >>"$TMP/acked"
    done
  ) &
  BURST=$!
  for _ in $(seq 200); do [ "$(wc -l <"$TMP/acked")" -ge 8 ] && break; sleep 0.05; done
  kill -9 "${PIDS[ctl$L]}"; unset "PIDS[ctl$L]"
  t0=$(date +%s.%N)
  NL=$(wait_leader "$L") || fail "no standby took over"
  t1=$(date +%s.%N)
  echo "failover: controller $L killed, controller $NL leads after $(python3 -c "print(round($t1-$t0,2))") s"
  wait "$BURST" || true
  log "burst done"
  [ "$(wc -l <"$TMP/acked")" = 24 ] || fail "only $(wc -l <"$TMP/acked") of 24 submits acknowledged"
  wait_running 16
  log "16 running"
  J=$(jobs_json)
  r=$(echo "$J" | check_no_double); [ "$r" = OK ] || fail "$r"
  # Every acknowledged job is there, with the id it was acknowledged with, exactly once.
  python3 - "$J" "$TMP/acked" <<'PY' || fail "acknowledged jobs lost or duplicated"
import json,sys
jobs=json.loads(sys.argv[1])["jobs"]
by_req={}
for j in jobs: by_req.setdefault(j.get("client_request_id",""),[]).append(j["id"])
for line in open(sys.argv[2]):
  req,jid=line.split()
  assert by_req.get(req)==[jid], (req, jid, by_req.get(req))
assert len(jobs)==24, len(jobs)
PY
  # The new leader binds: cancel two running jobs, two pending ones start.
  running=$(echo "$J" | python3 -c 'import json,sys; print(" ".join(j["id"] for j in json.load(sys.stdin)["jobs"] if j["state"]=="running"))')
  for id in $(echo "$running" | cut -d' ' -f1-2); do "$GPOOL" jobs cancel "$id" --controller "$CTLS" >/dev/null; done
  wait_running 16
  [ "$(jobs_json | count_state cancelled)" = 2 ] || fail "cancels lost"
  r=$(jobs_json | check_no_double); [ "$r" = OK ] || fail "after cancel: $r"
  ;;
fencing)
  start_ctl 2
  "$GPOOL" submit --gpus 8 --duration 600s --request-id before --controller "$CTLS" -- train >/dev/null
  wait_running 1
  LEADER_PID=${PIDS[ctl$L]}
  kill -STOP "$LEADER_PID"
  NL=$(wait_leader "$L") || fail "no standby took over from the paused leader"
  # A write sent straight to the paused leader: it is processed only after SIGCONT.
  "$GPOOL" submit --gpus 1 --duration 600s --request-id to-paused --controller "127.0.0.1:${CP[$L]}" -- x \
    >"$TMP/paused.out" 2>"$TMP/paused.err" &
  SUB=$!
  sleep $((TTL + 1))
  kill -CONT "$LEADER_PID"
  # The CLI follows the redirect to the new leader, so the submit may well succeed there; what
  # must never happen is the paused leader committing it. Either way: one job at most, and it
  # was written by the new leader (whose fence it carries).
  wait "$SUB" || true
  grep -q "no longer the leader\|lost its leadership" "$TMP/ctl$L.log" || fail "old leader did not step down"
  J=$(jobs_json)
  n=$(echo "$J" | python3 -c 'import json,sys; print(sum(1 for j in json.load(sys.stdin)["jobs"] if j.get("client_request_id")=="to-paused"))')
  [ "$n" -le 1 ] || fail "the submit to the paused leader was written $n times"
  [ "$(leader_index)" = "$NL" ] || fail "leadership moved back to the paused leader"
  grep -h "fenced write was refused\|no longer the leader" "$TMP/ctl$L.log" | sed -n 1,2p
  # On resuming, the old leader's view is stale (its nodes missed heartbeats for the pause), so
  # its first cycle wants to requeue job 1: that write must not have landed.
  before_state=$(echo "$J" | python3 -c 'import json,sys; print([j["state"] for j in json.load(sys.stdin)["jobs"] if j["id"]=="j00000001"][0])')
  [ "$before_state" = running ] || fail "job 1 is $before_state: the paused leader wrote after losing its lease"
  # The old leader, now a standby, serves reads, refuses writes naming the new leader, and a
  # client given every address follows the leader.
  "$GPOOL" jobs ls --controller "127.0.0.1:${CP[$L]}" >/dev/null || fail "standby does not serve reads"
  if "$GPOOL" jobs cancel j00000001 --controller "127.0.0.1:${CP[$L]}" >/dev/null 2>"$TMP/err"; then
    fail "the old leader accepted a write"
  fi
  grep -q "the leader is at 127.0.0.1:${CP[$NL]}" "$TMP/err" || fail "no redirect: $(cat "$TMP/err")"
  "$GPOOL" jobs cancel j00000001 --controller "$CTLS" >/dev/null || fail "cancel via the list failed"
  [ "$(jobs_json | count_state cancelled)" = 1 ] || fail "cancel lost"
  wait_running "$n"
  r=$(jobs_json | check_no_double); [ "$r" = OK ] || fail "$r"
  ;;
restart)
  for i in $(seq 4); do "$GPOOL" submit --gpus 8 --duration 600s --request-id "r$i" --controller "$CTLS" -- train >/dev/null; done
  wait_running 4
  # Lose one etcd member (a minority): service continues.
  kill -9 "${PIDS[etcd0]}"; unset "PIDS[etcd0]"
  "$GPOOL" submit --gpus 8 --duration 600s --request-id r5 --controller "$CTLS" -- train >/dev/null \
    || fail "submit failed with one etcd member down"
  "$GPOOL" jobs cancel j00000001 --controller "$CTLS" >/dev/null || fail "cancel failed with one etcd member down"
  wait_running 4
  before=$(jobs_json)
  # Everything dies at once, then comes back.
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
  for i in $(seq 0 $((NE - 1))); do start_etcd "$i"; done
  wait_etcd
  start_ctl 1; start_ctl 0
  wait_leader "" >/dev/null || fail "no leader after the restart"
  start_agent
  wait_nodes
  after=$(jobs_json)
  python3 - "$before" "$after" <<'PY' || fail "state changed across the restart"
import json,sys
b={j["id"]:j for j in json.loads(sys.argv[1])["jobs"]}
a={j["id"]:j for j in json.loads(sys.argv[2])["jobs"]}
assert set(a)==set(b), (sorted(a), sorted(b))
for i,j in b.items():
  assert a[i]["state"]==j["state"], (i, a[i]["state"], j["state"])
  assert a[i].get("allocations")==j.get("allocations"), i
PY
  r=$(echo "$after" | check_no_double); [ "$r" = OK ] || fail "after restart: $r"
  wait_running 4
  ;;
pause)
  start_ctl 2
  for i in $(seq 4); do "$GPOOL" submit --gpus 8 --duration 600s --request-id "p$i" --controller "$CTLS" -- train >/dev/null; done
  wait_running 4
  LEADER_PID=${PIDS[ctl$L]}
  kill -STOP "$LEADER_PID"
  NL=$(wait_leader "$L") || fail "no standby took over from the paused leader"
  log "controller $L paused, controller $NL leads"
  # The new leader's grace is the node timeout from its takeover; wait past it (and a margin
  # for scheduling cycles) with the old leader still paused.
  sleep $((NODE_TIMEOUT_MS / 1000 + 2))
  J=$(jobs_json)
  python3 - "$J" <<'PY' || fail "a leader change requeued jobs: $(grep -h 'lost' "$TMP"/ctl*.log | sed -n 1,5p)"
import json,sys
jobs=json.loads(sys.argv[1])["jobs"]
assert len(jobs)==4, len(jobs)
for j in jobs:
  assert j["state"]=="running" and int(j.get("requeues",0))==0, (j["id"], j["state"], j.get("requeues"))
PY
  ! grep -h "node .* lost" "$TMP/ctl$NL.log" || fail "the new leader declared nodes lost"
  kill -CONT "$LEADER_PID"
  r=$(jobs_json | check_no_double); [ "$r" = OK ] || fail "$r"
  ;;
*) fail "unknown mode $MODE" ;;
esac
echo "control HA $MODE: OK"
