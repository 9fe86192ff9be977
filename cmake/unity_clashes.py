#!/usr/bin/env python3
"""Unity-build clash check (docs/ci.md, "Unity builds").

With GPOOL_UNITY the sources of a target are compiled as one translation unit per batch, so two
sources of one target must not both declare the same name at namespace scope inside an anonymous
namespace, or `static` at namespace scope, or the same macro: that is a redefinition error (or,
for overloads, a silent change of which function is called) in the unity build only.

This check runs in every tree as the CTest test `unity_clashes` (well under a second), so a clash
fails `make test` in a developer's non-unity build too, not only in CI's unity build. It is
stricter than the build: it compares all sources of a target, not only those CMake puts into
one batch, so adding a source (which moves the batch boundaries) cannot expose an old clash.

Usage:
  unity_clashes.py MANIFEST       MANIFEST: written by cmake/unity.cmake, one target a line:
                                  `target<TAB>source<TAB>source...` (absolute paths; sources
                                  excluded from unity batches are not listed)
  unity_clashes.py --files A B..  check these sources as if they were one target (for testing)

Heuristic, line-based (Google style: namespace bodies not indented, one declaration starts a
line). It tracks the enclosing named namespaces, so a name in `gpool::fabric::{anon}` and the
same name in `gpool::control::{anon}` do not clash. It does not see names a using-directive
(`using namespace x;`) brings into a later source of the batch, nor names built by macros; the
unity build itself catches those. Legal repeats are not reported: using-declarations
(`using ::testing::HasSubstr;`) and aliases of the same type (`using Clock = std::chrono::
steady_clock;` in two files).
Exit status: 0 when clean, 1 with one line per clash (`target: ns::name: file file`).
"""
import collections
import os
import re
import sys

DECL_KW = re.compile(r'^(?:struct|class|enum(?:\s+class|\s+struct)?|union)\s+(?:\[\[\w+\]\]\s+)?'
                     r'(\w+)(?:\s+final)?\s*(?:[:{;]|$)')
TYPE_KW = re.compile(r'^(?:struct|class|enum|union)\b')
ALIAS = re.compile(r'^using\s+(\w+)\s*=\s*(.*?);')
TYPEDEF = re.compile(r'^typedef\s+(.*)\b(\w+)\s*;')
FUNC = re.compile(r'^(?:[\w:<>,\*&\s]+?)\b(\w+)\s*\(')
VAR = re.compile(r'^(?:[\w:<>,\*&\s]+?)\b(\w+)\s*(?:=|\{|;|\[)')
NAMESPACE = re.compile(r'^(?:inline\s+)?namespace\s*([\w:]*)\s*\{')
SPECIFIER = re.compile(r'^(?:static|inline|constexpr|constinit|const|extern|thread_local|'
                       r'\[\[\w+\]\])\s+')
SKIP_START = ('public', 'private', 'protected', 'TEST', 'INSTANTIATE', 'TYPED_TEST',
              'REGISTER_TYPED', 'return', 'template', 'using namespace', 'friend', 'extern "C"',
              'BENCHMARK', 'GPOOL_')
KEYWORDS = {'operator', 'if', 'for', 'while', 'switch', 'return', 'sizeof', 'decltype',
            'static_assert', 'alignas'}


def strip_code(line):
    """The line without comments and with string/char literals emptied."""
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(?:\\.|[^'\\])*'", "''", line)
    return re.sub(r'//.*', '', line).rstrip()


def declarations(path):
    """{(namespace path, name): description} of the clash-prone declarations in `path`."""
    out = {}
    try:
        text = open(path, errors='replace').read()
    except OSError as e:
        sys.exit(f'unity_clashes: cannot read {path}: {e}')
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    # Stack of (brace depth the namespace's body starts at, name or '' for anonymous).
    ns = []
    depth = 0
    for lineno, raw in enumerate(text.split('\n'), 1):
        code = strip_code(raw)
        if code.startswith('#'):
            m = re.match(r'#\s*define\s+(\w+)(.*)', code)
            if m:
                out[('#', m.group(1))] = ('macro', m.group(2).strip(), lineno)
            m = re.match(r'#\s*undef\s+(\w+)', code)
            if m:
                out.pop(('#', m.group(1)), None)  # scoped to this file: no clash
            continue
        body_depth = ns[-1][0] if ns else 0
        at_ns_scope = depth == body_depth
        in_anon = any(n == '' for _, n in ns)
        m = NAMESPACE.match(code)
        if m and at_ns_scope:
            for part in (m.group(1).split('::') if m.group(1) else ['']):
                ns.append((depth + 1, part))
            depth += 1
            code = code[m.end():]
        elif at_ns_scope and code and not code[0].isspace() and code[0] not in '}{)' \
                and not code.startswith(SKIP_START):
            is_static = code.startswith('static ')
            if in_anon or is_static:
                c = code
                while SPECIFIER.match(c):
                    c = SPECIFIER.sub('', c, count=1)
                key_ns = '::'.join(n or '{anon}' for _, n in ns)
                a = ALIAS.match(c)
                t = TYPEDEF.match(c)
                if a:
                    out[(key_ns, a.group(1))] = ('alias', re.sub(r'\s+', '', a.group(2)), lineno)
                elif t:
                    out[(key_ns, t.group(2))] = ('alias', re.sub(r'\s+', '', t.group(1)), lineno)
                elif TYPE_KW.match(c):
                    m2 = DECL_KW.match(c)  # never a base class or member as the name
                    if m2:
                        out[(key_ns, m2.group(1))] = ('decl', '', lineno)
                elif not c.startswith('using '):
                    m2 = FUNC.match(c) or VAR.match(c)
                    if m2 and m2.group(1) not in KEYWORDS:
                        out[(key_ns, m2.group(1))] = ('decl', '', lineno)
        # Braces: namespaces close when depth returns to where they opened.
        for ch in code:
            if ch == '{':
                depth += 1
            elif ch == '}':
                depth -= 1
                while ns and depth < ns[-1][0]:
                    opened = ns[-1][0]
                    ns.pop()
                    # `namespace a::b {` pushed two entries for one brace: pop them together.
                    while ns and ns[-1][0] == opened:
                        ns.pop()
    return out


def clashes(target, files):
    seen = collections.defaultdict(list)
    for f in files:
        for key, (kind, detail, line) in declarations(f).items():
            seen[key].append((f, line, kind, detail))
    out = []
    for (key_ns, name), where in sorted(seen.items()):
        if len(where) < 2:
            continue
        kinds = {(k, d) for _, _, k, d in where}
        if len(kinds) == 1 and next(iter(kinds))[0] in ('alias', 'macro'):
            continue  # the same alias or the same macro body twice is legal
        label = name if key_ns == '#' else f'{key_ns}::{name}'
        files_s = ' '.join(f'{os.path.relpath(f)}:{line}' for f, line, _, _ in where)
        out.append(f'{target}: {label}: {files_s}')
    return out


def main(argv):
    if len(argv) >= 2 and argv[0] == '--files':
        groups = [('files', argv[1:])]
    elif len(argv) == 1:
        groups = []
        for n, line in enumerate(open(argv[0]), 1):
            parts = line.rstrip('\n').split('\t')
            if len(parts) < 1 or not parts[0]:
                sys.exit(f'unity_clashes: {argv[0]}:{n}: empty line')
            groups.append((parts[0], [p for p in parts[1:] if p]))
        if not groups:
            sys.exit(f'unity_clashes: {argv[0]}: no targets (cmake/unity.cmake wrote none?)')
    else:
        sys.exit(__doc__)
    bad = []
    checked = 0
    for target, files in groups:
        checked += len(files)
        bad += clashes(target, files)
    for b in bad:
        print(b)
    print(f'unity_clashes: {len(groups)} targets, {checked} sources, {len(bad)} clashes'
          + ('' if not bad else ' (rename one of each pair: docs/ci.md "Unity builds")'))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
