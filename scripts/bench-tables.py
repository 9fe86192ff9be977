#!/usr/bin/env python3
"""Renders the tables of docs/benchmarks.md from bench/results/*.json, and checks them.

Each area of docs/benchmarks.md has a hand-written introduction (what is measured, on what
machine, how, and the method's limits) followed by one generated table between two markers:

    <!-- bench-tables:begin SLUG -->
    ...generated from bench/results/SLUG.json...
    <!-- bench-tables:end SLUG -->

Only the text between the markers is rewritten; everything else in the doc is left alone.

Usage:
  scripts/bench-tables.py                     rewrite the tables in the doc from the JSON
  scripts/bench-tables.py --check             exit 1 if the doc differs from what the JSON
                                              renders (CTest `bench_tables_check`)
  scripts/bench-tables.py --import OUT.json   take figures from Google Benchmark JSON
                                              (`BIN --benchmark_format=json >OUT.json`) into
                                              the rows that name that benchmark, write the
                                              JSON back, then rewrite the doc (repeatable)
  scripts/bench-tables.py --selftest          check the script itself on made-up inputs
  --doc PATH, --results DIR                   defaults: docs/benchmarks.md, bench/results

A results file is {"area": NAME, "rows": [ROW, ...]}. A ROW:
  area     the file's area again (checked)
  metric   what is measured (text)
  gpool    {"value": NUMBER or TEXT, "unit": TEXT}; optional "decimals" (digits to print after
           the point, for figures such as 42.0 that JSON would shorten) and "gbench" (below)
  peer     optional {"name": TEXT, "value": NUMBER or TEXT, "unit": TEXT}: the peer or the raw
           limit measured in the same run (value and unit optional); "decimals", "gbench"
  ratio    optional NUMBER (gpool / peer as the bench reports it; "1.10x", 2 decimals below 10)
           or TEXT
  target   optional {"text": TEXT, then either "op" ("<", "<=", ">", ">=") and "value" (in
           gpool's unit; met is worked out from gpool's value) or "met": true/false}
  command  the command that produced the figure (rendered as code; no backquote)
  date     when it was measured, "YYYY-MM-DD[ HH:MM[-HH:MM] UTC]" as written when measured
  note     optional short text: spread, load, caveats
  gbench   (inside gpool or peer) {"binary": "sched_bench", "benchmark": "BM_PlaceGang128/256",
            "field": "cpu_time" | "real_time" | a counter such as "cpu_p99_us",
            "scale": NUMBER (optional, for counters)}: where --import finds this value. Times
           are converted from the file's time_unit into the row's unit (ns, us, ms, s).
--import picks, per benchmark, the "median" aggregate when there is one, else the median of
the repetitions, sets the row's date from the file's context.date, and recomputes a numeric
ratio as gpool / peer (units the same, or both times). A row whose gpool and peer both name
benchmarks of the file changes only when both are there. It keeps the row's command and note:
check that they still describe the new run.

Limits: text cells may not hold newlines, backquotes in commands, or HTML comment markers;
a "|" is escaped. Numbers are printed as stored (3 significant digits after --import).
"""
import argparse
import copy
import datetime
import json
import os
import re
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BEGIN_RE = re.compile(r'<!-- bench-tables:begin ([a-z0-9][a-z0-9-]*) -->')
END_FMT = '<!-- bench-tables:end {} -->'
DATE_RE = re.compile(r'^\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(-\d{2}:\d{2})? UTC)?$')
OPS = {'<': lambda a, b: a < b, '<=': lambda a, b: a <= b,
       '>': lambda a, b: a > b, '>=': lambda a, b: a >= b}
TIME_UNITS = {'ns': 1e-9, 'us': 1e-6, 'ms': 1e-3, 's': 1.0}
ROW_KEYS = {'area', 'metric', 'gpool', 'peer', 'ratio', 'target', 'command', 'date', 'note'}
HEADER = ('| metric | gpool | peer or limit | ratio / target | command | date | note |\n'
          '|---|---|---|---|---|---|---|\n')


class Bad(Exception):
    """Input that cannot be rendered; the message names the file and the field."""


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_text(v, where, required=True):
    if v is None and not required:
        return
    if not isinstance(v, str) or (required and not v.strip()):
        raise Bad(f'{where}: expected non-empty text, got {v!r}')
    if any(ord(c) < 32 for c in v):
        raise Bad(f'{where}: control character or newline in {v!r}')
    if '<!--' in v or '-->' in v:
        raise Bad(f'{where}: HTML comment marker in {v!r} (it would break the doc markers)')


def check_keys(obj, allowed, where):
    if not isinstance(obj, dict):
        raise Bad(f'{where}: expected an object, got {obj!r}')
    extra = sorted(set(obj) - allowed)
    if extra:
        raise Bad(f'{where}: unknown field(s) {", ".join(extra)} '
                  f'(allowed: {", ".join(sorted(allowed))})')


def check_gbench(g, where):
    check_keys(g, {'binary', 'benchmark', 'field', 'scale'}, where)
    for k in ('binary', 'benchmark', 'field'):
        check_text(g.get(k), f'{where}.{k}')
    if 'scale' in g and not is_num(g['scale']):
        raise Bad(f'{where}.scale: expected a number, got {g["scale"]!r}')


def check_decimals(obj, where):
    if 'decimals' in obj:
        d = obj['decimals']
        if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= 6:
            raise Bad(f'{where}.decimals: expected 0-6, got {d!r}')
        if not is_num(obj.get('value')):
            raise Bad(f'{where}.decimals: only for a numeric value')


def check_row(row, area, where):
    check_keys(row, ROW_KEYS, where)
    if row.get('area') != area:
        raise Bad(f'{where}.area: {row.get("area")!r} is not the file\'s area {area!r}')
    check_text(row.get('metric'), f'{where}.metric')
    g = row.get('gpool')
    check_keys(g, {'value', 'unit', 'decimals', 'gbench'}, f'{where}.gpool')
    check_decimals(g, f'{where}.gpool')
    if not is_num(g.get('value')):
        check_text(g.get('value'), f'{where}.gpool.value')
    check_text(g.get('unit'), f'{where}.gpool.unit', required=False)
    if 'gbench' in g:
        check_gbench(g['gbench'], f'{where}.gpool.gbench')
    p = row.get('peer')
    if p is not None:
        check_keys(p, {'name', 'value', 'unit', 'decimals', 'gbench'}, f'{where}.peer')
        check_decimals(p, f'{where}.peer')
        check_text(p.get('name'), f'{where}.peer.name')
        if 'value' in p and not is_num(p['value']):
            check_text(p['value'], f'{where}.peer.value')
        check_text(p.get('unit'), f'{where}.peer.unit', required=False)
        if 'gbench' in p:
            check_gbench(p['gbench'], f'{where}.peer.gbench')
    if 'ratio' in row and not is_num(row['ratio']):
        check_text(row['ratio'], f'{where}.ratio')
    t = row.get('target')
    if t is not None:
        check_keys(t, {'text', 'op', 'value', 'met'}, f'{where}.target')
        check_text(t.get('text'), f'{where}.target.text')
        if 'op' in t:
            if t['op'] not in OPS:
                raise Bad(f'{where}.target.op: {t["op"]!r} is not one of {", ".join(OPS)}')
            if not is_num(t.get('value')):
                raise Bad(f'{where}.target.value: a number is needed with op, '
                          f'got {t.get("value")!r}')
            if not is_num(g.get('value')):
                raise Bad(f'{where}.target: op needs a numeric gpool.value, got {g.get("value")!r}')
            if 'met' in t:
                raise Bad(f'{where}.target.met: not allowed with op (it is worked out)')
        elif not isinstance(t.get('met'), bool):
            raise Bad(f'{where}.target.met: true or false needed without op, got {t.get("met")!r}')
    check_text(row.get('command'), f'{where}.command')
    if '`' in row['command']:
        raise Bad(f'{where}.command: a backquote cannot be shown inside the code span')
    if not isinstance(row.get('date'), str) or not DATE_RE.match(row['date']):
        raise Bad(f'{where}.date: {row.get("date")!r} is not "YYYY-MM-DD[ HH:MM[-HH:MM] UTC]"')
    check_text(row.get('note'), f'{where}.note', required=False)


def load_results(results_dir):
    """{slug: (path, data)} for every *.json in results_dir, each validated."""
    areas = {}
    if not os.path.isdir(results_dir):
        raise Bad(f'{results_dir}: no such results directory')
    for name in sorted(os.listdir(results_dir)):
        if not name.endswith('.json'):
            continue
        slug = name[:-5]
        path = os.path.join(results_dir, name)
        if not re.fullmatch(r'[a-z0-9][a-z0-9-]*', slug):
            raise Bad(f'{path}: file name must be lower-case letters, digits and dashes')
        try:
            with open(path, encoding='utf-8') as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise Bad(f'{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}') from None
        check_keys(data, {'area', 'rows'}, path)
        check_text(data.get('area'), f'{path}: area')
        rows = data.get('rows')
        if not isinstance(rows, list) or not rows:
            raise Bad(f'{path}: rows: expected a non-empty list')
        for i, row in enumerate(rows):
            metric = row.get('metric', '?') if isinstance(row, dict) else '?'
            check_row(row, data['area'], f'{path}: rows[{i}] ({metric})')
        areas[slug] = (path, data)
    return areas


def fmt_num(v):
    if isinstance(v, int):
        return f'{v:,}'
    s = repr(v)
    if 'e' in s or 'inf' in s or 'nan' in s:
        return f'{v:.3g}'
    whole, _, frac = s.partition('.')
    whole = f'{int(whole):,}' if whole not in ('-0',) else whole
    return whole + ('.' + frac if frac and frac != '0' else '')


def cell(text):
    return text.replace('|', '\\|')


def fmt_ratio(r):
    # Ratios near 1 are read to the hundredth ("1.10x" against a 1.3x target).
    if abs(r) < 10 and round(r, 2) == r:
        return f'{r:.2f}'
    return fmt_num(r)


def value_text(v, unit, decimals=None):
    if is_num(v) and decimals is not None:
        s = f'{v:,.{decimals}f}'
    else:
        s = fmt_num(v) if is_num(v) else v
    return f'{s} {unit}' if unit else s


def target_met(row):
    t = row['target']
    if 'op' in t:
        return OPS[t['op']](row['gpool']['value'], t['value'])
    return t['met']


def render_row(row):
    g = row['gpool']
    gp = value_text(g['value'], g.get('unit'), g.get('decimals'))
    p = row.get('peer')
    if p is None:
        peer = '-'
    elif 'value' in p:
        peer = f'{p["name"]}: {value_text(p["value"], p.get("unit"), p.get("decimals"))}'
    else:
        peer = p['name']
    parts = []
    if 'ratio' in row:
        r = row['ratio']
        parts.append(f'{fmt_ratio(r)}x' if is_num(r) else r)
    if 'target' in row:
        met = 'met' if target_met(row) else 'not met'
        parts.append(f'target {row["target"]["text"]}: **{met}**')
    ratio = '; '.join(parts) if parts else '-'
    cells = [row['metric'], gp, peer, ratio, f'`{row["command"]}`', row['date'],
             row.get('note') or '']
    return '| ' + ' | '.join(cell(c) for c in cells) + ' |\n'


def render_table(slug, data):
    return (f'\n<!-- generated by scripts/bench-tables.py from bench/results/{slug}.json: '
            'edit the JSON, then run the script -->\n' + HEADER +
            ''.join(render_row(r) for r in data['rows']) + '\n')


def render_doc(text, areas, doc_path):
    """The doc with every marked table replaced; Bad if markers and results do not match."""
    out, pos, seen = [], 0, []
    for m in BEGIN_RE.finditer(text):
        if m.start() < pos:
            continue  # a begin marker inside a section already replaced: reported below
        slug = m.group(1)
        line = text.count('\n', 0, m.start()) + 1
        end = text.find(END_FMT.format(slug), m.end())
        if end < 0:
            raise Bad(f'{doc_path}:{line}: "{m.group(0)}" has no "{END_FMT.format(slug)}"')
        inner_begin = BEGIN_RE.search(text, m.end(), end)
        if inner_begin:
            raise Bad(f'{doc_path}:{line}: section {slug} is not closed before the next '
                      'begin marker')
        if slug not in areas:
            raise Bad(f'{doc_path}:{line}: marker for {slug}, but there is no {slug}.json '
                      'in the results')
        if slug in seen:
            raise Bad(f'{doc_path}:{line}: second section for {slug}')
        seen.append(slug)
        out.append(text[pos:m.end()])
        out.append(render_table(slug, areas[slug][1]))
        pos = end
    out.append(text[pos:])
    missing = sorted(set(areas) - set(seen))
    if missing:
        raise Bad(f'{doc_path}: no "<!-- bench-tables:begin SLUG -->" section for '
                  f'{", ".join(s + ".json" for s in missing)}')
    return ''.join(out)


# --- Google Benchmark import ------------------------------------------------------------------

TAG_RE = re.compile(r'/(iterations:\d+|repeats:\d+|min_time:[0-9.s]+|real_time|process_time|'
                    r'manual_time|threads:\d+)$')


def base_name(name):
    while True:
        stripped = TAG_RE.sub('', name)
        if stripped == name:
            return name
        name = stripped


def sig3(v):
    if v == 0:
        return 0
    r = float(f'{v:.3g}')
    return int(round(r)) if abs(r) >= 100 else r


def gbench_value(entries, spec, unit, where):
    want = base_name(spec['benchmark'])
    runs = [e for e in entries if base_name(e.get('run_name', e.get('name', ''))) == want]
    if not runs:
        return None
    errors = [e for e in runs if e.get('error_occurred')]
    if errors:
        raise Bad(f'{where}: {spec["benchmark"]} reported an error: '
                  f'{errors[0].get("error_message")}')
    medians = [e for e in runs
               if e.get('run_type') == 'aggregate' and e.get('aggregate_name') == 'median']
    picked = medians or [e for e in runs if e.get('run_type', 'iteration') == 'iteration']
    if not picked:
        raise Bad(f'{where}: {spec["benchmark"]} has no median aggregate and no plain runs')
    field = spec['field']
    vals = []
    for e in picked:
        if field not in e:
            raise Bad(f'{where}: {spec["benchmark"]} has no field {field!r} '
                      f'(has: {", ".join(sorted(k for k in e if is_num(e[k])))})')
        v = e[field]
        if field in ('cpu_time', 'real_time'):
            tu = e.get('time_unit', 'ns')
            if tu not in TIME_UNITS or unit not in TIME_UNITS:
                raise Bad(f'{where}: cannot convert {field} from {tu!r} '
                          f'into the row\'s unit {unit!r}')
            v = v * TIME_UNITS[tu] / TIME_UNITS[unit]
        vals.append(v * spec.get('scale', 1))
    return sig3(statistics.median(vals))


def ratio_of_values(row):
    """gpool / peer when both are numbers in comparable units (the same, or two time units)."""
    g, p = row['gpool'], row.get('peer') or {}
    if not (is_num(g['value']) and is_num(p.get('value'))) or p['value'] == 0:
        return None
    gu, pu = g.get('unit'), p.get('unit')
    if gu == pu:
        return sig3(g['value'] / p['value'])
    if gu in TIME_UNITS and pu in TIME_UNITS:
        return sig3(g['value'] * TIME_UNITS[gu] / (p['value'] * TIME_UNITS[pu]))
    return None


def gbench_date(ctx, where):
    raw = ctx.get('date', '')
    try:
        d = datetime.datetime.fromisoformat(raw)
    except ValueError:
        raise Bad(f'{where}: context.date {raw!r} is not an ISO date') from None
    if d.tzinfo is not None:
        d = d.astimezone(datetime.timezone.utc)
    return d.strftime('%Y-%m-%d %H:%M UTC')


def import_gbench(paths, areas):
    """Updates rows in `areas` in place from Google Benchmark JSON files; returns changed slugs."""
    changed = set()
    for path in paths:
        try:
            with open(path, encoding='utf-8') as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise Bad(f'{path}: cannot read Google Benchmark JSON: {e}') from None
        if not isinstance(data, dict) or 'benchmarks' not in data or 'context' not in data:
            raise Bad(f'{path}: not Google Benchmark JSON (no "context"/"benchmarks"; '
                      'run the binary with --benchmark_format=json)')
        binary = os.path.basename(data['context'].get('executable', ''))
        date = gbench_date(data['context'], path)
        hits = 0
        for slug, (apath, adata) in areas.items():
            for i, row in enumerate(adata['rows']):
                where = f'{apath}: rows[{i}] ({row["metric"]})'
                # A row takes the new run only whole: a gpool figure beside a peer from
                # another run would make a ratio of two runs.
                found, missing = [], []
                for side in ('gpool', 'peer'):
                    obj = row.get(side)
                    spec = obj.get('gbench') if obj else None
                    if not spec or spec['binary'] != binary:
                        continue
                    v = gbench_value(data['benchmarks'], spec, obj.get('unit'), f'{where}.{side}')
                    (missing if v is None else found).append((obj, v, spec['benchmark']))
                if missing:
                    if found:
                        print(f'{where}: {", ".join(m[2] for m in missing)} not in {path}; '
                              'row left as it was', file=sys.stderr)
                    continue
                for obj, v, _ in found:
                    obj['value'] = v
                if found:
                    row['date'] = date
                    ratio = ratio_of_values(row)
                    if is_num(row.get('ratio')) and ratio is not None:
                        row['ratio'] = ratio
                    check_row(row, adata['area'], where)
                    changed.add(slug)
                    hits += 1
                    if row.get('note'):
                        print(f'{where}: imported; note kept, check it still holds: {row["note"]}',
                              file=sys.stderr)
        if hits == 0:
            print(f'{path}: no row names a benchmark of {binary!r}', file=sys.stderr)
    return changed


def write_json(path, data):
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write('\n')
    os.replace(tmp, path)


def first_difference(old, new):
    a, b = old.split('\n'), new.split('\n')
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i + 1, x, y
    return min(len(a), len(b)) + 1, '(end)' if len(a) < len(b) else '', ''


def run(doc, results, check=False, imports=()):
    """Returns (exit code, message)."""
    areas = load_results(results)
    if imports:
        for slug in sorted(import_gbench(imports, areas)):
            write_json(*areas[slug])
    try:
        with open(doc, encoding='utf-8') as f:
            old = f.read()
    except OSError as e:
        raise Bad(f'{doc}: {e.strerror}') from None
    new = render_doc(old, areas, doc)
    if old == new:
        return 0, f'{doc}: up to date with {results}'
    if check:
        line, was, should = first_difference(old, new)
        return 1, (f'{doc}:{line}: out of date with {results} (run scripts/bench-tables.py)\n'
                   f'  doc:      {was}\n  rendered: {should}')
    with open(doc + '.tmp', 'w', encoding='utf-8') as f:
        f.write(new)
    os.replace(doc + '.tmp', doc)
    return 0, f'{doc}: tables rewritten from {results}'


# --- selftest ---------------------------------------------------------------------------------

def selftest():
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    row = {'area': 'Demo', 'metric': 'gang p99 | CPU', 'gpool': {'value': 15, 'unit': 'us',
           'gbench': {'binary': 'demo_bench', 'benchmark': 'BM_Gang/256', 'field': 'cpu_time'}},
           'peer': {'name': 'first fit', 'value': 50, 'unit': 'us',
                    'gbench': {'binary': 'demo_bench', 'benchmark': 'BM_First/256',
                               'field': 'cpu_p99_us'}},
           'ratio': 0.3, 'target': {'text': '< 1 ms', 'op': '<', 'value': 1000},
           'command': "demo_bench --benchmark_filter='A|B'", 'date': '2026-11-30 15:12 UTC',
           'note': 'load 1-2'}
    area = {'area': 'Demo', 'rows': [row]}
    doc = ('# B\n\nintro\n\n<!-- bench-tables:begin demo -->\nstale\n'
           '<!-- bench-tables:end demo -->\n\nafter\n')
    with tempfile.TemporaryDirectory() as tmp:
        res = os.path.join(tmp, 'results')
        os.mkdir(res)
        docp = os.path.join(tmp, 'b.md')

        def put(a, d=doc):
            write_json(os.path.join(res, 'demo.json'), a)
            with open(docp, 'w', encoding='utf-8') as f:
                f.write(d)

        def err_of(fn):
            try:
                fn()
            except Bad as e:
                return str(e)
            return ''

        put(area)
        rc, _ = run(docp, res, check=True)
        expect(rc == 1, 'a stale table must fail --check')
        rc, _ = run(docp, res)
        text = open(docp, encoding='utf-8').read()
        expect(rc == 0 and 'stale' not in text, 'writing must replace the stale table')
        expect(text.startswith('# B\n\nintro\n\n') and text.endswith('\n\nafter\n'),
               'text outside the markers must be kept')
        expect('| gang p99 \\| CPU | 15 us | first fit: 50 us | 0.30x; target < 1 ms: **met** |'
               in text, 'row cells, escaped pipe and worked-out target')
        expect("`demo_bench --benchmark_filter='A\\|B'`" in text, 'pipe in a command escaped')
        rc, _ = run(docp, res, check=True)
        expect(rc == 0, '--check must pass right after writing')

        bad = copy.deepcopy(area)
        bad['rows'][0]['gpool']['value'] = 2000
        put(bad, text)
        rc, msg = run(docp, res, check=True)
        expect(rc == 1 and '2,000 us' in msg, f'a changed value must fail --check: {msg}')
        put(bad)
        run(docp, res)
        expect('target < 1 ms: **not met**' in open(docp, encoding='utf-8').read(),
               'a value over the target must render "not met"')

        for mutate, needle in [
                (lambda r: r.pop('command'), 'rows[0] (gang p99 | CPU).command'),
                (lambda r: r.update(command='a `b`'), 'backquote'),
                (lambda r: r.update(date='30 Nov'), '.date'),
                (lambda r: r.update(metric='a\nb'), 'newline'),
                (lambda r: r.update(note='x --> y'), 'comment marker'),
                (lambda r: r.update(colour='red'), 'unknown field(s) colour'),
                (lambda r: r.update(area='Other'), "not the file's area"),
                (lambda r: r['target'].update(met=True), 'not allowed with op'),
                (lambda r: r['target'].update(op='~'), 'target.op')]:
            b = copy.deepcopy(area)
            mutate(b['rows'][0])
            put(b)
            e = err_of(lambda: run(docp, res, check=True))
            expect(needle in e and 'demo.json' in e, f'bad row must be named ({needle}): got {e!r}')

        put(area, doc.replace('<!-- bench-tables:end demo -->', ''))
        expect('has no "<!-- bench-tables:end demo -->"' in err_of(lambda: run(docp, res)),
               'an unclosed section must be reported')
        put(area, '# B\n')
        expect('no "<!-- bench-tables:begin SLUG -->" section for demo.json'
               in err_of(lambda: run(docp, res)), 'a results file without a section')
        put(area, doc.replace('demo', 'other'))
        expect('no other.json' in err_of(lambda: run(docp, res)), 'a section without results')

        # Import: a median aggregate wins over the repetitions; time converted ns -> us;
        # the counter is taken as is; the ratio and date follow the file.
        gb = {'context': {'executable': '/x/build/bench/demo_bench',
                          'date': '2026-12-04T23:10:05+01:00'},
              'benchmarks': [
                  {'name': 'BM_Gang/256', 'run_name': 'BM_Gang/256', 'run_type': 'iteration',
                   'cpu_time': 99000.0, 'time_unit': 'ns'},
                  {'name': 'BM_Gang/256_median', 'run_name': 'BM_Gang/256',
                   'run_type': 'aggregate', 'aggregate_name': 'median', 'cpu_time': 12.0,
                   'time_unit': 'us'},
                  {'name': 'BM_First/256/iterations:5', 'run_name': 'BM_First/256/iterations:5',
                   'run_type': 'iteration', 'cpu_time': 1.0, 'time_unit': 'ms',
                   'cpu_p99_us': 48.0}]}
        gbp = os.path.join(tmp, 'gb.json')
        with open(gbp, 'w', encoding='utf-8') as f:
            json.dump(gb, f)
        put(area)
        rc, _ = run(docp, res, imports=[gbp])
        got = json.load(open(os.path.join(res, 'demo.json'), encoding='utf-8'))['rows'][0]
        expect(got['gpool']['value'] == 12 and got['peer']['value'] == 48,
               f'imported values: {got["gpool"]["value"]}, {got["peer"]["value"]}')
        expect(got['ratio'] == 0.25, f'ratio recomputed as 12 / 48: {got["ratio"]}')
        expect(got['date'] == '2026-12-04 22:10 UTC', f'date in UTC: {got["date"]}')
        expect('| 12 us | first fit: 48 us | 0.25x' in open(docp, encoding='utf-8').read(),
               'the doc is rewritten after an import')
        only_gpool = dict(gb, benchmarks=gb['benchmarks'][:2])
        only_gpool['benchmarks'][1] = dict(gb['benchmarks'][1], cpu_time=5.0)
        with open(gbp, 'w', encoding='utf-8') as f:
            json.dump(only_gpool, f)
        run(docp, res, imports=[gbp])
        got = json.load(open(os.path.join(res, 'demo.json'), encoding='utf-8'))['rows'][0]
        expect(got['gpool']['value'] == 12, 'a row whose peer is missing from the file must '
               f'keep its old run whole: gpool {got["gpool"]["value"]}')
        gb['benchmarks'][1]['error_occurred'] = True
        gb['benchmarks'][1]['error_message'] = 'boom'
        with open(gbp, 'w', encoding='utf-8') as f:
            json.dump(gb, f)
        expect('reported an error: boom' in err_of(lambda: run(docp, res, imports=[gbp])),
               'a benchmark error must stop the import')
        with open(gbp, 'w', encoding='utf-8') as f:
            f.write('{"rows": []}')
        expect('not Google Benchmark JSON' in err_of(lambda: run(docp, res, imports=[gbp])),
               'a file that is not Google Benchmark JSON')

    for f in failures:
        print(f'selftest: FAILED: {f}', file=sys.stderr)
    print(f'selftest: {"FAILED" if failures else "ok"}')
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--doc', default=os.path.join(ROOT, 'docs', 'benchmarks.md'))
    ap.add_argument('--results', default=os.path.join(ROOT, 'bench', 'results'))
    ap.add_argument('--check', action='store_true', help='exit 1 if the doc is out of date')
    ap.add_argument('--import', dest='imports', action='append', default=[], metavar='GBENCH_JSON',
                    help='Google Benchmark JSON output to take figures from (repeatable)')
    ap.add_argument('--selftest', action='store_true')
    args = ap.parse_args()
    if args.selftest:
        return selftest()
    if args.check and args.imports:
        ap.error('--check and --import do not go together (--import writes)')
    try:
        rc, msg = run(args.doc, args.results, args.check, args.imports)
    except Bad as e:
        print(f'bench-tables: {e}', file=sys.stderr)
        return 2
    print(msg, file=sys.stderr if rc else sys.stdout)
    return rc


if __name__ == '__main__':
    sys.exit(main())
