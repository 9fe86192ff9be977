#!/usr/bin/env bash
# front_test.sh GPOOL: bin/gpool is the lean front (src/cli/front_main.cc, docs/cli.md "Two
# binaries"): it loads none of the daemons' libraries nor shared gRPC, runs the client commands
# and `version` itself, and execs libexec/gpool-full, with the same arguments, for everything else.
set -euo pipefail
gpool=$(readlink -f "$1")
fail() { echo "front_test: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. What the front loads: not the libraries that made a client command's start-up ~18 ms.
libs=$(ldd "$gpool")
for l in libgrpc libprotobuf libabsl libucp libucs libibverbs libibnetdisc libhwloc libsqlite3 \
         libcpp-httplib libyaml-cpp; do
  if grep -q "$l" <<<"$libs"; then fail "bin/gpool loads $l: $(grep -m1 "$l" <<<"$libs")"; fi
done

# 2. Its own commands.
[[ $("$gpool" version) == "gpool 0.1.0" ]] || fail "version: $("$gpool" version 2>&1)"
grep -q -- '--gpus' <<<"$("$gpool" submit --help)" || fail "submit --help"
out=$("$gpool" nodes --controller 127.0.0.1:1 2>&1) && fail "nodes on a closed port succeeded: $out"
grep -q "cannot reach the controller at 127.0.0.1:1" <<<"$out" || fail "nodes: $out"
set +e
out=$("$gpool" --log-level=loud nodes --controller 127.0.0.1:1 2>&1); rc=$?
set -e
[[ $rc == 2 ]] && grep -q "log level 'loud'" <<<"$out" || fail "--log-level=loud nodes: rc $rc: $out"

# 3. The others, through libexec/gpool-full, with every argument (the global flag too).
grep -q 'issue' <<<"$("$gpool" lease --help)" || fail "lease --help (exec to libexec/gpool-full)"
help=$("$gpool" --help)
grep -q '^  controller ' <<<"$help" && grep -q '^  submit ' <<<"$help" || fail "--help: $help"
set +e
out=$("$gpool" --log-level=loud fabric gen brief 2>&1); rc=$?
set -e
[[ $rc == 2 ]] && grep -q "log level 'loud'" <<<"$out" || fail "--log-level=loud fabric gen: rc $rc: $out"
# A daemon runs as libexec/gpool-full under the process name gpool (ps -o comm, pgrep -x gpool).
"$gpool" controller --store "sqlite:$tmp/state.db" --listen 127.0.0.1:0 >"$tmp/ctl.log" 2>&1 &
ctl=$!
for _ in $(seq 100); do grep -qs grpc "$tmp/ctl.log" && break; sleep 0.1; done
exe=$(readlink "/proc/$ctl/exe"); comm=$(cat "/proc/$ctl/comm")
kill "$ctl"; wait "$ctl" || true
[[ $exe == "$(dirname "$(dirname "$gpool")")/libexec/gpool-full" ]] || fail "controller runs $exe"
[[ $comm == gpool ]] || fail "controller's process name: '$comm', want gpool"

# 4. Without libexec/gpool-full: the front's own commands still run; the rest fail clearly (127).
mkdir -p "$tmp/bin" && cp "$gpool" "$tmp/bin/gpool"
[[ $("$tmp/bin/gpool" version) == "gpool 0.1.0" ]] || fail "version without libexec"
set +e
out=$("$tmp/bin/gpool" controller --help 2>&1); rc=$?
set -e
[[ $rc == 127 ]] || fail "controller without libexec/gpool-full: rc $rc, want 127: $out"
grep -qF "cannot run the full gpool binary $tmp/libexec/gpool-full, which has \`controller\`" <<<"$out" ||
  fail "controller without libexec/gpool-full: $out"
echo "front_test: OK"
