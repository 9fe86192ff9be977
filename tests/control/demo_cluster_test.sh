#!/usr/bin/env bash
# demo_cluster_test.sh GPOOL: runs scripts/demo-cluster.sh (the main job of `make demo`) for a few
# seconds and checks that it ends by itself, says so up front, marks its tokens as demo-only
# secrets, and shows its job mix bound on the hollow cluster.
set -euo pipefail
gpool=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
build=$(dirname "$(dirname "$gpool")")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$out" >&2; exit 1; }
DEMO_SECONDS=6 scripts/demo-cluster.sh "$build" >"$out" 2>&1 || fail "demo-cluster exited $?"
# Said before anything else is printed, so a user reads it first.
grep -q "runs for 6 s, then stops by itself" <<<"$(head -n 1 "$out")" || fail "no up-front stop notice"
grep -q "DEMO_SECONDS=" "$out" || fail "does not say how to keep it up"
grep -q "demo-only secrets" "$out" || fail "tokens not marked as demo-only secrets"
grep -q "^submitted 135 jobs" "$out" || fail "job mix not submitted"
grep -Eq "^j[0-9]+ +research +256 .* (running|finished) " "$out" || fail "no 256-GPU gang bound"
grep -qx "demo-cluster: done" <<<"$(tail -n 1 "$out")" || fail "did not end by itself"
echo "demo_cluster_test: ok"
