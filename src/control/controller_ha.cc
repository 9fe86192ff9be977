// The controller's high-availability parts (controller.h, leader.h): the leadership gate's
// answer, fenced-commit failures, taking over and stepping down, and the standby's watch.
#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include "common/log.h"
#include "control/allocations.h"
#include "control/controller.h"
#include "control/records.h"

namespace gpool::control {

void Controller::SetAdvertiseAddress(const std::string& address) { advertise_ = address; }

Status Controller::NotLeader() const {
  std::string leader = election_ != nullptr ? election_->leader() : "";
  if (leader.empty() || leader == advertise_) {
    return Status::Unavailable("not the leader; no leader is known yet (election in progress)");
  }
  return Status::Unavailable(fmt::format("not the leader; the leader is at {}", leader));
}

Status Controller::FencedCommitFailed(const Status& error, bool compares_failed) {
  // Either the fence compare failed (the leader key is gone or another controller's) and nothing
  // was written, or the outcome is unknown. Both end this term: memory may be ahead of the
  // store. Stepping down fails the queued changes, re-reads the store and campaigns again.
  leading_ = false;
  election_->LostLeadership();
  if (compares_failed) {
    return Status::Unavailable(
        "not the leader: this controller lost its leadership (its fenced write was refused)");
  }
  return error.WithContext("not the leader any more: the store commit's outcome is unknown");
}

void Controller::DiscardQueuedCommitsLocked() {
  std::unique_lock<std::mutex> cl(commit_mu_);
  commit_cv_.wait(cl, [this] { return !committing_; });
  if (enqueued_seq_ > durable_seq_) discarded_.emplace_back(durable_seq_, enqueued_seq_);
  // The waiters of discarded commits fail by their range. One more sequence number, outside
  // every range, is durable at once: readers wait for "the last enqueued", which must not be a
  // discarded one. The next term's commits are waited for from there.
  durable_seq_ = ++enqueued_seq_;
  commit_queue_.clear();
  broken_ = Status::Ok();
  commit_cv_.notify_all();
}

void Controller::OnLeadership(bool leading, Revision fence) {
  {
    std::lock_guard<std::mutex> l(mu_);
    DiscardQueuedCommitsLocked();
    {
      std::lock_guard<std::mutex> cl(commit_mu_);  // no commit runs now (just waited for that)
      fence_ = leading ? fence : 0;
    }
    if (leading) {
      // Everything the previous leader committed is below our fence revision (its writes after
      // losing the key fail), so one read now sees all of it.
      Status s = RecoverLocked();
      if (!s.ok()) {
        GPOOL_LOG_ERROR("new leader could not read the store: {}", s.ToString());
        election_->LostLeadership();
        return;
      }
      leading_ = true;
      GPOOL_LOG_INFO("controller {}: leading with {} nodes, {} jobs", advertise_, nodes_.size(),
                     jobs_.size());
    } else {
      leading_ = false;
      Status s = RecoverLocked();  // restart following from what is durable
      if (!s.ok()) GPOOL_LOG_WARN("standby could not re-read the store: {}", s.ToString());
    }
  }
  cv_.notify_all();  // a new leader schedules at once
}

void Controller::ApplyEvent(const WatchEvent& ev) {
  const std::string& key = ev.kv.key;
  auto parse = [&](google::protobuf::Message* m) {
    auto s = google::protobuf::util::JsonStringToMessage(ev.kv.value, m);
    if (!s.ok()) GPOOL_LOG_WARN("standby: store key {}: {}", key, s.ToString());
    return s.ok();
  };
  if (key.starts_with(keys::kJobs)) {
    std::string id = key.substr(keys::kJobs.size());
    if (ev.type == WatchEvent::Type::kDelete) {
      auto it = jobs_.find(id);
      if (it != jobs_.end()) {  // retention archived it (or an operator deleted it)
        for (const std::string& n : JobNodeNames(it->second)) node_jobs_[n].erase(id);
        request_ids_.erase(it->second.client_request_id());
        if (it->second.state() == "pending") --pending_jobs_;
        jobs_.erase(it);
      }
      return;
    }
    v1::Job j;
    if (!parse(&j)) return;
    if (Status bad = ValidateJobRecord(key, j); !bad.ok()) {  // records.h
      GPOOL_LOG_WARN("standby: {} (ignored)", bad.message());
      return;
    }
    next_job_ = std::max<uint64_t>(next_job_, std::stoull(j.id().substr(1)) + 1);
    if (!j.client_request_id().empty()) request_ids_[j.client_request_id()] = j.id();
    SetJobLocked(std::move(j));
  } else if (key == keys::kArchiveMeta) {  // retention: the leader archived or trimmed
    if (ev.type != WatchEvent::Type::kPut) return;
    if (Status bad = ApplyArchiveMetaLocked(ev.kv); !bad.ok()) {
      GPOOL_LOG_WARN("standby: {} (ignored)", bad.message());
    }
  } else if (key.starts_with(keys::kNodes)) {
    std::string name = key.substr(keys::kNodes.size());
    if (ev.type == WatchEvent::Type::kDelete) {
      nodes_.erase(name);
      return;
    }
    v1::Node n;
    if (!parse(&n)) return;
    if (Status bad = ValidateNodeRecord(key, n); !bad.ok()) {
      GPOOL_LOG_WARN("standby: {} (ignored)", bad.message());
      return;
    }
    n.set_last_heartbeat_ms(NowMs());  // heartbeats go to the leader; a standby trusts the store
    n.set_state("ready");
    nodes_[n.name()] = std::move(n);
  }
}

void Controller::FollowLoop() {
  std::unique_ptr<Watcher> watcher;
  uint64_t gen = 0;
  while (!stop_) {
    Revision from = 0;
    {
      std::unique_lock<std::mutex> l(mu_);
      if (leading_) {
        watcher.reset();  // the leader's memory is the source; its own events would lag it
        cv_.wait_for(l, std::chrono::milliseconds(100), [this] { return stop_.load(); });
        continue;
      }
      if (watcher == nullptr || gen != follow_gen_) {
        watcher.reset();
        gen = follow_gen_;
        from = follow_from_;
      }
    }
    if (watcher == nullptr) {
      auto w = store_->Watch("/", from);
      if (!w.ok()) {
        GPOOL_LOG_WARN("standby watch from revision {}: {}", from, w.status().ToString());
        std::unique_lock<std::mutex> l(mu_);
        if (w.status().code() == StatusCode::kFailedPrecondition) (void)RecoverLocked();
        cv_.wait_for(l, std::chrono::milliseconds(200), [this] { return stop_.load(); });
        continue;
      }
      watcher = std::move(*w);
    }
    auto events = watcher->Next(std::chrono::milliseconds(200));
    std::unique_lock<std::mutex> l(mu_);
    if (!events.ok()) {
      GPOOL_LOG_WARN("standby watch: {}", events.status().ToString());
      watcher.reset();
      // Compacted past us, or etcd trouble: re-list, then watch again.
      if (!RecoverLocked().ok()) {
        cv_.wait_for(l, std::chrono::milliseconds(200), [this] { return stop_.load(); });
      }
      continue;
    }
    if (leading_ || gen != follow_gen_) continue;  // state was re-read meanwhile
    for (const WatchEvent& ev : *events) {
      ApplyEvent(ev);
      follow_from_ = ev.kv.mod_revision + 1;
    }
  }
}

}  // namespace gpool::control
