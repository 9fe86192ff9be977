#include "control/store.h"

#include <fmt/format.h>

#include "control/sqlite_store.h"

namespace gpool::control {
namespace {

constexpr std::string_view kUrlForms = "expected sqlite:PATH or etcd://HOST:PORT";

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
    return Status::Unimplemented(fmt::format(
        "store URL '{}': the etcd v3 backend is not implemented yet (later issue \"Control plane: "
        "etcd store\"); use sqlite:PATH",
        url));
  }
  return Status::InvalidArgument(
      fmt::format("store URL '{}' has unknown scheme '{}'; {}", url, scheme, kUrlForms));
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
