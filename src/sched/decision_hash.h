// A fingerprint of a cycle's Decisions, so that a speed-up can be checked to decide exactly as
// before: sched_bench reports it as a counter and tests compare optimized and reference runs.
//
// Covers everything a caller acts on, in order: binds (job, every task's node, GPU mask, milli
// and GPU memory, backfilled), preemptions (victim, for_job, reason), power actions and
// reservations (job, start, nodes). FNV-1a over the fields; not for security, collisions are
// merely unlikely. Reported as a double counter by the bench, so it folds to 52 bits there.
//
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <string_view>

#include "sched/types.h"

namespace gpool::sched {

class DecisionHasher {
 public:
  void Add(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h_ ^= (v >> (8 * i)) & 0xff;
      h_ *= 0x100000001b3ull;
    }
  }
  void Add(std::string_view s) {
    Add(s.size());
    for (char c : s) {
      h_ ^= static_cast<uint8_t>(c);
      h_ *= 0x100000001b3ull;
    }
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

inline uint64_t HashDecisions(const Decisions& d) {
  DecisionHasher h;
  h.Add(d.binds.size());
  for (const BindDecision& b : d.binds) {
    h.Add(b.job.value());
    h.Add(b.backfilled ? 1 : 0);
    h.Add(b.placement.tasks.size());
    for (const TaskBinding& t : b.placement.tasks) {
      h.Add(t.node.value());
      h.Add(t.gpu_mask);
      h.Add(static_cast<uint64_t>(static_cast<int64_t>(t.gpu_milli)));
      h.Add(t.gpu_memory_bytes);
    }
  }
  h.Add(d.preemptions.size());
  for (const PreemptDecision& p : d.preemptions) {
    h.Add(p.victim.value());
    h.Add(p.for_job.value());
    h.Add(p.reason);
  }
  h.Add(d.power.size());
  for (const PowerDecision& p : d.power) {
    h.Add(p.node.value());
    h.Add(static_cast<uint64_t>(p.target));
    h.Add(static_cast<uint64_t>(p.ready_ns));
  }
  h.Add(d.reservations.size());
  for (const Reservation& r : d.reservations) {
    h.Add(r.job.value());
    h.Add(static_cast<uint64_t>(r.start_ns));
    h.Add(r.nodes.size());
    for (NodeId n : r.nodes) h.Add(n.value());
  }
  return h.value();
}

}  // namespace gpool::sched
