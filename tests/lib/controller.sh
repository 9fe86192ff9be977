# Shared by the shell scenario tests (sourced): a scratch dir cleaned up on exit, and waiting for
# a `gpool controller` started in the background with `--listen HOST:0`. The caller defines fail().
#   wait_controller LOG PID   waits up to 30 s for the controller (PID) to print its gRPC address
#                             in LOG; sets ADDR. Fails if PID exits first or no address appears.
wait_controller() {
  local log=$1 pid=$2 _
  for _ in $(seq 300); do
    grep -q "grpc" "$log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || fail "controller exited"
    sleep 0.1
  done
  ADDR=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$log")
  [ -n "$ADDR" ] || fail "controller printed no address"
}
#   scratch_dir               makes TMP (mktemp -d) and an EXIT trap that kills $AGENT_PID and
#                             $CTL_PID (set them when you start those) and removes TMP.
scratch_dir() {
  TMP=$(mktemp -d)
  CTL_PID= AGENT_PID=
  trap scratch_cleanup EXIT
}
scratch_cleanup() {
  local p
  for p in $AGENT_PID $CTL_PID; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
