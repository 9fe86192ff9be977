# Shell helpers for scripts and shell tests that need a live ibsim fabric; the C++ equivalent is
# src/ib/ibsim.h (same conventions). Source it, then:
#
#   . scripts/ib/ibsim-lib.sh
#   ibsim_start net.topo [-N 4096 -S 1024 -P 32768]   # scratch dir in $IBSIM_DIR, waits "ready"
#   ibsim_console 'Unlink "leaf-0"[19]'               # waits for the next prompt, prints output
#   ibsim_run 30 ibnetdiscover                        # tool through umad2sim under `timeout 30`
#   ibsim_opensm_once ftree [extra opensm args]       # dumps in $IBSIM_OSM_DIR (opensm-lfts.dump)
#   ibsim_opensm_daemon minhop [args]; ...; ibsim_opensm_stop
#   ibsim_stop                                        # also run by the EXIT trap ibsim_start sets
#   ibsim_stop_pids PID...                            # bounded TERM/KILL + reap of own children
#
# Isolation: each instance gets its own IBSIM_SOCKNAME (ibsim and libumad2sim.so meet on abstract
# unix sockets "<name>:ctl"/":out<n>"/":in<n>", default name "sim"), so concurrent instances of
# several users/tests do not see each other; ibsim_run exports it for the client. The console is
# a FIFO held open read-write by fd 9 of this shell (ibsim spins on EOF otherwise). One instance
# per shell. ibsim has 10 client slots; a client killed by `timeout` keeps its slot, and
# ibsim_run frees slots of dead clients (console `X <n>`) after a timeout.
# Limits: see docs/infiniband.md (no RMPP, no data traffic, mixed LID/DR SMPs hang).

IBSIM_UMAD2SIM=${GPOOL_UMAD2SIM:-/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so}
IBSIM_DIR=""
IBSIM_PID=""
IBSIM_OSM_PID=""
IBSIM_OSM_DIR=""
_ibsim_n=0

ibsim_start() {  # NETFILE [ibsim args...]
  local net=$1; shift
  [ -r "$IBSIM_UMAD2SIM" ] || { echo "ibsim_start: $IBSIM_UMAD2SIM missing (ibsim-utils)" >&2; return 1; }
  [ -z "$IBSIM_PID" ] || { echo "ibsim_start: one instance per shell" >&2; return 1; }
  IBSIM_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpool-ibsim-XXXXXX")
  export IBSIM_SOCKNAME="gpool-sh-$$-$RANDOM"
  trap ibsim_stop EXIT
  cp "$net" "$IBSIM_DIR/net"
  mkfifo "$IBSIM_DIR/console"
  exec 9<>"$IBSIM_DIR/console"
  (cd "$IBSIM_DIR" && exec ibsim -s "$@" net <console >ibsim.log 2>&1) &
  IBSIM_PID=$!
  local i
  for i in $(seq 1 3000); do
    if grep -q "simulator ready" "$IBSIM_DIR/ibsim.log" 2>/dev/null &&
       grep -q "sim> " "$IBSIM_DIR/ibsim.log"; then return 0; fi
    kill -0 "$IBSIM_PID" 2>/dev/null || { echo "ibsim_start: ibsim exited:" >&2; tail -20 "$IBSIM_DIR/ibsim.log" >&2; return 1; }
    sleep 0.02
  done
  echo "ibsim_start: not ready after 60 s" >&2; return 1
}

ibsim_console() {  # COMMAND: prints what ibsim answered; fails on '# ...' refusals
  local before out i
  before=$(stat -c %s "$IBSIM_DIR/ibsim.log")
  printf '%s\n' "$1" >&9
  for i in $(seq 1 1000); do
    out=$(tail -c +$((before + 1)) "$IBSIM_DIR/ibsim.log")
    if [[ "$out" == *"sim> "* ]]; then
      out=${out%%sim> *}
      printf '%s' "$out"
      if printf '%s\n' "$out" | grep -q '^#'; then return 1; fi
      return 0
    fi
    sleep 0.01
  done
  echo "ibsim_console: no prompt after \`$1\`" >&2; return 1
}

ibsim_free_dead_clients() {
  local slot pid
  ibsim_console Attached | sed -n 's/^Client \([0-9]*\): pid \([0-9]*\).*/\1 \2/p' |
  while read -r slot pid; do
    if ! kill -0 "$pid" 2>/dev/null || grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; then
      ibsim_console "X $slot" >/dev/null
    fi
  done
}

ibsim_run() {  # TIMEOUT_S TOOL [ARGS...]: runs in $IBSIM_DIR through umad2sim
  local t=$1; shift
  local rc=0
  (cd "$IBSIM_DIR" && LD_PRELOAD="$IBSIM_UMAD2SIM" timeout -k 5 "$t" "$@") || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then ibsim_free_dead_clients; fi
  return "$rc"
}

ibsim_opensm_once() {  # ENGINE [opensm args...]; sets IBSIM_OSM_DIR
  local engine=$1; shift
  _ibsim_n=$((_ibsim_n + 1))
  IBSIM_OSM_DIR="$IBSIM_DIR/opensm-sh-$_ibsim_n"
  mkdir -p "$IBSIM_OSM_DIR"
  OSM_CACHE_DIR="$IBSIM_OSM_DIR" OSM_TMP_DIR="$IBSIM_OSM_DIR" ibsim_run "${IBSIM_OSM_TIMEOUT:-300}" \
    opensm -o -e -f "$IBSIM_OSM_DIR/opensm.log" -D 0x43 -R "$engine" \
    --dump_files_dir "$IBSIM_OSM_DIR" "$@" >"$IBSIM_OSM_DIR/opensm.stdout" 2>&1
}

ibsim_opensm_daemon() {  # ENGINE [opensm args...]: waits for SUBNET UP; sets IBSIM_OSM_DIR
  local engine=$1; shift
  _ibsim_n=$((_ibsim_n + 1))
  IBSIM_OSM_DIR="$IBSIM_DIR/opensmd-sh-$_ibsim_n"
  mkdir -p "$IBSIM_OSM_DIR"
  (cd "$IBSIM_DIR" && OSM_CACHE_DIR="$IBSIM_OSM_DIR" OSM_TMP_DIR="$IBSIM_OSM_DIR" \
     LD_PRELOAD="$IBSIM_UMAD2SIM" exec opensm -e -d 2 -f "$IBSIM_OSM_DIR/opensm.log" -D 0x43 \
     -R "$engine" --dump_files_dir "$IBSIM_OSM_DIR" "$@" >"$IBSIM_OSM_DIR/opensm.stdout" 2>&1) &
  IBSIM_OSM_PID=$!
  local i
  for i in $(seq 1 3000); do
    grep -q "SUBNET UP" "$IBSIM_OSM_DIR/opensm.log" 2>/dev/null && return 0
    kill -0 "$IBSIM_OSM_PID" 2>/dev/null || { echo "ibsim_opensm_daemon: opensm exited" >&2; return 1; }
    sleep 0.02
  done
  echo "ibsim_opensm_daemon: no SUBNET UP after 60 s" >&2; return 1
}

# Stops background children of this shell by PID: SIGTERM, up to 5 s for them to exit, then
# SIGKILL, then reaps each one. Bounded; never a bare `wait`, which would also wait for every
# other child (ibsim, OpenSM) and hang when one was not stopped. Empty arguments are skipped.
ibsim_stop_pids() {  # PID...
  local p i alive
  for p in "$@"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for i in $(seq 1 250); do
    alive=0
    for p in "$@"; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.02
  done
  for p in "$@"; do
    [ -n "$p" ] || continue
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
}

ibsim_opensm_stop() {
  if [ -n "$IBSIM_OSM_PID" ]; then
    ibsim_stop_pids "$IBSIM_OSM_PID"
    IBSIM_OSM_PID=""
  fi
}

ibsim_stop() {
  ibsim_opensm_stop
  if [ -n "$IBSIM_PID" ]; then
    printf 'Quit\n' >&9 2>/dev/null || true
    local i
    for i in $(seq 1 100); do kill -0 "$IBSIM_PID" 2>/dev/null || break; sleep 0.02; done
    kill -9 "$IBSIM_PID" 2>/dev/null || true
    wait "$IBSIM_PID" 2>/dev/null || true
    IBSIM_PID=""
  fi
  exec 9>&- 2>/dev/null || true
  if [ -n "$IBSIM_DIR" ] && [ "${GPOOL_KEEP_IBSIM:-0}" != 1 ]; then rm -rf "$IBSIM_DIR"; fi
  IBSIM_DIR=""
}
