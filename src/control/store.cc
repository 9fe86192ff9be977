#include "control/store.h"

#include <fmt/format.h>

#include <algorithm>

#include "control/etcd_store.h"
#include "control/sqlite_store.h"

namespace gpool::control {
namespace {

constexpr std::string_view kUrlForms = "expected sqlite:PATH or etcd://HOST:PORT[,HOST:PORT...]";

std::string Quote(std::string_view key) {
  // Keys are bytes; show them readably in messages without dumping binary.
  std::string out;
  for (char c : key.substr(0, 200)) {
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  if (key.size() > 200) out += "...";
  return fmt::format("'{}'", out);
}

}  // namespace

StatusOr<Revision> Store::Put(std::string key, std::string value) {
  TxnRequest req;
  req.Put(std::move(key), std::move(value));
  GPOOL_ASSIGN_OR_RETURN(TxnResult r, Txn(req));
  return r.revision;
}

StatusOr<std::unique_ptr<Store>> OpenStore(std::string_view url, const StoreOptions& options) {
  if (url.empty()) return Status::InvalidArgument(fmt::format("store URL is empty; {}", kUrlForms));
  size_t colon = url.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Status::InvalidArgument(
        fmt::format("store URL '{}' has no scheme; {}", url, kUrlForms));
  }
  std::string_view scheme = url.substr(0, colon);
  std::string_view rest = url.substr(colon + 1);
  if (scheme == "sqlite") {
    if (rest.starts_with("//")) {
      return Status::InvalidArgument(fmt::format(
          "store URL '{}': write sqlite:PATH (e.g. sqlite:/var/lib/gpool/state.db), not sqlite://",
          url));
    }
    if (rest.empty()) {
      return Status::InvalidArgument(fmt::format("store URL '{}' has an empty path", url));
    }
    if (rest.find('\0') != std::string_view::npos) {
      return Status::InvalidArgument(fmt::format("store URL path contains a NUL byte"));
    }
    if (rest == ":memory:" || rest.starts_with("file:")) {
      return Status::InvalidArgument(fmt::format(
          "store URL '{}': need a plain file path (in-memory and URI databases are not durable "
          "or not supported)",
          url));
    }
    return SqliteStore::Open(std::string(rest), options);
  }
  if (scheme == "etcd") {
    if (!rest.starts_with("//") || rest.size() == 2) {
      return Status::InvalidArgument(
          fmt::format("store URL '{}': etcd URLs look like etcd://HOST:PORT", url));
    }
    return EtcdStore::Open(rest.substr(2), options);
  }
  return Status::InvalidArgument(
      fmt::format("store URL '{}' has unknown scheme '{}'; {}", url, scheme, kUrlForms));
}

Status ValidateTxnRequest(const TxnRequest& request, const StoreOptions& options) {
  for (size_t i = 0; i < request.compares.size(); ++i) {
    const Compare& c = request.compares[i];
    if (c.key.empty()) return Status::InvalidArgument(fmt::format("txn compare {}: empty key", i));
    if (c.mod_revision < 0) {
      return Status::InvalidArgument(fmt::format("txn compare {} on {}: negative mod_revision {}",
                                                 i, Quote(c.key), c.mod_revision));
    }
  }
  std::vector<std::pair<std::string_view, size_t>> point_keys;  // (key, op index)
  std::vector<std::pair<std::string_view, size_t>> prefixes;
  for (size_t i = 0; i < request.ops.size(); ++i) {
    const Op& op = request.ops[i];
    if (op.type == Op::Type::kDeletePrefix) {
      prefixes.emplace_back(op.key, i);
      continue;
    }
    if (op.key.empty()) return Status::InvalidArgument(fmt::format("txn op {}: empty key", i));
    if (op.value.size() > options.max_value_bytes) {
      return Status::InvalidArgument(
          fmt::format("txn op {}: value of {} is {} bytes, more than the limit of {}", i,
                      Quote(op.key), op.value.size(), options.max_value_bytes));
    }
    point_keys.emplace_back(op.key, i);
  }
  std::sort(point_keys.begin(), point_keys.end());
  for (size_t i = 1; i < point_keys.size(); ++i) {
    if (point_keys[i].first == point_keys[i - 1].first) {
      return Status::InvalidArgument(fmt::format("txn ops {} and {}: key {} written twice",
                                                 point_keys[i - 1].second, point_keys[i].second,
                                                 Quote(point_keys[i].first)));
    }
  }
  for (const auto& [prefix, pi] : prefixes) {
    for (const auto& [key, ki] : point_keys) {
      if (key.starts_with(prefix) && request.ops[ki].type == Op::Type::kPut) {
        return Status::InvalidArgument(
            fmt::format("txn op {}: put of {} falls under delete-prefix {} (op {})", ki,
                        Quote(key), Quote(prefix), pi));
      }
    }
  }
  return Status::Ok();
}

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  // Drop trailing 0xff bytes (they cannot be incremented), then increment the last byte.
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) return end;
  end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}

namespace keys {

std::string Job(std::string_view id) { return fmt::format("{}{}", kJobs, id); }
std::string ArchivedJob(std::string_view id) { return fmt::format("{}{}", kArchiveJobs, id); }
std::string ArchivedRequest(std::string_view client_request_id) {
  std::string out(kArchiveRequests);
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char c : client_request_id) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}
std::string Node(std::string_view name) { return fmt::format("{}{}", kNodes, name); }
std::string Alloc(std::string_view job, std::string_view task) {
  return fmt::format("{}{}/{}", kAllocs, job, task);
}
std::string AllocsOfJob(std::string_view job) { return fmt::format("{}{}/", kAllocs, job); }
std::string Tenant(std::string_view name) { return fmt::format("{}{}", kTenants, name); }
std::string Lease(std::string_view id) { return fmt::format("{}{}", kLeases, id); }

Status CheckKeyPart(std::string_view what, std::string_view part) {
  if (part.empty()) return Status::InvalidArgument(fmt::format("{} is empty", what));
  if (part.find('/') != std::string_view::npos) {
    return Status::InvalidArgument(fmt::format("{} '{}' contains '/'", what, part));
  }
  if (part.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(fmt::format("{} contains a NUL byte", what));
  }
  return Status::Ok();
}

}  // namespace keys
}  // namespace gpool::control
