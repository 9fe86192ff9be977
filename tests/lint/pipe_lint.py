#!/usr/bin/env python3
"""Finds pipelines that can fail by themselves in bash scripts run with `set -o pipefail`.

Why: a reader that stops early (`grep -q`, `grep -m N`, `head`) closes the pipe; a writer
that still has output gets SIGPIPE and exits 141, and under pipefail the whole pipeline
fails even though the reader found what it wanted. It depends on timing (how much the writer
had left when the reader quit), so it shows up as a rare flake: CI stop 13 lost
control_e2e_test to `echo "$after" | grep -q "$id"` with the id plainly in "$after".
Write `grep -q PAT <<<"$text"` or `grep -q PAT <<<"$(cmd)"`, and `sed -n 1,Np` instead of
`head -N`: both read to the end.

Usage: pipe_lint.py FILE_OR_DIR...   (exit 1 and file:line for each finding)
       pipe_lint.py --selftest
Limits: one line at a time (a pipeline continued over lines with a trailing | is checked
only on its first line); `grep -c`, `grep -l` and plain `grep` read to the end and pass.
"""
import os
import re
import sys
import tempfile

# A pipe (not ||) followed by a reader that may quit before end of input.
EARLY_READER = re.compile(r'(?<![|])\|(?![|])\s*(grep\s+(-[a-zA-Z]*[qm]|--quiet|--max-count)|head\b)')


def scripts_in(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                for f in sorted(files):
                    if f.endswith('.sh'):
                        yield os.path.join(root, f)
        else:
            yield p


def findings(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        lines = f.read().split('\n')
    if not any(re.search(r'set\s+-[a-z]*o\s+pipefail|set\s+-o\s+pipefail', l) for l in lines):
        return []
    out = []
    for n, line in enumerate(lines, 1):
        code = line.split(' #', 1)[0] if not line.lstrip().startswith('#') else ''
        m = EARLY_READER.search(code)
        if m:
            out.append(f'{path}:{n}: `| {m.group(1)}` under pipefail can fail on SIGPIPE of the '
                       f'writer; use `<<<"$(...)"` or sed -n: {line.strip()}')
    return out


def selftest():
    bad = ['echo "$x" | grep -q id', 'cmd | head -1', 'cmd | grep -m1 x', 'a | grep -qx y || b']
    good = ['grep -q id <<<"$x"', 'cmd | sed -n 1p', 'a || head -1 f', 'cmd | grep -c x',
            '# cmd | head -1 in a comment', 'cmd | grep x']
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, 's.sh')
        with open(p, 'w') as f:
            f.write('set -euo pipefail\n' + '\n'.join(bad + good) + '\n')
        got = findings(p)
        lines = sorted(int(g.split(':')[1]) for g in got)
        want = list(range(2, 2 + len(bad)))
        if lines != want:
            print(f'selftest: flagged lines {lines}, want {want}:\n' + '\n'.join(got))
            return 1
        with open(p, 'w') as f:
            f.write('set -eu\n' + '\n'.join(bad) + '\n')
        if findings(p):
            print('selftest: flagged a script without pipefail')
            return 1
    print('pipe_lint selftest: ok')
    return 0


def main(argv):
    if argv[1:] == ['--selftest']:
        return selftest()
    if len(argv) < 2:
        print(__doc__)
        return 2
    all_found = [f for s in scripts_in(argv[1:]) for f in findings(s)]
    for f in all_found:
        print(f)
    print(f'pipe_lint: {len(all_found)} finding(s)')
    return 1 if all_found else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
