# Sums the logs of .ci/measure/step-time.sh (one line a build step: user sys wall maxrss_kB
# output; a step that ran again, e.g. after a fix, counts once, its last run).
#   python3 .ci/measure/step-cpu.py LOG [LOG...]   -> per log: steps, CPU of compiles and links,
#   the largest RSS, the 8 heaviest steps.
import sys
for log in sys.argv[1:]:
    last = {}
    for line in open(log):
        p = line.split(None, 4)
        if len(p) != 5 or not p[0].replace('.', '').isdigit():
            continue  # GNU time's "Command exited with non-zero status" lines
        last[p[4].strip()] = (float(p[0]), float(p[1]), float(p[2]), int(p[3]))
    comp = {o: v for o, v in last.items() if o.endswith('.o')}
    link = {o: v for o, v in last.items() if not o.endswith('.o')}
    cpu = lambda d: sum(u + s for u, s, _, _ in d.values())
    rss = max(last.items(), key=lambda kv: kv[1][3])
    print(f'{log}: {len(comp)} compiles {cpu(comp):.1f} s CPU, {len(link)} links {cpu(link):.1f} s CPU, '
          f'total {cpu(last):.1f} s; largest RSS {rss[1][3] / 1024:.0f} MB ({rss[0]})')
    for o, (u, s, e, m) in sorted(last.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:8]:
        print(f'  {u + s:7.1f} s  {m / 1024:5.0f} MB  {o}')
