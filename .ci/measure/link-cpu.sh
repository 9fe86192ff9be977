#!/usr/bin/env bash
# CPU of a tree's link steps per linker (docs/ci.md).
#   .ci/measure/link-cpu.sh TREE ROUNDS LINKER... (e.g. build 2 bfd gold lld)
# Re-runs every link step (executables, shared libraries) of the built TREE with -fuse-ld=LINKER,
# linkers interleaved, writing to a scratch file (the tree's outputs stay), and prints the summed
# user+sys CPU per linker and round. Needs a built tree; uses /tmp/gpool-link.*.
set -uo pipefail
tree=$1; rounds=$2; shift 2
cd "$tree"
mapfile -t targets < <(ninja -t targets all | awk -F': ' '$2 ~ /(EXECUTABLE|SHARED_LIBRARY|MODULE)_LINKER/ {print $1}')
echo "targets: ${#targets[@]}" >&2
declare -A cmds
for t in "${targets[@]}"; do cmds[$t]=$(ninja -t commands "$t" | grep -E "^(: && )?/usr/bin/(c\+\+|cc) " | tail -1); done
for r in $(seq "$rounds"); do
for ld in "$@"; do
  tot=0; n=0
  for t in "${targets[@]}"; do
    cmd=${cmds[$t]}
    # Never write the tree's own output: skip a step whose -o is not the target's name.
    [[ $cmd == *" -o $t "* ]] || { echo "SKIP $t (no '-o $t')"; continue; }
    cmd=${cmd/ -o $t / -o /tmp/gpool-link.out }
    cmd=$(printf '%s' "$cmd" | sed -E "s# -fuse-ld=[a-z.]+##g; s#(/usr/bin/(c\+\+|cc)) #\1 -fuse-ld=$ld #")
    if /usr/bin/time -o /tmp/gpool-link.time -f "%U %S" bash -c "$cmd" >/dev/null 2>/tmp/gpool-link.err; then
      tot=$(awk -v t="$tot" '{print t + $1 + $2}' /tmp/gpool-link.time); n=$((n+1))
    else echo "FAIL $ld $t"; head -3 /tmp/gpool-link.err; fi
  done
  echo "round $r $ld links=$n cpu=$tot"
done
done
