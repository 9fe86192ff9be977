#!/usr/bin/env bash
# Auth and TLS end to end: a controller with a token file and an openssl-made self-signed
# certificate, a hollow agent with the cluster (agent) token, and the CLI with tenant and admin
# tokens. Checks: a tenant token acts only for its tenant and sees only its jobs; an agent token
# cannot submit; no token is refused; a plaintext client cannot talk to the TLS port; the agent
# registers and jobs run over TLS; `jobs describe`, `jobs watch`, `top` work; no token reads
# UNAUTHENTICATED; a refused watch exits 1 with the error; every client command fails at once
# with a clear message on an unreachable controller; bad names and YAML specs are refused by the
# CLI.
# Usage: auth_tls_test.sh PATH/TO/gpool
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/controller.sh"
GPOOL=${1:?usage: auth_tls_test.sh GPOOL_BINARY}
scratch_dir
fail() { echo "FAIL: $*" >&2; echo "--- controller log" >&2; cat "$TMP"/ctl.log >&2 || true; exit 1; }

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null || fail "openssl could not make a certificate"
cat >"$TMP/tokens" <<TOK
# role tokens for the test
admin-0123456789abcdef admin
research-0123456789abc tenant research
prod-0123456789abcdefg tenant prod
agent-0123456789abcdef agent
TOK
echo "research-0123456789abc" >"$TMP/research.token"

"$GPOOL" controller --store "sqlite:$TMP/state.db" --listen 127.0.0.1:0 --interval-ms 100 \
  --auth-tokens "$TMP/tokens" --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key.pem" >"$TMP/ctl.log" 2>&1 &
CTL_PID=$!
wait_controller "$TMP/ctl.log" "$CTL_PID"
TLS=(--controller "$ADDR" --tls-ca "$TMP/cert.pem")
ADMIN=(--token admin-0123456789abcdef)
RESEARCH=(--token-file "$TMP/research.token")

"$GPOOL" agent "${TLS[@]}" --token agent-0123456789abcdef --hollow 2 --heartbeat-ms 100 >"$TMP/agent.log" 2>&1 &
AGENT_PID=$!
n=0
for _ in $(seq 100); do
  n=$("$GPOOL" nodes -o json "${TLS[@]}" "${ADMIN[@]}" | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("nodes",[])))') || true
  [ "$n" = 2 ] && break; sleep 0.1
done
[ "$n" = 2 ] || fail "agent with the cluster token did not register over TLS: $(cat "$TMP/agent.log")"

# No token / unknown token / wrong role.
if "$GPOOL" submit --gpus 1 "${TLS[@]}" -- true 2>"$TMP/err"; then fail "submit without a token accepted"; fi
# The server's code as it is: UNAUTHENTICATED, not PERMISSION_DENIED (a role it refused).
grep -q "^gpool submit: UNAUTHENTICATED: .*missing 'authorization: Bearer TOKEN'" "$TMP/err" \
  || fail "no-token error: $(cat "$TMP/err")"
grep -q "PERMISSION_DENIED" "$TMP/err" && fail "no-token error reads as PERMISSION_DENIED: $(cat "$TMP/err")"
if "$GPOOL" submit --gpus 1 "${TLS[@]}" --token not-a-real-token-at-all -- true 2>"$TMP/err"; then fail "unknown token accepted"; fi
if "$GPOOL" submit --gpus 1 "${TLS[@]}" --token agent-0123456789abcdef -- true 2>"$TMP/err"; then fail "agent token submitted"; fi
grep -q "agent token" "$TMP/err" || fail "agent-token error: $(cat "$TMP/err")"
# Plaintext client against the TLS port.
if "$GPOOL" jobs --controller "$ADDR" "${ADMIN[@]}" 2>"$TMP/err"; then fail "plaintext client talked to TLS"; fi
grep -q "cannot reach the controller" "$TMP/err" || fail "plaintext error: $(cat "$TMP/err")"

# A tenant acts for itself only.
mine=$("$GPOOL" submit --gpus 8 --duration 1s --tenant research "${TLS[@]}" "${RESEARCH[@]}" -- train)
if "$GPOOL" submit --gpus 1 --tenant prod "${TLS[@]}" "${RESEARCH[@]}" -- true 2>"$TMP/err"; then fail "research submitted for prod"; fi
grep -q "cannot act for tenant prod" "$TMP/err" || fail "cross-tenant error: $(cat "$TMP/err")"
# A watch of another tenant is refused the same way: the error printed, a non-zero exit (it used
# to exit 0 with no output). `timeout` only stops a regression that would stream forever.
rc=0; timeout 20 "$GPOOL" jobs watch --tenant prod "${TLS[@]}" "${RESEARCH[@]}" >"$TMP/out" 2>"$TMP/err" || rc=$?
[ "$rc" = 1 ] || fail "cross-tenant watch: exit $rc, stdout '$(cat "$TMP/out")', stderr '$(cat "$TMP/err")'"
grep -q "^gpool jobs watch: PERMISSION_DENIED: .*cannot act for tenant prod" "$TMP/err" \
  || fail "cross-tenant watch error: $(cat "$TMP/err")"
theirs=$(GPOOL_TOKEN=prod-0123456789abcdefg "$GPOOL" submit --gpus 8 --duration 600s --tenant prod "${TLS[@]}" -- serve)
seen=$("$GPOOL" jobs -o json "${TLS[@]}" "${RESEARCH[@]}" | python3 -c 'import json,sys; print(sorted({j["tenant"] for j in json.load(sys.stdin).get("jobs",[])}))')
[ "$seen" = "['research']" ] || fail "research token sees tenants $seen"
if "$GPOOL" jobs describe "$theirs" "${TLS[@]}" "${RESEARCH[@]}" 2>"$TMP/err"; then fail "research described prod's job"; fi
grep -q "not found" "$TMP/err" || fail "describe other tenant: $(cat "$TMP/err")"
if "$GPOOL" jobs cancel "$theirs" "${TLS[@]}" "${RESEARCH[@]}" 2>/dev/null; then fail "research cancelled prod's job"; fi
all=$("$GPOOL" jobs -o json "${TLS[@]}" "${ADMIN[@]}" | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("jobs",[])))')
[ "$all" = 2 ] || fail "admin sees $all jobs, want 2"

# Jobs run over TLS; watch sees the research job finish; describe shows its tasks.
"$GPOOL" jobs watch "$mine" --count 10 -o json "${TLS[@]}" "${RESEARCH[@]}" >"$TMP/watch" &
WATCH_PID=$!
for _ in $(seq 100); do grep -q '"finished"' "$TMP/watch" && break; sleep 0.1; done
kill "$WATCH_PID" 2>/dev/null || true; wait "$WATCH_PID" 2>/dev/null || true
grep -q '"finished"' "$TMP/watch" || fail "watch did not see $mine finish: $(cat "$TMP/watch")"
"$GPOOL" jobs describe "$mine" "${TLS[@]}" "${RESEARCH[@]}" >"$TMP/desc"
grep -q "State: *finished" "$TMP/desc" || fail "describe: $(cat "$TMP/desc")"
grep -q "hollow-000" "$TMP/desc" || fail "describe lacks tasks: $(cat "$TMP/desc")"
"$GPOOL" top --iterations 1 "${TLS[@]}" "${ADMIN[@]}" >"$TMP/top"
grep -q "GPUs 16, allocated 8" "$TMP/top" || fail "top: $(cat "$TMP/top")"

# Unreachable controller: a clear message, non-zero exit, no hang.
kill -9 "$CTL_PID"; wait "$CTL_PID" 2>/dev/null || true; CTL_PID=
# Every client command fails with the message and exit 1, at once: no call was sent, so there is
# nothing to retry (a submit used to retry for 12.6 s). The 8 s `timeout` is a bound on this
# test, not a measurement: exit 124 means the command was still trying.
DEAD=(--controller 127.0.0.1:1)
printf 'gpus: 1\ncommand: [x]\n' >"$TMP/job.yaml"
dead() {  # LABEL GPOOL_ARGS...: fails unless the command exits 1 saying it cannot reach 127.0.0.1:1
  local what=$1 rc=0; shift
  timeout 8 "$GPOOL" "$@" >/dev/null 2>"$TMP/err" || rc=$?
  [ "$rc" = 1 ] || fail "$what on a dead address: exit $rc (124: still trying after 8 s): $(cat "$TMP/err")"
  grep -q "cannot reach the controller at 127.0.0.1:1" "$TMP/err" || fail "$what unreachable: $(cat "$TMP/err")"
}
dead nodes nodes "${DEAD[@]}"
dead submit submit "${DEAD[@]}" --gpus 1 -- true
dead "submit -f" submit "${DEAD[@]}" -f "$TMP/job.yaml"
dead jobs jobs "${DEAD[@]}"
dead describe jobs describe j00000001 "${DEAD[@]}"
dead cancel jobs cancel j00000001 "${DEAD[@]}"
dead watch jobs watch "${DEAD[@]}"
dead leases jobs leases j00000001 "${DEAD[@]}"
dead tenants tenants "${DEAD[@]}"
dead top top --iterations 1 "${DEAD[@]}"

# Names are checked by the CLI before anything is sent (common/names.h): the error names the
# flag and the character, whatever the controller.
bad_name() {  # WANT GPOOL_ARGS...: fails unless the command exits 1 with WANT on stderr
  local want=$1 rc=0; shift
  timeout 8 "$GPOOL" "$@" >/dev/null 2>"$TMP/err" || rc=$?
  [ "$rc" = 1 ] && grep -qF -- "$want" "$TMP/err" || fail "want exit 1 and '$want', got $rc: $(cat "$TMP/err")"
}
bad_name "--tenant: 'evil\nDefault=0x7fff : ALL=full ;': character '\n' at position 4" \
  submit "${DEAD[@]}" --gpus 1 --tenant "$(printf 'evil\nDefault=0x7fff : ALL=full ;')" -- true
bad_name "--request-id: 'a/b'" submit "${DEAD[@]}" --gpus 1 --request-id a/b -- true
bad_name "--tenant: 'x\"} 1'" jobs "${DEAD[@]}" --tenant 'x"} 1'
bad_name "ID: 'j1 2'" jobs describe 'j1 2' "${DEAD[@]}"
printf 'gpus: 1\ntenant: a\ngpus: 8\n' >"$TMP/dup.yaml"
bad_name "dup.yaml:3: gpus: duplicate key: gpus is already set at line 1" submit "${DEAD[@]}" -f "$TMP/dup.yaml"
printf 'gpus: 1\ncommand: [x, "a\\0b"]\n' >"$TMP/nul.yaml"
bad_name "nul.yaml:2: command[1]: a NUL byte at position 1" submit "${DEAD[@]}" -f "$TMP/nul.yaml"
echo "control auth/tls e2e: OK"
