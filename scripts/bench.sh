#!/usr/bin/env bash
# Runs every benchmark binary in BUILD/bench and the peer-comparison scripts in bench/.
# Results are what docs/benchmarks.md records; see each section there for its own command.
set -euo pipefail
build=${1:-build}
for bin in "$build"/bench/*_bench; do
  [ -x "$bin" ] || continue
  echo "== $(basename "$bin")"
  "$bin" --benchmark_min_time=0.2
done
# Peer comparisons run by scripts (they start the peer themselves; each says what it needs).
for script in "$(dirname "$0")"/../bench/*.sh; do
  [ -x "$script" ] || continue
  echo "== $(basename "$script")"
  "$script" "$build"
done
