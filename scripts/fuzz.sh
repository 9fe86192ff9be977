#!/usr/bin/env bash
# Runs every libFuzzer target for a short, bounded time on its seed corpus (fuzz/corpus/NAME/).
# Crashes, leaks and timeouts are written to ARTIFACTS/NAME/ (default build-fuzz/artifacts) and
# the script exits non-zero after running all targets; add a fixed crasher to fuzz/corpus/NAME/
# so that CTest (fuzz_replay_NAME) replays it from then on. See docs/fuzzing.md.
# Usage: scripts/fuzz.sh BUILD_DIR [SECONDS_PER_TARGET] [ARTIFACTS]
set -euo pipefail
build=${1:-build-fuzz}
secs=${2:-30}
artifacts=${3:-$build/artifacts}
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
for bin in "$build"/fuzz/*_fuzz; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus="$root/fuzz/corpus/$name"
  work=$(mktemp -d)
  mkdir -p "$artifacts/$name"
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
  echo "fuzz: $name for ${secs}s"
  if ! "$bin" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$artifacts/$name/" "$work"; then
    echo "fuzz: $name FAILED; inputs in $artifacts/$name/" >&2
    status=1
  fi
  rm -rf "$work"
done
exit $status
