# CPU of compiling the two generated protobuf/gRPC TUs with the sanitizer tree's flags, with and
# without `-fno-sanitize=all -g0` (docs/ci.md), interleaved; no ccache.
#   python3 .ci/measure/proto-cpu.py ASAN_TREE ROUNDS
import json, shlex, subprocess, resource, sys
cc = json.load(open(sys.argv[1] + '/compile_commands.json'))
cmds = []
for e in cc:
    if e['file'].endswith('.pb.cc'):
        a = shlex.split(e['command'])
        if a[0].endswith('ccache'): a = a[1:]
        a = [x for x in a if x not in ('-fno-sanitize=all', '-g0')]
        a[a.index('-o') + 1] = '/tmp/gpool-proto.o'
        for k in ('-MT', '-MF'):
            if k in a: i = a.index(k); del a[i:i+2]
        a = [x for x in a if x != '-MD']
        cmds.append((e['directory'], a))
def cpu(extra):
    t = 0.0
    for d, a in cmds:
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(a + extra, cwd=d, check=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t += r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    return t
for r in range(int(sys.argv[2])):
    print(f"round {r} asan cpu={cpu([]):.1f}s", flush=True)
    print(f"round {r} asan+no-sanitize,-g0 cpu={cpu(['-fno-sanitize=all', '-g0']):.1f}s", flush=True)
