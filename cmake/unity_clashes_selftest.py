#!/usr/bin/env python3
"""Self-test of cmake/unity_clashes.py (CTest: unity_clashes_selftest): the clashes a unity
build fails on are reported, with file:line, and the legal repeats are not."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
A = '''#include <chrono>
#define LOCAL_MACRO 1
#undef LOCAL_MACRO
#define SHARED_MACRO 1
namespace gpool::cli {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
constexpr int kLimit = 3;
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
struct Fixture {
  int x = 0;
  void Helper() {}
};
int Only_in_a(int x) {
  int local = x;  // function scope: never a clash
  return local;
}

}  // namespace
static int Counter = 0;
}  // namespace gpool::cli
'''
B = '''#define SHARED_MACRO 2
namespace gpool::cli {
namespace {
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
constexpr int kLimit = 3;
void OnSignal(int) {}
class Fixture {
 public:
  void Helper();
};
class Impl final : public Base {
 public:
  void Helper();
};
int Only_in_b(int y) {
  int local = y;
  return local;
}
}  // namespace
}  // namespace gpool::cli
namespace gpool::fabric {
namespace {
std::atomic<bool> g_stop{false};  // other namespace: no clash
using Clock = std::chrono::system_clock;
}  // namespace
static int Counter = 1;  // gpool::fabric, not gpool::cli
}  // namespace gpool::fabric
'''
C = '''namespace gpool::cli {
namespace {
using Clock = std::chrono::system_clock;  // another type under the same alias: a clash
}  // namespace
}  // namespace gpool::cli
'''
with tempfile.TemporaryDirectory() as d:
    paths = []
    for name, text in (('a.cc', A), ('b.cc', B), ('c.cc', C)):
        paths.append(os.path.join(d, name))
        open(paths[-1], 'w').write(text)
    r = subprocess.run([sys.executable, os.path.join(HERE, 'unity_clashes.py'), '--files'] + paths,
                       capture_output=True, text=True)
    out = r.stdout.replace(os.path.relpath(d) + '/', '')
    print(out)
    expected = ['gpool::cli::{anon}::kLimit: a.cc:10 b.cc:6',
                'gpool::cli::{anon}::OnSignal: a.cc:12 b.cc:7',
                'gpool::cli::{anon}::Fixture: a.cc:13 b.cc:8',
                'gpool::cli::{anon}::Clock: a.cc:9 b.cc:5 c.cc:3',
                'SHARED_MACRO: a.cc:4 b.cc:1']
    absent = ['Base', 'Impl', 'HasSubstr', 'g_stop', 'Only_in', 'local', 'Helper', 'LOCAL_MACRO', 'Counter', 'x:']
    bad = [e for e in expected if e not in out] + [a for a in absent if a in out]
    if r.returncode != 1:
        bad.append(f'exit status {r.returncode}, want 1')
    if 'files: ' not in out or out.count('files: ') != len(expected):
        bad.append(f'{out.count("files: ")} clashes reported, want {len(expected)}')
    # Two files that differ only in the type behind one alias clash too.
    r2 = subprocess.run([sys.executable, os.path.join(HERE, 'unity_clashes.py'), '--files',
                         paths[0], paths[0].replace('a.cc', 'c.cc')], capture_output=True, text=True)
    if 'Clock' not in r2.stdout:
        bad.append('a.cc + c.cc: Clock (different types) not reported')
    if bad:
        print('unity_clashes_selftest FAILED:\n  ' + '\n  '.join(bad))
        sys.exit(1)
    print('unity_clashes_selftest: ok')
