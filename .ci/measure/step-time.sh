#!/bin/bash
# Compiler/linker launcher that appends the CPU of each build step to a log:
#   "user sys wall maxrss_kB output" (GNU time). Used by .ci/measure/unity-ab.sh as
#   -DCMAKE_CXX_COMPILER_LAUNCHER="/path/step-time.sh;LOG" (and C, and CXX_LINKER), no ccache.
log=$1
shift
out=unknown
prev=
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
exec /usr/bin/time -a -o "$log" -f "%U %S %e %M $out" "$@"
