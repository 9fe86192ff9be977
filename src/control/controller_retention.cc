// Retention: finished jobs leave the controller's live state for the store's archive, and the
// archive keeps its own bound (ControllerOptions::keep_finished_jobs, keep_finished_for,
// archive_max_jobs; docs/control-plane.md "Retention").
//
// Records: /archive/jobs/ID (the job as it ended, JSON of v1::Job), /archive/requests/HEX (its
// client_request_id in hex -> ID, for idempotent submit) and /archive/meta ({"count","high"}:
// archived jobs, highest job number ever archived, so a restarted controller never reuses an
// id). A pass writes all of them with the live deletes in one store commit, then drops the jobs
// from memory: a job is always either live or durably archived, so Get and a repeated submit
// find it in one place or the other.
//
// Limits: the archive drops the earliest-submitted jobs first (keys sort by id), which for a
// job that ran long is not the earliest ended. Archiving is not a change of the job, so watchers
// get no event for it; a new watch's snapshot no longer lists it.
#include <algorithm>
#include <deque>

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "control/controller.h"
#include "control/controller_internal.h"
#include "control/records.h"

namespace gpool::control {
namespace {

// One pass archives or trims at most this many jobs, bounding one store Txn (about 3 ops a job;
// etcd must run with --max-txn-ops 10000, docs/control-plane.md). A backlog takes a few passes.
constexpr size_t kMaxJobsPerPass = 1000;
// Records removed between Store::Reclaim calls (a WAL truncation or an etcd compaction: cheap,
// but not per job).
constexpr int64_t kReclaimEvery = 5000;
constexpr int32_t kDefaultHistoryLimit = 1000;
constexpr int32_t kMaxHistoryLimit = 10000;

std::string JobJson(const v1::Job& j) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(j, &out, o);
  return out;
}

// An archived job record; Internal naming the key when it is not one.
StatusOr<v1::Job> ParseArchived(const KeyValue& kv) {
  v1::Job j;
  auto s = google::protobuf::util::JsonStringToMessage(kv.value, &j);
  if (!s.ok()) return Status::Internal(fmt::format("store key {}: {}", kv.key, s.ToString()));
  if (keys::ArchivedJob(j.id()) != kv.key) {
    return Status::Internal(fmt::format("store key {}: holds job id '{}'", kv.key, j.id()));
  }
  return j;
}

}  // namespace

Status Controller::RecoverArchiveLocked() {
  archive_count_ = 0;
  archive_high_ = 0;
  archive_used_ = false;
  GPOOL_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, store_->Get(keys::kArchiveMeta));
  if (!kv.has_value()) return Status::Ok();
  return ApplyArchiveMetaLocked(*kv);
}

Status Controller::ApplyArchiveMetaLocked(const KeyValue& kv) {
  nlohmann::json m = nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("count") || !m["count"].is_number_integer() ||
      !m.contains("high") || !m["high"].is_number_unsigned()) {
    return Status::Internal(fmt::format("store key {}: want {{\"count\":N,\"high\":N}}, got '{}'",
                                        kv.key, kv.value));
  }
  archive_count_ = m["count"].get<int64_t>();
  archive_high_ = m["high"].get<uint64_t>();
  archive_used_ = true;
  next_job_ = std::max(next_job_, archive_high_ + 1);  // ids are never reused
  return Status::Ok();
}

StatusOr<std::optional<v1::Job>> Controller::ArchivedJob(const std::string& id) {
  GPOOL_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, store_->Get(keys::ArchivedJob(id)));
  if (!kv.has_value()) return std::optional<v1::Job>();
  GPOOL_ASSIGN_OR_RETURN(v1::Job j, ParseArchived(*kv));
  return std::optional<v1::Job>(std::move(j));
}

StatusOr<std::optional<v1::Job>> Controller::ArchivedRequest(const std::string& client_request_id) {
  GPOOL_ASSIGN_OR_RETURN(std::optional<KeyValue> kv,
                         store_->Get(keys::ArchivedRequest(client_request_id)));
  if (!kv.has_value()) return std::optional<v1::Job>();
  GPOOL_RETURN_IF_ERROR(
      keys::CheckKeyPart("job id", kv->value).WithContext(fmt::format("store key {}", kv->key)));
  return ArchivedJob(kv->value);  // nullopt if trimmed meanwhile: then a new job is right
}

StatusOr<v1::ListJobsResponse> Controller::ListArchivedJobs(const v1::ListJobsRequest& req) {
  int32_t limit = req.limit() == 0 ? kDefaultHistoryLimit : req.limit();
  if (limit < 0 || limit > kMaxHistoryLimit) {
    return Status::InvalidArgument(
        fmt::format("limit: must be 0 (default {}) to {}, got {}", kDefaultHistoryLimit,
                    kMaxHistoryLimit, req.limit()));
  }
  GPOOL_ASSIGN_OR_RETURN(RangeResult all, store_->Range(keys::kArchiveJobs, {}));
  std::deque<v1::Job> newest;
  for (const KeyValue& kv : all.kvs) {
    GPOOL_ASSIGN_OR_RETURN(v1::Job j, ParseArchived(kv));
    if (!req.tenant().empty() && j.tenant() != req.tenant()) continue;
    if (!req.state().empty() && j.state() != req.state()) continue;
    newest.push_back(std::move(j));
    if (newest.size() > static_cast<size_t>(limit)) newest.pop_front();
  }
  v1::ListJobsResponse r;
  for (v1::Job& j : newest) *r.add_jobs() = std::move(j);
  return r;
}

Status Controller::RetainOnce() {
  // Passes never overlap (the loop, or a test): the archive only changes here and in recovery.
  std::lock_guard<std::mutex> rl(retain_mu_);
  const bool count_bound = options_.keep_finished_jobs >= 0;
  const bool age_bound = options_.keep_finished_for.count() > 0;
  int64_t over = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!leading_) return Status::Ok();
    over = archive_count_ - std::max<int64_t>(options_.archive_max_jobs, 0);
  }
  // The archive's earliest records beyond its bound, read outside mu_ (a store read).
  std::vector<KeyValue> trim;
  if (over > 0) {
    RangeOptions ro;
    ro.limit = std::min<int64_t>(over, kMaxJobsPerPass);
    GPOOL_ASSIGN_OR_RETURN(RangeResult r, store_->Range(keys::kArchiveJobs, ro));
    trim = std::move(r.kvs);
  }
  std::vector<std::string> archived;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!leading_) return Status::Ok();
    std::vector<std::pair<std::string, std::string>> puts;
    std::vector<std::string> deletes;
    if (count_bound || age_bound) {
      std::vector<const v1::Job*> ended;
      for (const auto& [id, j] : jobs_) {
        if (!Active(j)) ended.push_back(&j);
      }
      // Earliest ended first (ties by id): the ones beyond the count bound and the ones past the
      // age bound are then a prefix.
      std::stable_sort(ended.begin(), ended.end(), [](const v1::Job* a, const v1::Job* b) {
        return a->end_ms() < b->end_ms();
      });
      const size_t keep = count_bound ? static_cast<size_t>(options_.keep_finished_jobs) : 0;
      const size_t excess = count_bound && ended.size() > keep ? ended.size() - keep : 0;
      const int64_t cutoff = NowMs() - options_.keep_finished_for.count();
      for (size_t i = 0; i < ended.size() && archived.size() < kMaxJobsPerPass; ++i) {
        const v1::Job& j = *ended[i];
        if (i >= excess && !(age_bound && j.end_ms() <= cutoff)) break;
        puts.emplace_back(keys::ArchivedJob(j.id()), JobJson(j));
        if (!j.client_request_id().empty()) {
          puts.emplace_back(keys::ArchivedRequest(j.client_request_id()), j.id());
        }
        deletes.push_back(keys::Job(j.id()));
        archive_high_ = std::max(archive_high_, JobNumber(j.id()));
        archived.push_back(j.id());
      }
    }
    for (const KeyValue& kv : trim) {
      deletes.push_back(kv.key);
      StatusOr<v1::Job> j = ParseArchived(kv);
      if (!j.ok()) {
        GPOOL_LOG_WARN("retention: {} (deleted)", j.status().message());
      } else if (!j->client_request_id().empty()) {
        deletes.push_back(keys::ArchivedRequest(j->client_request_id()));
      }
    }
    if (archived.empty() && trim.empty()) return Status::Ok();
    archive_count_ += static_cast<int64_t>(archived.size()) - static_cast<int64_t>(trim.size());
    archive_used_ = true;
    puts.emplace_back(std::string(keys::kArchiveMeta),
                      nlohmann::json{{"count", archive_count_}, {"high", archive_high_}}.dump());
    GPOOL_ASSIGN_OR_RETURN(seq, EnqueueRawLocked(std::move(puts), std::move(deletes)));
  }
  GPOOL_RETURN_IF_ERROR(WaitDurable(seq));
  {
    // Durably archived: now they may leave memory. An ended job never changes again, and a
    // change of leader re-reads the whole state, so whatever is still here ended is the record
    // just archived.
    std::lock_guard<std::mutex> l(mu_);
    for (const std::string& id : archived) {
      auto it = jobs_.find(id);
      if (it == jobs_.end() || Active(it->second)) continue;
      auto rid = request_ids_.find(it->second.client_request_id());
      if (rid != request_ids_.end() && rid->second == id) request_ids_.erase(rid);
      jobs_.erase(it);
    }
  }
  if (!archived.empty() || !trim.empty()) {
    GPOOL_LOG_DEBUG("retention: archived {} jobs, trimmed {} from the archive", archived.size(),
                    trim.size());
  }
  removed_since_reclaim_ += static_cast<int64_t>(archived.size() + trim.size());
  if (removed_since_reclaim_ >= kReclaimEvery) {
    removed_since_reclaim_ = 0;
    if (Status s = store_->Reclaim(); !s.ok()) {
      GPOOL_LOG_WARN("retention: reclaiming store space: {}", s.ToString());
    }
  }
  return Status::Ok();
}

}  // namespace gpool::control
