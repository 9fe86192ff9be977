#include "sim/queues.h"

#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "common/file.h"
#include "common/yaml_scalar.h"

namespace gpool::sim {
namespace {

struct Ctx {
  std::string_view source;
  std::string Where(const YAML::Node& n) const {
    return fmt::format("{}:{}", source, n.Mark().line + 1);
  }
  Status Err(const YAML::Node& n, std::string_view key, const std::string& what) const {
    return YamlError(source, n, key, what);
  }
};

template <typename T>
StatusOr<T> Scalar(const Ctx& c, const YAML::Node& n, std::string_view key, const char* want) {
  return YamlScalar<T>(c.source, n, key, want);
}

// One queue's settings: a mapping (or empty, for all defaults).
StatusOr<QueueEntry> ParseEntry(const Ctx& c, const YAML::Node& n, std::string_view what) {
  QueueEntry e;
  e.where = c.Where(n);
  if (n.IsNull()) return e;
  if (!n.IsMap()) {
    return Status::InvalidArgument(fmt::format("{}: {}: want a mapping of queue settings", e.where, what));
  }
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (key == "guaranteed_gpus") {
      GPOOL_ASSIGN_OR_RETURN(e.guaranteed_gpus, Scalar<int64_t>(c, v, key, "a whole number of GPUs"));
      if (e.guaranteed_gpus < 0) return c.Err(v, key, fmt::format("must be >= 0, got {}", e.guaranteed_gpus));
    } else if (key == "guaranteed_domains") {
      if (!v.IsSequence()) return c.Err(v, key, "want a list of leaf or pod names");
      for (const auto& d : v) {
        GPOOL_ASSIGN_OR_RETURN(std::string name, Scalar<std::string>(c, d, key, "a leaf or pod name"));
        e.guaranteed_domains.push_back(std::move(name));
      }
    } else if (key == "weight") {
      GPOOL_ASSIGN_OR_RETURN(e.weight, Scalar<double>(c, v, key, "a number > 0"));
      if (!(e.weight > 0) || !std::isfinite(e.weight)) {
        return c.Err(v, key, fmt::format("must be > 0, got {}", v.Scalar()));
      }
    } else if (key == "max_gpus") {
      GPOOL_ASSIGN_OR_RETURN(e.max_gpus, Scalar<int64_t>(c, v, key, "a whole number of GPUs (-1: none)"));
      if (e.max_gpus < -1) return c.Err(v, key, fmt::format("must be >= -1, got {}", e.max_gpus));
    } else if (key == "max_running_jobs") {
      GPOOL_ASSIGN_OR_RETURN(e.max_running_jobs, Scalar<int32_t>(c, v, key, "a whole number (-1: none)"));
      if (e.max_running_jobs < -1) {
        return c.Err(v, key, fmt::format("must be >= -1, got {}", e.max_running_jobs));
      }
    } else {
      return c.Err(kv.first, key,
                   "unknown key (known: guaranteed_gpus, guaranteed_domains, weight, max_gpus, "
                   "max_running_jobs)");
    }
  }
  return e;
}

}  // namespace

StatusOr<QueueConfig> ParseQueueConfig(std::string_view text, std::string_view filename) {
  Ctx c{filename};
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(fmt::format("{}:{}: {}", filename, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap()) {
    return Status::InvalidArgument(
        fmt::format("{}: want a mapping with 'queues' (and optionally 'default')", filename));
  }
  QueueConfig cfg;
  cfg.source = std::string(filename);
  bool have_queues = false;
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (key == "queues") {
      if (!v.IsMap()) return c.Err(v, key, "want a mapping of tenant name -> settings");
      have_queues = true;
      std::set<std::string> seen;
      for (const auto& q : v) {
        const std::string tenant = q.first.Scalar();
        if (tenant.empty()) return c.Err(q.first, key, "empty tenant name");
        if (!seen.insert(tenant).second) {
          return c.Err(q.first, key, fmt::format("tenant '{}' listed twice", tenant));
        }
        GPOOL_ASSIGN_OR_RETURN(QueueEntry e, ParseEntry(c, q.second, fmt::format("queue '{}'", tenant)));
        e.tenant = tenant;
        e.where = c.Where(q.first);
        cfg.queues.push_back(std::move(e));
      }
    } else if (key == "default") {
      GPOOL_ASSIGN_OR_RETURN(QueueEntry e, ParseEntry(c, v, "default"));
      if (!e.guaranteed_domains.empty()) {
        return c.Err(v, "default.guaranteed_domains",
                     "not allowed: a domain can be guaranteed to one queue only");
      }
      e.where = c.Where(kv.first);
      cfg.default_queue = std::move(e);
    } else {
      return c.Err(kv.first, key, "unknown key (known: queues, default)");
    }
  }
  if (!have_queues) return Status::InvalidArgument(fmt::format("{}: missing key 'queues'", filename));
  return cfg;
}

StatusOr<QueueConfig> ReadQueueConfig(const std::string& path) {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseQueueConfig(text, path);
}

StatusOr<TenantQueues> MakeConfiguredQueues(const QueueConfig& config, const Workload& w,
                                            const sched::ClusterSpec& spec) {
  // Leaf and pod names -> domain (a name both a leaf and a pod is ambiguous).
  std::map<std::string, sched::DomainId> by_name;
  std::set<std::string> ambiguous;
  for (size_t d = 0; d < spec.domains.size(); ++d) {
    const auto& dom = spec.domains[d];
    if (dom.level != sched::Level::kLeaf && dom.level != sched::Level::kPod) continue;
    if (!by_name.emplace(dom.name, sched::DomainId(static_cast<uint32_t>(d))).second) {
      ambiguous.insert(dom.name);
    }
  }
  std::vector<int64_t> domain_gpus(spec.domains.size(), 0);
  for (const auto& n : spec.nodes) {
    domain_gpus[n.leaf.value()] += n.gpus;
    domain_gpus[spec.domains[n.leaf.value()].parent.value()] += n.gpus;
  }
  int64_t cluster_gpus = 0;
  for (const auto& n : spec.nodes) cluster_gpus += n.gpus;

  std::vector<QueueEntry> entries = config.queues;
  std::set<std::string> listed;
  for (const auto& e : entries) listed.insert(e.tenant);
  for (const auto& j : w.jobs) {
    if (listed.count(j.tenant)) continue;
    if (!config.default_queue) {
      return Status::InvalidArgument(fmt::format(
          "{}: tenant '{}' (first job at {}) has no queue: list it under 'queues' or add a "
          "'default' entry",
          config.source, j.tenant, j.source));
    }
    QueueEntry e = *config.default_queue;
    e.tenant = j.tenant;
    entries.push_back(std::move(e));
    listed.insert(j.tenant);
  }
  if (entries.empty()) {
    return Status::InvalidArgument(fmt::format("{}: no queues (the file lists none and the workload has no jobs)", config.source));
  }

  TenantQueues t;
  std::map<uint32_t, std::string> leaf_owner;  // leaf domain -> queue guaranteeing it
  std::vector<int64_t> quota;
  int64_t total_quota = 0;
  double total_weight = 0;
  for (const auto& e : entries) {
    sched::QueueSpec q;
    q.name = e.tenant;
    q.tenant = e.tenant;
    q.guaranteed_gpus = e.guaranteed_gpus;
    q.weight = e.weight;
    q.max_gpus = e.max_gpus;
    q.max_running_jobs = e.max_running_jobs;
    int64_t gpus = e.guaranteed_gpus;
    for (const auto& name : e.guaranteed_domains) {
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        return Status::InvalidArgument(fmt::format(
            "{}: queue '{}': guaranteed_domains: the cluster has no leaf or pod '{}'", e.where,
            e.tenant, name));
      }
      if (ambiguous.count(name)) {
        return Status::InvalidArgument(fmt::format(
            "{}: queue '{}': guaranteed_domains: '{}' names more than one domain", e.where,
            e.tenant, name));
      }
      const sched::DomainId d = it->second;
      // A domain guaranteed twice (directly, or a leaf inside a guaranteed pod) would count twice.
      std::vector<uint32_t> leaves;
      if (spec.domains[d.value()].level == sched::Level::kLeaf) {
        leaves.push_back(d.value());
      } else {
        for (size_t l = 0; l < spec.domains.size(); ++l) {
          if (spec.domains[l].level == sched::Level::kLeaf && spec.domains[l].parent == d) {
            leaves.push_back(static_cast<uint32_t>(l));
          }
        }
      }
      for (uint32_t l : leaves) {
        auto [owner, fresh] = leaf_owner.emplace(l, e.tenant);
        if (!fresh) {
          return Status::InvalidArgument(fmt::format(
              "{}: queue '{}': guaranteed_domains: '{}' overlaps leaf '{}', already guaranteed "
              "to queue '{}'",
              e.where, e.tenant, name, spec.domains[l].name, owner->second));
        }
      }
      q.guaranteed_domains.push_back(d);
      gpus += domain_gpus[d.value()];
    }
    Status valid = sched::ValidateQueue(q, spec);
    if (!valid.ok()) return valid.WithContext(e.where);
    quota.push_back(gpus);
    total_quota += gpus;
    total_weight += e.weight;
    t.tenants.push_back(e.tenant);
    t.queues.push_back(std::move(q));
  }
  if (total_quota > cluster_gpus) {
    std::string parts;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (quota[i] > 0) parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", entries[i].tenant, quota[i]);
    }
    return Status::InvalidArgument(fmt::format(
        "{}: guaranteed quotas add up to {} GPUs ({}), more than the cluster's {}", config.source,
        total_quota, parts, cluster_gpus));
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    t.entitlement.push_back(total_quota > 0
                                ? static_cast<double>(quota[i]) / static_cast<double>(total_quota)
                                : entries[i].weight / total_weight);
  }
  return t;
}

}  // namespace gpool::sim
