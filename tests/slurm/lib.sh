# A real Slurm cluster of one node for tests (sourced): munged, slurmctld and one slurmd, all in
# this script's own network namespace (loopback only) with every path in a scratch folder.
# ../shared/notes/slurm-peer.md says why each setting is there. Needs root (CI runs as root) and
# Debian's slurmctld, slurmd, slurm-client and munge (scripts/setup.sh).
# Usage: in_netns "$@" first (re-execs the caller under `unshare -n`), then SLURM_DIR=DIR
# [SLURM_NODES=N | SLURM_NODE_NAMES="a b ..."] [SLURM_GPUS_PER_NODE=G] start_slurm [extra slurm.conf lines...]; stop_slurm in
# the caller's cleanup.

# in_netns ARGS...: re-exec the calling script in a new network namespace with loopback up and
# 127.0.0.2 added (glibc's getaddrinfo(AI_ADDRCONFIG), which Slurm uses, returns no IPv4 answer
# when 127.0.0.1 is the only IPv4 address).
in_netns() {
  if [ -z "${GPOOL_IN_NETNS:-}" ]; then
    GPOOL_IN_NETNS=1 exec unshare -n -- "$0" "$@"
  fi
  unset GPOOL_IN_NETNS  # not for the processes this test starts
  ip link set lo up
  ip addr add 127.0.0.2/8 dev lo 2>/dev/null || true
}

SLURM_PIDS=
slurm_fail() {
  echo "FAIL: $*" >&2
  for f in "$SLURM_DIR"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }; done
  exit 1
}

# SLURM_NODES (default 1) slurmd processes, nodes n001..nNNN (or the names in SLURM_NODE_NAMES)
# on loopback, each with SLURM_GPUS_PER_NODE (default 0) fake GPUs: character devices that are
# never opened, as gres.
start_slurm() {
  local d=$SLURM_DIR nodes=${SLURM_NODES:-1} gpus=${SLURM_GPUS_PER_NODE:-0} names=() i
  if [ -n "${SLURM_NODE_NAMES:-}" ]; then
    read -r -a names <<<"$SLURM_NODE_NAMES"
  else
    for i in $(seq 1 "$nodes"); do names+=("n$(printf '%03d' "$i")"); done
  fi
  mkdir -p "$d/state" "$d/spool" "$d/munge" "$d/dev"
  chmod 700 "$d/munge"
  head -c 1024 /dev/urandom >"$d/munge/munge.key"
  chmod 400 "$d/munge/munge.key"
  munged --force --socket="$d/munge/munge.sock" --key-file="$d/munge/munge.key" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/munge.log" --seed-file="$d/munge/seed" ||
    slurm_fail "munged did not start"
  SLURM_PIDS="$(cat "$d/munge/munged.pid")"
  local ctl_port=$((20000 + RANDOM % 20000))
  local gres_line="" node_gres=""
  if [ "$gpus" -gt 0 ]; then
    for i in $(seq 0 $((gpus - 1))); do mknod "$d/dev/nvidia$i" c 195 "$i"; done
    gres_line="GresTypes=gpu"
    node_gres="Gres=gpu:$gpus"
    # A line without NodeName= applies to every node.
    printf 'AutoDetect=off\nName=gpu File=%s/dev/nvidia[0-%d]\n' "$d" $((gpus - 1)) >"$d/gres.conf"
  fi
  cat >"$d/slurm.conf" <<CONF
ClusterName=gpooltest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.sock
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MessageTimeout=30
$gres_line
CONF
  for i in "${!names[@]}"; do
    echo "NodeName=${names[$i]} NodeAddr=127.0.0.1 Port=$((ctl_port + 1 + i)) CPUs=2 $node_gres State=UNKNOWN" >>"$d/slurm.conf"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$d/slurm.conf"
  local line
  for line in "$@"; do echo "$line" >>"$d/slurm.conf"; done
  export SLURM_CONF=$d/slurm.conf
  slurmctld -i -f "$SLURM_CONF" || slurm_fail "slurmctld did not start"
  local name
  for name in "${names[@]}"; do
    slurmd -f "$SLURM_CONF" -N "$name" || slurm_fail "slurmd $name did not start"
  done
  local end=$((SECONDS + 30 + ${#names[@]} / 4))
  while [ $SECONDS -lt $end ]; do
    if [ "$(sinfo -h -o %t 2>/dev/null)" = "idle" ]; then
      SLURM_PIDS="$SLURM_PIDS $(cat "$d/slurmctld.pid") $(cat "$d"/slurmd.*.pid)"
      return 0
    fi
    sleep 0.2
  done
  slurm_fail "the nodes never all became idle: $(sinfo 2>&1)"
}

stop_slurm() {
  local p
  for p in $SLURM_PIDS; do kill "$p" 2>/dev/null || true; done
  # The daemons are not our children: wait for them by pid, bounded.
  local end=$((SECONDS + 10))
  for p in $SLURM_PIDS; do
    while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
}
