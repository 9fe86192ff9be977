#include "control/etcd_store.h"

#include <fmt/format.h>
#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <thread>

namespace gpool::control {
namespace {

using nlohmann::json;

constexpr size_t kEtcdWatchBatch = 1000;  // events returned by one Watcher::Next at most

// Store revision <-> etcd revision (etcd_store.h: a fresh etcd is at 1, a fresh store at 0).
int64_t ToEtcd(Revision r) { return r + 1; }
Revision FromEtcd(int64_t e) { return e > 0 ? e - 1 : 0; }

std::string B64(std::string_view s) { return Base64Encode(s); }

// etcd's range for "every key with this prefix": [prefix, PrefixEnd) with "\0" meaning "no
// bound" on either side.
void SetPrefixRange(json* j, std::string_view prefix) {
  std::string end = PrefixEnd(prefix);
  (*j)["key"] = B64(prefix.empty() ? std::string_view("\0", 1) : prefix);
  (*j)["range_end"] = B64(end.empty() ? std::string("\0", 1) : end);
}

StatusOr<KeyValue> ParseKv(const json& kv) {
  KeyValue out;
  GPOOL_ASSIGN_OR_RETURN(out.key, JsonBytes(kv, "key"));
  GPOOL_ASSIGN_OR_RETURN(out.value, JsonBytes(kv, "value"));
  out.create_revision = FromEtcd(JsonInt(kv, "create_revision"));
  out.mod_revision = FromEtcd(JsonInt(kv, "mod_revision"));
  out.version = JsonInt(kv, "version");
  return out;
}

Revision HeaderRevision(const json& answer) {
  auto h = answer.find("header");
  return h == answer.end() ? 0 : FromEtcd(JsonInt(*h, "revision"));
}

bool IsCompacted(const Status& s) {
  return s.code() == StatusCode::kFailedPrecondition &&
         s.message().find("compacted") != std::string::npos;
}

}  // namespace

// One watch stream, read by its own thread into a queue that Next drains.
class EtcdStore::EtcdWatcher final : public Watcher {
 public:
  EtcdWatcher(EtcdClient* client, std::string prefix, int64_t start_etcd_rev,
              std::shared_ptr<std::atomic<Revision>> compacted)
      : client_(client), prefix_(std::move(prefix)), next_(start_etcd_rev),
        compacted_(std::move(compacted)) {
    thread_ = std::thread([this] { Run(); });
  }

  ~EtcdWatcher() override {
    stop_ = true;
    // stop() interrupts a blocked read; repeat it in case the thread was between requests.
    for (;;) {
      {
        std::unique_lock<std::mutex> l(mu_);
        if (done_) break;
        if (conn_ != nullptr) conn_->stop();
        cv_.wait_for(l, std::chrono::milliseconds(20), [this] { return done_; });
      }
    }
    thread_.join();
  }

  StatusOr<std::vector<WatchEvent>> Next(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, timeout, [this] { return !events_.empty() || !error_.ok(); });
    if (!events_.empty()) {
      Revision c = compacted_->load();
      if (events_.front().kv.mod_revision <= c) {
        error_ = Status::FailedPrecondition(fmt::format(
            "watch fell behind: the events it needs (from revision {}) were compacted at {}",
            events_.front().kv.mod_revision, c));
        events_.clear();
        return error_;
      }
      std::vector<WatchEvent> out;
      while (!events_.empty() && out.size() < kEtcdWatchBatch) {
        out.push_back(std::move(events_.front()));
        events_.pop_front();
      }
      return out;
    }
    if (!error_.ok()) return error_;
    return std::vector<WatchEvent>{};
  }

 private:
  // Handles one watch response line; false = the watch is over (error_ set).
  bool HandleLine(std::string_view line) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return true;  // not ours to judge; reconnect fixes it
    auto rit = j.find("result");
    if (rit == j.end()) return true;  // a stream error object: reconnect
    const json& r = *rit;
    int64_t compact = JsonInt(r, "compact_revision");
    if (compact > 0) {
      Fail(Status::FailedPrecondition(fmt::format(
          "watch of '{}' from revision {}: history was compacted at revision {}", prefix_,
          FromEtcd(next_), FromEtcd(compact) - 1)));
      return false;
    }
    if (r.value("canceled", false)) {
      Fail(Status::Unavailable(fmt::format("watch of '{}' cancelled by etcd: {}", prefix_,
                                           r.value("cancel_reason", std::string("?")))));
      return false;
    }
    auto evs = r.find("events");
    if (evs == r.end() || !evs->is_array() || evs->empty()) return true;
    std::vector<WatchEvent> batch;
    int64_t last = next_ - 1;
    for (const json& e : *evs) {
      WatchEvent ev;
      ev.type = e.value("type", std::string("PUT")) == "DELETE" ? WatchEvent::Type::kDelete
                                                                 : WatchEvent::Type::kPut;
      auto kv = ParseKv(e.value("kv", json::object()));
      if (!kv.ok()) {
        Fail(kv.status());
        return false;
      }
      ev.kv = std::move(*kv);
      if (ev.type == WatchEvent::Type::kDelete) {
        ev.kv.value.clear();
        ev.kv.version = 0;
        ev.kv.create_revision = 0;
      }
      last = std::max(last, ToEtcd(ev.kv.mod_revision));
      batch.push_back(std::move(ev));
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& ev : batch) events_.push_back(std::move(ev));
    }
    // etcd sends all events of one revision in one response, so resuming after `last` neither
    // loses nor repeats any.
    next_ = last + 1;
    cv_.notify_all();
    return true;
  }

  void Fail(Status s) {
    std::lock_guard<std::mutex> l(mu_);
    error_ = std::move(s);
    cv_.notify_all();
  }

  void Run() {
    size_t ep = client_->preferred();
    const size_t n = client_->endpoints().size();
    bool over = false;
    while (!stop_ && !over) {
      auto conn = client_->NewConnection(ep);
      // An idle stream is re-established after this long; it also bounds a missed stop().
      conn->set_read_timeout(std::chrono::seconds(10));
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stop_) break;
        conn_ = conn.get();
      }
      json create = json::object();
      SetPrefixRange(&create, prefix_);
      create["start_revision"] = std::to_string(next_);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v3/watch";
      req.body = json{{"create_request", create}}.dump();
      req.set_header("Content-Type", "application/json");
      std::string buf;
      req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
        buf.append(data, len);
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
          std::string line = buf.substr(0, nl);
          buf.erase(0, nl + 1);
          if (!line.empty() && !HandleLine(line)) {
            over = true;
            return false;
          }
        }
        return !stop_.load();
      };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      bool ok = conn->send(req, res, err);
      {
        std::lock_guard<std::mutex> l(mu_);
        conn_ = nullptr;
      }
      if (stop_ || over) break;
      // The stream ended: idle timeout (same member) or a dead member (try the next one).
      if (!ok && (err == httplib::Error::Connection || err == httplib::Error::ConnectionTimeout)) {
        ep = (ep + 1) % n;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      } else if (!ok && err != httplib::Error::Read) {
        ep = (ep + 1) % n;
      }
    }
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
    cv_.notify_all();
  }

  EtcdClient* const client_;
  const std::string prefix_;
  int64_t next_;  // etcd revision to resume from; the reader thread's
  std::shared_ptr<std::atomic<Revision>> compacted_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<WatchEvent> events_;  // mu_
  Status error_;                   // mu_
  httplib::Client* conn_ = nullptr;  // mu_: the stream being read, for stop()
  bool done_ = false;                // mu_
};

StatusOr<std::unique_ptr<Store>> EtcdStore::Open(std::string_view endpoints,
                                                 const StoreOptions& options) {
  auto eps = ParseEtcdEndpoints(endpoints);
  if (!eps.ok()) return eps.status().WithContext(fmt::format("store URL etcd://{}", endpoints));
  auto client = std::make_unique<EtcdClient>(std::move(*eps), EtcdClientOptions{});
  std::unique_ptr<EtcdStore> store(new EtcdStore(std::move(client), options));
  // Fail now, by name, when no member answers (rather than on the first write).
  auto rev = store->CurrentRevision();
  if (!rev.ok()) return rev.status().WithContext("opening the etcd store");
  return std::unique_ptr<Store>(std::move(store));
}

EtcdStore::EtcdStore(std::unique_ptr<EtcdClient> client, const StoreOptions& options)
    : client_(std::move(client)), options_(options),
      compacted_(std::make_shared<std::atomic<Revision>>(0)) {}

EtcdStore::~EtcdStore() = default;

StatusOr<TxnResult> EtcdStore::Txn(const TxnRequest& request) {
  GPOOL_RETURN_IF_ERROR(ValidateTxnRequest(request, options_));
  json compare = json::array();
  for (const Compare& c : request.compares) {
    compare.push_back({{"key", B64(c.key)},
                       {"target", "MOD"},
                       {"result", "EQUAL"},
                       {"mod_revision", std::to_string(c.mod_revision == 0 ? 0 : ToEtcd(c.mod_revision))}});
  }
  json success = json::array();
  for (const Op& op : request.ops) {
    switch (op.type) {
      case Op::Type::kPut:
        success.push_back({{"request_put", {{"key", B64(op.key)}, {"value", B64(op.value)}}}});
        break;
      case Op::Type::kDelete:
        success.push_back({{"request_delete_range", {{"key", B64(op.key)}}}});
        break;
      case Op::Type::kDeletePrefix: {
        json d = json::object();
        SetPrefixRange(&d, op.key);
        success.push_back({{"request_delete_range", d}});
        break;
      }
    }
  }
  json body = {{"compare", compare}, {"success", success}};
  // A read-only Txn (no ops) may be retried on another member; a write may not (etcd_client.h).
  GPOOL_ASSIGN_OR_RETURN(json answer, client_->Call("/v3/kv/txn", body, request.ops.empty()));
  TxnResult r;
  r.succeeded = answer.value("succeeded", false);
  r.revision = HeaderRevision(answer);
  return r;
}

StatusOr<std::optional<KeyValue>> EtcdStore::Get(std::string_view key) {
  if (key.empty()) return Status::InvalidArgument("get: empty key");
  GPOOL_ASSIGN_OR_RETURN(json answer, client_->Call("/v3/kv/range", json{{"key", B64(key)}}, true));
  auto kvs = answer.find("kvs");
  if (kvs == answer.end() || !kvs->is_array() || kvs->empty()) return std::optional<KeyValue>();
  GPOOL_ASSIGN_OR_RETURN(KeyValue kv, ParseKv((*kvs)[0]));
  return std::optional<KeyValue>(std::move(kv));
}

StatusOr<RangeResult> EtcdStore::Range(std::string_view prefix, const RangeOptions& options) {
  if (options.limit < 0) {
    return Status::InvalidArgument(fmt::format("range: limit must be >= 0, got {}", options.limit));
  }
  json body = json::object();
  SetPrefixRange(&body, prefix);
  if (options.limit > 0) body["limit"] = std::to_string(options.limit);
  GPOOL_ASSIGN_OR_RETURN(json answer, client_->Call("/v3/kv/range", body, true));
  RangeResult r;
  r.revision = HeaderRevision(answer);
  r.more = answer.value("more", false);
  auto kvs = answer.find("kvs");
  if (kvs != answer.end() && kvs->is_array()) {
    for (const json& kv : *kvs) {
      GPOOL_ASSIGN_OR_RETURN(KeyValue x, ParseKv(kv));
      r.kvs.push_back(std::move(x));
    }
  }
  return r;
}

StatusOr<Revision> EtcdStore::CurrentRevision() {
  // Any read carries the store revision in its header; a count-only read of one key is cheapest.
  json body = {{"key", B64(std::string_view("\0", 1))}, {"count_only", true}};
  GPOOL_ASSIGN_OR_RETURN(json answer, client_->Call("/v3/kv/range", body, true));
  return HeaderRevision(answer);
}

StatusOr<std::unique_ptr<Watcher>> EtcdStore::Watch(std::string_view prefix,
                                                    Revision from_revision) {
  if (from_revision < 0) {
    return Status::InvalidArgument(fmt::format("watch: negative from_revision {}", from_revision));
  }
  int64_t start = 0;
  if (from_revision == 0) {
    GPOOL_ASSIGN_OR_RETURN(Revision cur, CurrentRevision());
    start = ToEtcd(cur) + 1;
  } else {
    Status gone = Status::FailedPrecondition(fmt::format(
        "watch of '{}' from revision {}: that history was compacted", prefix, from_revision));
    if (from_revision <= compacted_->load()) return gone;
    // etcd keeps its compaction revision readable, the Store contract does not: the watch is
    // valid iff a read at etcd revision ToEtcd(from_revision - 1) is (etcd_store.h).
    json probe = {{"key", B64(std::string_view("\0", 1))},
                  {"count_only", true},
                  {"revision", std::to_string(ToEtcd(from_revision - 1))}};
    auto r = client_->Call("/v3/kv/range", probe, true);
    if (!r.ok()) {
      if (IsCompacted(r.status())) return gone;
      // A future revision is fine to watch from; anything else is a real error.
      if (r.status().message().find("future revision") == std::string::npos) return r.status();
    }
    start = ToEtcd(from_revision);
  }
  return std::unique_ptr<Watcher>(
      new EtcdWatcher(client_.get(), std::string(prefix), start, compacted_));
}

Status EtcdStore::Reclaim() {
  if (options_.history_revisions <= 0) return Status::Ok();
  GPOOL_ASSIGN_OR_RETURN(Revision now, CurrentRevision());
  Revision target = now - options_.history_revisions;
  if (target <= compacted_->load()) return Status::Ok();
  return Compact(target);
}

Status EtcdStore::Compact(Revision revision) {
  if (revision < 0) return Status::InvalidArgument(fmt::format("compact: negative revision {}", revision));
  if (revision == 0) return Status::Ok();
  auto r = client_->Call("/v3/kv/compaction", json{{"revision", std::to_string(ToEtcd(revision))}},
                         /*idempotent=*/true);
  if (!r.ok()) {
    if (r.status().message().find("future revision") != std::string::npos) {
      return Status::FailedPrecondition(
          fmt::format("compact: revision {} is in the future of the store", revision));
    }
    if (!IsCompacted(r.status())) return r.status();
    // Already compacted at or past this revision: nothing to do.
  }
  Revision prev = compacted_->load();
  while (prev < revision && !compacted_->compare_exchange_weak(prev, revision)) {
  }
  return Status::Ok();
}

Status EtcdStore::CheckIntegrity() {
  // 1. Every reachable member is healthy and members agree on the key-value history (HashKV at a
  //    revision all of them have applied).
  const size_t n = client_->endpoints().size();
  std::vector<size_t> up;
  int64_t common = -1;
  for (size_t i = 0; i < n; ++i) {
    auto s = client_->CallMember(i, "/v3/maintenance/status", json::object());
    if (!s.ok()) continue;  // a member that is down is not an integrity problem
    if (s->contains("errors") && !(*s)["errors"].empty()) {
      return Status::FailedPrecondition(fmt::format("etcd {}: member reports errors: {}",
                                                    client_->endpoints()[i].ToString(),
                                                    (*s)["errors"].dump()));
    }
    int64_t rev = s->contains("header") ? JsonInt((*s)["header"], "revision") : 0;
    common = common < 0 ? rev : std::min(common, rev);
    up.push_back(i);
  }
  if (up.empty()) {
    return Status::Unavailable(fmt::format("etcd {}: no member answered", client_->EndpointList()));
  }
  if (up.size() > 1) {
    std::optional<int64_t> first;
    for (size_t i : up) {
      auto h = client_->CallMember(i, "/v3/maintenance/hash",
                                   json{{"revision", std::to_string(common)}});
      if (!h.ok()) {
        if (IsCompacted(h.status())) return Status::Ok();  // compacted meanwhile; nothing to compare
        return h.status().WithContext("integrity: HashKV");
      }
      int64_t hash = JsonInt(*h, "hash");
      if (first.has_value() && *first != hash) {
        return Status::FailedPrecondition(fmt::format(
            "etcd {}: members disagree on the key-value hash at revision {}",
            client_->EndpointList(), common));
      }
      first = hash;
    }
  }
  // 2. The Store invariants on the current keys.
  GPOOL_ASSIGN_OR_RETURN(RangeResult all, Range("", {}));
  for (const KeyValue& kv : all.kvs) {
    if (kv.version < 1 || kv.create_revision < 1 || kv.create_revision > kv.mod_revision ||
        kv.mod_revision > all.revision) {
      return Status::FailedPrecondition(fmt::format(
          "etcd store invariant broken on a key of {} bytes: create {} mod {} version {} store {}",
          kv.key.size(), kv.create_revision, kv.mod_revision, kv.version, all.revision));
    }
  }
  return Status::Ok();
}

// ---- Leases ----

StatusOr<int64_t> EtcdStore::GrantLease(int64_t ttl_s) {
  if (ttl_s < 1) return Status::InvalidArgument(fmt::format("lease TTL must be >= 1 s, got {}", ttl_s));
  GPOOL_ASSIGN_OR_RETURN(json a, client_->Call("/v3/lease/grant",
                                               json{{"TTL", std::to_string(ttl_s)}}, false));
  int64_t id = JsonInt(a, "ID");
  if (id == 0) return Status::Internal(fmt::format("etcd lease grant: no ID in {}", a.dump()));
  return id;
}

StatusOr<int64_t> EtcdStore::KeepAlive(int64_t lease) {
  // The gateway maps the bidirectional keepalive stream to one request, one answer.
  auto a = client_->Call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}, true);
  if (!a.ok()) {
    if (a.status().code() == StatusCode::kNotFound) return 0;  // expired and gone
    return a.status();
  }
  auto r = a->find("result");
  if (r == a->end()) return Status::Internal(fmt::format("etcd keepalive: no result in {}", a->dump()));
  return JsonInt(*r, "TTL");  // absent (0): the lease is gone
}

Status EtcdStore::RevokeLease(int64_t lease) {
  auto a = client_->Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}, true);
  if (!a.ok() && a.status().code() != StatusCode::kNotFound) return a.status();
  return Status::Ok();
}

StatusOr<bool> EtcdStore::CreateWithLease(const std::string& key, const std::string& value,
                                          int64_t lease, KeyValue* holder) {
  json body = {
      {"compare", json::array({{{"key", B64(key)}, {"target", "CREATE"}, {"result", "EQUAL"},
                                {"create_revision", "0"}}})},
      {"success", json::array({{{"request_put", {{"key", B64(key)}, {"value", B64(value)},
                                                 {"lease", std::to_string(lease)}}}}})},
      {"failure", json::array({{{"request_range", {{"key", B64(key)}}}}})}};
  GPOOL_ASSIGN_OR_RETURN(json a, client_->Call("/v3/kv/txn", body, false));
  bool created = a.value("succeeded", false);
  if (created) {
    Revision rev = HeaderRevision(a);
    *holder = KeyValue{.key = key, .value = value, .create_revision = rev, .mod_revision = rev,
                       .version = 1};
    return true;
  }
  *holder = KeyValue{};
  auto resp = a.find("responses");
  if (resp != a.end() && resp->is_array() && !resp->empty()) {
    const json& rr = (*resp)[0].value("response_range", json::object());
    auto kvs = rr.find("kvs");
    if (kvs != rr.end() && kvs->is_array() && !kvs->empty()) {
      GPOOL_ASSIGN_OR_RETURN(*holder, ParseKv((*kvs)[0]));
    }
  }
  return false;
}

}  // namespace gpool::control
