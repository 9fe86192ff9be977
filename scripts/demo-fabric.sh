#!/usr/bin/env bash
# `make demo`, fabric part: the brief's 2,048-GPU NDR fabric generated, loaded, routed with ftree,
# analysed under all-to-all traffic, then a leaf uplink fails and is re-routed incrementally.
# Usage: scripts/demo-fabric.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
gpool="$build/bin/gpool"
if [ ! -x "$gpool" ]; then
  echo "demo-fabric: $gpool is not built" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
topo="$dir/brief.topo"

step() { echo; echo "--- $*"; }

step "gpool fabric gen brief --out brief.topo"
"$gpool" fabric gen brief --out "$topo"
step "gpool fabric load brief.topo"
"$gpool" fabric load "$topo"
step "gpool fabric route brief.topo --engine ftree --lft-out lfts.dump"
"$gpool" fabric route "$topo" --engine ftree --lft-out "$dir/lfts.dump"
echo "(lfts.dump: $(grep -c '^Unicast lids' "$dir/lfts.dump") switch tables, $(wc -l <"$dir/lfts.dump") lines)"
step "gpool fabric analyze brief.topo --engine ftree --pattern all-to-all"
"$gpool" fabric analyze "$topo" --engine ftree --pattern all-to-all
step "gpool fabric fail brief.topo --link 'leaf-0[33]' --engine ftree"
"$gpool" fabric fail "$topo" --link 'leaf-0[33]' --engine ftree
