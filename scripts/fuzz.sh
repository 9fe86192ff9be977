#!/usr/bin/env bash
# Runs every libFuzzer target for a short, bounded time on its seed corpus (fuzz/corpus/NAME/).
# Usage: scripts/fuzz.sh BUILD_DIR [SECONDS_PER_TARGET]
set -euo pipefail
build=${1:-build-fuzz}
secs=${2:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
for bin in "$build"/fuzz/*_fuzz; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus="$root/fuzz/corpus/$name"
  work=$(mktemp -d)
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
  echo "fuzz: $name for ${secs}s"
  "$bin" -max_total_time="$secs" -max_len=65536 "$work"
  rm -rf "$work"
done
