// Child process of crash_test.cc: writes to a store as fast as it can from several threads and
// reports each acknowledged Txn on stdout, until it is killed.
//
//   store_crash_writer URL THREADS
//
// Thread t's i-th Txn creates /jobs/t-i and moves /seq/t from i-1 to i, both guarded by compares,
// so the parent can tell from /seq/t exactly which Txns were applied. It resumes from /seq/t, so
// it can be run again on a recovered store. Each ack is one write(2) of one line ("t i\n"), which
// a pipe delivers whole even if the process dies right after.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "control/store.h"

using namespace gpool::control;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "store_crash_writer: %s\n", what.c_str());
  std::_Exit(2);
}

void Run(Store* store, int t) {
  std::string seq_key = "/seq/" + std::to_string(t);
  auto seq = store->Get(seq_key);
  if (!seq.ok()) Die(seq.status().ToString());
  long next = seq->has_value() ? std::stol((*seq)->value) + 1 : 0;
  Revision seq_rev = seq->has_value() ? (*seq)->mod_revision : 0;
  std::string payload(200, 'p');
  for (;; ++next) {
    std::string job = keys::Job(std::to_string(t) + "-" + std::to_string(next));
    auto r = store->Txn(TxnRequest()
                            .If(Compare::Absent(job))
                            .If(Compare::ModRevisionIs(seq_key, seq_rev))
                            .Put(job, payload)
                            .Put(seq_key, std::to_string(next)));
    if (!r.ok()) Die(r.status().ToString());
    if (!r->succeeded) Die("compare failed for " + job + ": the store lost or repeated a write");
    seq_rev = r->revision;
    std::string line = std::to_string(t) + " " + std::to_string(next) + "\n";
    if (write(STDOUT_FILENO, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      Die("write to stdout failed");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) Die("usage: store_crash_writer URL THREADS");
  auto store = OpenStore(argv[1]);
  if (!store.ok()) Die(store.status().ToString());
  int threads = std::atoi(argv[2]);
  if (threads < 1) Die(std::string("bad THREADS: ") + argv[2]);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) workers.emplace_back(Run, store->get(), t);
  for (auto& w : workers) w.join();  // never: the parent kills us
  return 0;
}
