// Durable Txn throughput of the SQLite store: job submits (create-if-absent of /jobs/<id> with a
// ~400-byte JSON spec) from 1, 8 and 64 concurrent writers, with group commit and with one fsync
// per Txn (the peer), plus the raw fsync rate of the same disk as the ceiling for the latter.
//
//   build-store/bench/store_bench --benchmark_min_time=2
//
// Store files go to $TMPDIR (default /tmp); it must be on a real disk for the numbers to mean
// anything (on tmpfs fsync is free).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "control/sqlite_store.h"
#include "control/store.h"

namespace gpool::control {
namespace {

std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "gpool-store-bench-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) std::abort();
  return tmpl;
}

const std::string& JobSpec() {
  static const std::string spec = [] {
    std::string s = R"({"tenant":"ml-research","queue":"default","gang":8,"gpus_per_task":1,)"
                    R"("cpu_milli":8000,"mem_bytes":68719476736,"image":"registry/train:latest",)"
                    R"("command":["python","train.py","--epochs","90"],"priority":100,"labels":{)";
    while (s.size() < 380) s += R"("k":"v",)";
    s += R"("end":"1"}})";
    return s;
  }();
  return spec;
}

// Args: writers, group_commit (1/0). Each iteration submits `round` jobs shared by the writers.
// With group commit the round is 32 Txns per writer so that the ramp at its start and the tail at
// its end (small batches) do not dominate; one fsync per Txn has no such effect.
void BM_DurableJobSubmit(benchmark::State& state) {
  const int writers = static_cast<int>(state.range(0));
  const bool group = state.range(1) != 0;
  const int round = group ? std::max(256, 32 * writers) : 256;
  std::string dir = TempDir();
  auto opened = OpenStore("sqlite:" + dir + "/state.db", {.group_commit = group});
  if (!opened.ok()) {
    state.SkipWithError(opened.status().ToString().c_str());
    return;
  }
  auto* store = dynamic_cast<SqliteStore*>(opened->get());
  std::atomic<int64_t> next_id{0};
  std::atomic<bool> failed{false};
  int64_t submitted = 0;
  int64_t commits_before = store->commits();
  for (auto _ : state) {
    std::atomic<int> left{round};
    std::vector<std::thread> threads;
    for (int w = 0; w < writers; ++w) {
      threads.emplace_back([&] {
        while (left.fetch_sub(1) > 0) {
          std::string key = keys::Job("j" + std::to_string(next_id.fetch_add(1)));
          auto r = store->Txn(TxnRequest().If(Compare::Absent(key)).Put(key, JobSpec()));
          if (!r.ok() || !r->succeeded) failed = true;
        }
      });
    }
    for (auto& t : threads) t.join();
    submitted += round;
  }
  if (failed) state.SkipWithError("a submit failed");
  state.SetItemsProcessed(submitted);
  state.counters["txn_per_fsync"] =
      static_cast<double>(submitted) / static_cast<double>(store->commits() - commits_before);
  opened->reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_DurableJobSubmit)
    ->ArgNames({"writers", "group"})
    ->ArgsProduct({{1, 8, 64}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The disk's own limit: overwrite 4 KiB in a preallocated file and fdatasync, one at a time
// (like a WAL that is reused after a checkpoint, so no file-size change forces an ext4 journal
// commit). One fsync per Txn cannot beat this rate; group commit can, by sharing each fsync.
void BM_RawFdatasync(benchmark::State& state) {
  std::string dir = TempDir();
  std::string path = dir + "/raw";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  constexpr int kBlocks = 256;
  std::string block(4096, 'x');
  bool ok = fd >= 0;
  for (int i = 0; ok && i < kBlocks; ++i) {
    ok = ::write(fd, block.data(), block.size()) == static_cast<ssize_t>(block.size());
  }
  if (!ok || ::fsync(fd) != 0) {
    state.SkipWithError("cannot preallocate the scratch file");
    if (fd >= 0) ::close(fd);
    return;
  }
  int64_t i = 0;
  for (auto _ : state) {
    off_t at = static_cast<off_t>((i++ % kBlocks) * 4096);
    if (::pwrite(fd, block.data(), block.size(), at) != static_cast<ssize_t>(block.size()) ||
        ::fdatasync(fd) != 0) {
      state.SkipWithError("pwrite/fdatasync failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  ::close(fd);
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_RawFdatasync)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpool::control

BENCHMARK_MAIN();
