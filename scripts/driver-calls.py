# Counts the driver entry points a program calls through gpool's libcuda.so.1 stand-in (the
# per-library table in docs/remoting/driver-api.md was made with it). A gdb script: a breakpoint on every
# function the stand-in exports records its name and goes on; calls the stand-in makes to itself
# are not counted (tail calls between its own functions are). Prints "name count" in first-call
# order to $TRACE_OUT (default: stderr).
#
#   TRACE_LIB=build/lib/libcuda.so.1 GPOOL_DEVICES=H:P/0 \
#   LD_LIBRARY_PATH=/usr/local/cuda/lib64:build/lib gdb -batch -x scripts/driver-calls.py \
#     --args build/tests/remote/cuda/cufft_c2c
#
# Slow for programs with many calls (each is a trap into gdb); meant for a look, not a benchmark.
import collections
import os
import subprocess
import sys

import gdb

lib = os.environ["TRACE_LIB"]
nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True)
names = [f[2] for f in (line.split() for line in nm.stdout.splitlines())
         if len(f) == 3 and f[1] in ("T", "W")]
counts = collections.Counter()
order = []


class Entry(gdb.Breakpoint):
    def stop(self):
        try:
            caller = gdb.selected_frame().older()
            if caller is not None and (gdb.solib_name(caller.pc()) or "").endswith("libcuda.so.1"):
                return False  # the stand-in calling itself
        except gdb.error:
            pass
        if counts[self.location] == 0:
            order.append(self.location)
        counts[self.location] += 1
        return False


for cmd in ("set breakpoint pending on", "set pagination off", "set print thread-events off",
            "set print inferior-events off", "handle SIGPIPE nostop noprint pass"):
    gdb.execute(cmd)
gdb.execute("start")
for n in names:
    Entry(n, internal=True)
gdb.execute("continue")
out = open(os.environ["TRACE_OUT"], "w") if os.environ.get("TRACE_OUT") else sys.stderr
for n in order:
    out.write(f"{n} {counts[n]}\n")
