#include "control/fabric_source.h"

#include <map>

#include <fmt/format.h>

#include "common/file.h"
#include "fabric/generators.h"
#include "fabric/load.h"

namespace gpool::control {
namespace {

Status ParseSpecInt(std::string_view key, std::string_view value, int* out) {
  try {
    size_t used = 0;
    *out = std::stoi(std::string(value), &used);
    if (used != value.size() || *out < 0) throw std::invalid_argument("");
  } catch (const std::exception&) {
    return Status::InvalidArgument(
        fmt::format("--fabric: '{}={}': expected a non-negative integer", key, value));
  }
  return Status::Ok();
}

StatusOr<fabric::Fabric> Generate(std::string_view spec) {
  fabric::FatTreeOptions o;
  if (spec == "brief") {
    o.levels = 2;
    o.radix = 64;
    o.hcas_per_node = 8;
    o.speed = fabric::LinkSpeed::kNdr;
    return fabric::GenerateFatTree(o);
  }
  std::string_view kind = spec.substr(0, spec.find(':'));
  if (kind != "fat-tree") {
    return Status::InvalidArgument(fmt::format(
        "--fabric: generator '{}' is not supported here (gen:brief, gen:fat-tree:k=v,...); write "
        "other shapes to a file with `gpool fabric gen` and pass the file",
        kind));
  }
  std::string_view rest = spec.size() > kind.size() ? spec.substr(kind.size() + 1) : "";
  for (std::string_view kv : Split(rest, ',')) {
    kv = Trim(kv);
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument(fmt::format("--fabric: '{}': expected key=value", kv));
    }
    std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
    int* target = k == "levels"          ? &o.levels
                  : k == "radix"         ? &o.radix
                  : k == "pods"          ? &o.pods
                  : k == "leaves"        ? &o.leaves
                  : k == "core-links"    ? &o.core_ports_per_pod
                  : k == "hcas-per-node" ? &o.hcas_per_node
                  : k == "hosts"         ? &o.hosts
                                         : nullptr;
    if (target == nullptr) {
      return Status::InvalidArgument(fmt::format(
          "--fabric: unknown fat-tree key '{}' (levels, radix, pods, leaves, core-links, "
          "hcas-per-node, hosts)",
          k));
    }
    GPOOL_RETURN_IF_ERROR(ParseSpecInt(k, v, target));
  }
  return fabric::GenerateFatTree(o);
}

}  // namespace

StatusOr<fabric::Fabric> LoadFabricSource(const std::string& source) {
  if (source.empty()) return Status::InvalidArgument("--fabric: empty");
  if (source.rfind("gen:", 0) == 0) {
    auto f = Generate(std::string_view(source).substr(4));
    if (!f.ok()) return f.status().WithContext(fmt::format("--fabric {}", source));
    return f;
  }
  auto f = fabric::LoadFabric(source);
  if (!f.ok()) return f.status().WithContext("--fabric");
  return f;
}

std::string_view HostNameOfCa(std::string_view ca_name) {
  size_t sp = ca_name.find(' ');
  return sp == std::string_view::npos ? ca_name : ca_name.substr(0, sp);
}

std::vector<FabricHost> FabricHosts(const fabric::Fabric& f) {
  std::vector<FabricHost> hosts;
  std::map<std::string, size_t, std::less<>> index;
  for (fabric::NodeId ca : f.cas()) {
    std::string_view h = HostNameOfCa(f.node(ca).name);
    auto it = index.find(h);
    if (it == index.end()) {
      it = index.emplace(std::string(h), hosts.size()).first;
      hosts.push_back({std::string(h), {}});
    }
    hosts[it->second].cas.push_back(ca);
  }
  return hosts;
}

}  // namespace gpool::control
