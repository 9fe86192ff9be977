// Crash recovery, for real: a child process (store_crash_writer) commits Txns from several
// threads and reports each acknowledged one on a pipe; we kill -9 it mid-burst, reopen the store
// and check that every acknowledged Txn is there, applied exactly once, and that the file passes
// SQLite's integrity_check and the store's own invariants. Repeated over several kill/recover
// rounds on the same store, so recovery of an already-recovered store is covered too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "control/store.h"
#include "control/store_test_util.h"

namespace gpool::control {
namespace {

constexpr int kThreads = 8;

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of the child's stdout
};

Child Spawn(const std::string& url) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    std::string threads = std::to_string(kThreads);
    execl(GPOOL_CRASH_WRITER, GPOOL_CRASH_WRITER, url.c_str(), threads.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  return {pid, fds[0]};
}

// Parses complete "t i" lines out of `buf` into max_acked; keeps a trailing partial line.
void ParseAcks(std::string* buf, std::map<int, long>* max_acked, long* count) {
  size_t start = 0;
  for (size_t nl; (nl = buf->find('\n', start)) != std::string::npos; start = nl + 1) {
    std::istringstream line(buf->substr(start, nl - start));
    int t;
    long i;
    ASSERT_TRUE(line >> t >> i) << "bad ack line";
    long& m = (*max_acked)[t];
    m = std::max(m, i);
    ++*count;
  }
  buf->erase(0, start);
}

class StoreCrashTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir("store_crash"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(StoreCrashTest, KillNineLosesNoAcknowledgedTxnAndRepeatsNone) {
  const std::string url = "sqlite:" + dir_ + "/state.db";
  std::map<int, long> max_acked;  // per writer thread, over all rounds
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Child child = Spawn(url);
    ASSERT_GT(child.pid, 0);
    // Let it get well into its burst (a varying amount per round), then kill it mid-stream.
    const long kill_after = 150 + 120 * round;
    std::string buf;
    long acks = 0;
    char chunk[4096];
    while (acks < kill_after) {
      ssize_t n = read(child.out, chunk, sizeof(chunk));
      ASSERT_GT(n, 0) << "writer exited early (see its stderr above)";
      buf.append(chunk, n);
      ParseAcks(&buf, &max_acked, &acks);
    }
    ASSERT_EQ(kill(child.pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child.pid, &status, 0), child.pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "writer died on its own, status " << status;
    // Acks written before the kill are still in the pipe.
    for (ssize_t n; (n = read(child.out, chunk, sizeof(chunk))) > 0;) buf.append(chunk, n);
    ParseAcks(&buf, &max_acked, &acks);
    close(child.out);

    auto opened = OpenStore(url);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    Store& store = **opened;
    Status integrity = store.CheckIntegrity();
    ASSERT_TRUE(integrity.ok()) << integrity.ToString();

    long applied = 0;
    for (int t = 0; t < kThreads; ++t) {
      auto seq = store.Get("/seq/" + std::to_string(t));
      ASSERT_TRUE(seq.ok()) << seq.status().ToString();
      long acked = max_acked.count(t) ? max_acked[t] : -1;
      long last = seq->has_value() ? std::stol((*seq)->value) : -1;
      // Every acknowledged Txn survived; at most the one in flight at the kill is also there.
      EXPECT_GE(last, acked) << "thread " << t << " lost acknowledged Txns";
      EXPECT_LE(last, acked + 1) << "thread " << t;
      if (seq->has_value()) {
        EXPECT_EQ((*seq)->version, last + 1) << "a Txn was applied twice";
      }
      auto jobs = store.Range("/jobs/" + std::to_string(t) + "-", {});
      ASSERT_TRUE(jobs.ok());
      EXPECT_EQ(static_cast<long>(jobs->kvs.size()), last + 1) << "thread " << t;
      for (const KeyValue& kv : jobs->kvs) EXPECT_EQ(kv.version, 1) << kv.key;
      for (long i = 0; i <= acked; ++i) {
        auto kv = store.Get(keys::Job(std::to_string(t) + "-" + std::to_string(i)));
        ASSERT_TRUE(kv.ok() && kv->has_value()) << "acknowledged job " << t << "-" << i << " lost";
      }
      max_acked[t] = last;  // the next round resumes from what was applied
      applied += last + 1;
    }
    // One revision per applied Txn: none lost from the log, none doubled.
    EXPECT_EQ(*store.CurrentRevision(), applied);
  }
}

}  // namespace
}  // namespace gpool::control
