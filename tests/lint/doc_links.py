#!/usr/bin/env python3
"""Checks that references to the docs resolve, so that moving or renaming a doc or a section
breaks a test instead of leaving dangling pointers in comments and pages.

What it checks, in the repository's text files (sources, scripts, docs, test data):
  - a relative Markdown link in a .md file, `[text](path)` or `[text](path#anchor)`: the path
    exists, relative to the file; an anchor names a heading of the target .md file as GitHub
    writes it (lower case, punctuation dropped, spaces to '-', -1, -2 ... for repeats);
  - a repository path to a doc, `docs/NAME.md` (how comments and pages name docs): the file
    exists, relative to the repository root;
  - a quoted section right after such a path, `docs/NAME.md "Section"` or `docs/NAME.md,
    "Section"` (also when a C++ comment wraps before the quote): the doc has a heading that
    contains it, or a paragraph that opens with it in bold (`**Section`), case-insensitively.

Usage: doc_links.py ROOT      (exit 1 and file:line: what for each finding)
       doc_links.py --selftest
Limits: links with a scheme (http:, mailto:) are not fetched; a section named in other words
than `docs/NAME.md "Section"` (say, "see Section in the scheduler doc") is not recognised;
files over 1 MiB (data) and build, .git and node_modules folders are skipped.
"""
import os
import re
import sys
import tempfile

TEXT_EXT = ('.md', '.cc', '.cu', '.h', '.py', '.sh', '.cmake', '.txt', '.yaml', '.yml', '.csv', '.proto',
            '.js', '.ts', '.html', '.css', '.json')
TEXT_NAMES = ('CMakeLists.txt', 'Makefile', 'run')
SKIP_DIRS = ('.git', 'node_modules', 'out', '.whl')
MAX_BYTES = 1 << 20

MD_LINK = re.compile(r'\]\(([^)\s]+)\)')
# A repository path to a doc, not part of a longer path (../docs/x.md, a/docs/x.md), and the
# quoted section that may follow it on the same line or after a wrapped `//` comment line.
DOC_PATH = re.compile(r'(?<![\w/.-])(docs/[\w/.-]*\w\.md)(?:,?[ \t]*(?:\n[ \t]*(?://)?[ \t]*)?"([^"\n]+)")?')


def text_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith('build'))
        for f in sorted(files):
            p = os.path.join(d, f)
            if (f.endswith(TEXT_EXT) or f in TEXT_NAMES) and os.path.getsize(p) <= MAX_BYTES:
                yield p


def headings(path):
    out, code = [], False
    with open(path, encoding='utf-8', errors='replace') as f:
        for line in f:
            if line.startswith('```'):
                code = not code
            elif not code:
                m = re.match(r'^#{1,6} +(.*?)\s*$', line)
                if m:
                    out.append(m.group(1))
    return out


def slugs(path):
    out, seen = set(), {}
    for h in headings(path):
        s = re.sub(r'[^\w\- ]', '', h.lower()).replace(' ', '-')
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f'{s}-{n}')
    return out


def has_section(path, section):
    section = section.lstrip('#').strip().lower()
    if any(section in h.lower() for h in headings(path)):
        return True
    with open(path, encoding='utf-8', errors='replace') as f:
        return ('**' + section) in f.read().lower()


def findings(root, path):
    with open(path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    rel = os.path.relpath(path, root)
    line = lambda pos: text.count('\n', 0, pos) + 1
    out = []
    if path.endswith('.md'):
        for m in MD_LINK.finditer(text):
            target = m.group(1)
            if re.match(r'^[A-Za-z][\w+.-]*:', target):
                continue
            file_part, _, anchor = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(dest):
                out.append(f'{rel}:{line(m.start())}: link to a missing file: {target}')
            elif anchor and dest.endswith('.md') and anchor not in slugs(dest):
                out.append(f'{rel}:{line(m.start())}: no heading #{anchor} in {os.path.relpath(dest, root)}')
    for m in DOC_PATH.finditer(text):
        doc = os.path.join(root, m.group(1))
        if not os.path.isfile(doc):
            out.append(f'{rel}:{line(m.start())}: missing doc {m.group(1)}')
        elif m.group(2) and not has_section(doc, m.group(2)):
            out.append(f'{rel}:{line(m.start())}: {m.group(1)} has no section "{m.group(2)}"')
    return out


def check(root):
    found = []
    me = os.path.realpath(__file__)  # its docstring and selftest name made-up docs
    for p in text_files(root):
        if os.path.realpath(p) != me:
            found += findings(root, p)
    return found


def selftest():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, 'docs', 'sub'))
        os.makedirs(os.path.join(root, 'src'))
        os.makedirs(os.path.join(root, 'build', 'x'))
        files = {
            'docs/a.md': '# A\n\n## Fill mode (`--fill`, src/sim/fill.h)\n\n**Queues** (x).\n\n'
                         '## Repeat\n\n## Repeat\n\n```\n## Not a heading\n```\n',
            'docs/sub/b.md': '[ok](../a.md) [ok](../a.md#fill-mode---fill-srcsimfillh) '
                             '[ok](../a.md#repeat-1) [ok](#b) [web](https://example.com/x.md)\n'
                             '# B\n'
                             '[bad1](../nope.md) [bad2](../a.md#not-a-heading) [bad3](#nope)\n'
                             'docs/a.md "Queues" docs/a.md, "Fill mode" ../docs/nope.md\n'
                             'docs/a.md "Nowhere"\n',
            'src/c.cc': '// see docs/a.md, "Repeat" and docs/sub/b.md\n'
                        '// (docs/a.md,\n//   "Wrapped section")\n// docs/gone.md\n',
            'build/x/d.md': '[skipped](nope.md) docs/gone.md\n',
        }
        for name, body in files.items():
            with open(os.path.join(root, name), 'w', encoding='utf-8') as f:
                f.write(body)
        got = sorted(check(root))
        want = sorted([
            'docs/sub/b.md:3: link to a missing file: ../nope.md',
            'docs/sub/b.md:3: no heading #not-a-heading in docs/a.md',
            'docs/sub/b.md:3: no heading #nope in docs/sub/b.md',
            'docs/sub/b.md:5: docs/a.md has no section "Nowhere"',
            'src/c.cc:2: docs/a.md has no section "Wrapped section"',
            'src/c.cc:4: missing doc docs/gone.md',
        ])
        if got != want:
            print('selftest failed\n got:\n  ' + '\n  '.join(got) + '\n want:\n  ' + '\n  '.join(want))
            return 1
    print('selftest passed')
    return 0


def main(argv):
    if argv[1:] == ['--selftest']:
        return selftest()
    if len(argv) != 2:
        print(__doc__)
        return 2
    found = check(argv[1])
    for f in found:
        print(f)
    print(f'doc_links: {len(found)} finding(s)')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
