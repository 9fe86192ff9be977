# CPU (user+sys, no ccache) of compiling the gpool binary's sources (src/cli) as separate TUs
# against the same sources as unity TUs in CMake's batches of 8 (docs/ci.md, "Unity builds").
#   python3 .ci/measure/cli-unity-cpu.py TREE ROUNDS     (TREE: a configured Release tree)
# The sources clash in one TU (same anonymous-namespace names), so for this measurement only each
# include is wrapped in `#define NAME NAME_<file>` ... `#undef NAME` for the clashing NAMES below;
# the sources are not changed. Scratch files go to a temp dir.
import json, os, resource, shlex, subprocess, sys, tempfile

NAMES = ['OnSignal', 'g_stop', 'Call', 'Json', 'Register', 'Fail']
tree, rounds = sys.argv[1], int(sys.argv[2])
tmp = tempfile.mkdtemp(prefix='cli-unity-')
separate = []
for e in json.load(open(os.path.join(tree, 'compile_commands.json'))):
    if ' src/cli/CMakeFiles/gpool.dir/' not in e['command']:
        continue
    a = shlex.split(e['command'])
    if a[0].endswith('ccache'):
        a = a[1:]
    for k in ('-MT', '-MF'):
        if k in a:
            i = a.index(k)
            del a[i:i + 2]
    a = [x for x in a if x != '-MD']
    a[a.index('-o') + 1] = os.path.join(tmp, 'x.o')
    separate.append((e['directory'], a, e['file']))
if not separate:
    sys.exit(f'no src/cli sources in {tree}/compile_commands.json')
unity = []
for n, start in enumerate(range(0, len(separate), 8)):
    lines = []
    for _, _, f in separate[start:start + 8]:
        stem = os.path.splitext(os.path.basename(f))[0]
        lines += [f'#define {x} {x}_{stem}' for x in NAMES]
        lines.append(f'#include "{f}"')
        lines += [f'#undef {x}' for x in NAMES]
    u = os.path.join(tmp, f'unity_{n}.cc')
    open(u, 'w').write('\n'.join(lines) + '\n')
    d, a, f = separate[0]
    b = list(a)
    b[b.index(f)] = u
    unity.append((d, b, u))


def cpu(cmds):
    t = 0.0
    for d, a, _ in cmds:
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(a, cwd=d, check=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t += r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    return t


print(f'{len(separate)} separate TUs, {len(unity)} unity TUs', flush=True)
for r in range(rounds):
    print(f'round {r} unity cpu={cpu(unity):.1f}s', flush=True)
    print(f'round {r} separate cpu={cpu(separate):.1f}s', flush=True)
