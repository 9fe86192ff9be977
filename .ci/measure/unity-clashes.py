# Static check for unity-build clashes (docs/ci.md): names declared at the top level of an
# anonymous namespace, or `static` at namespace scope, that two sources of one unity batch both
# declare. Heuristic (line-based, Google style: namespace bodies not indented): it finds the usual
# helper-name clashes, not every one (using-directives, macros used as names), and lists
# using-declarations repeated in two files, which are legal.
#   python3 .ci/measure/unity-clashes.py TREE   (TREE configured with -DCMAKE_UNITY_BUILD=ON)
import re, sys, glob, os, collections
tree = sys.argv[1]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
decl_kw = re.compile(r'^(?:struct|class|enum(?:\s+class)?|union)\s+(\w+)')
using_re = re.compile(r'^using\s+(\w+)\s*=')
func_re = re.compile(r'^(?:[\w:<>,\*&\s]+?)\b(\w+)\s*\(')
var_re = re.compile(r'^(?:[\w:<>,\*&\s]+?)\b(\w+)\s*(?:=|\{|;|\[)')
def names(path):
    out = set()
    try: lines = open(path, errors='replace').read().split('\n')
    except OSError: return out
    anon_depth = []  # brace depth at which each open anonymous namespace sits
    depth = 0
    for ln in lines:
        s = ln.rstrip()
        code = re.sub(r'//.*', '', s)
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', code)
        in_anon = bool(anon_depth) and depth == anon_depth[-1] + 1
        at_ns_scope = in_anon or depth <= 2  # crude: namespaces nest 1-2 deep
        if code and not code[0].isspace() and code[0] not in '}#/*' and not code.startswith(('namespace', 'public', 'private', 'protected', 'TEST', 'INSTANTIATE', 'return', 'template')):
            cand = None
            if in_anon or (code.startswith('static ') and at_ns_scope) or (code.startswith('#define')):
                c = code
                c = re.sub(r'^(static|inline|constexpr|const|extern|thread_local)\s+', '', c)
                c = re.sub(r'^(static|inline|constexpr|const|extern|thread_local)\s+', '', c)
                m = decl_kw.match(c) or using_re.match(c) or func_re.match(c) or var_re.match(c)
                if m and m.group(1) not in ('operator', 'if', 'for', 'while', 'switch'):
                    out.add(m.group(1))
        if code.startswith('#define'):
            m = re.match(r'#define\s+(\w+)', code)
            if m: out.add('#' + m.group(1))
        if re.match(r'^namespace\s*\{', code):
            anon_depth.append(depth)
        for ch in code:
            if ch == '{': depth += 1
            elif ch == '}':
                depth -= 1
                if anon_depth and depth == anon_depth[-1]: anon_depth.pop()
    return out
bad = 0
for u in sorted([g for g in glob.glob(tree + '/**/Unity/unity_*', recursive=True) if g.endswith(('.cxx', '.c'))]):
    files = re.findall(r'#include "([^"]+)"', open(u).read())
    seen = collections.defaultdict(list)
    for f in files:
        for n in names(f): seen[n].append(os.path.relpath(f, SRC))
    for n, fs in seen.items():
        if len(fs) > 1:
            bad += 1; print(f"{os.path.relpath(u, tree)}: {n}: {' '.join(fs)}")
print("clashes:", bad)
