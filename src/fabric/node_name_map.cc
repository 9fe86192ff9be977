#include "fabric/node_name_map.h"

#include <charconv>

#include <fmt/format.h>

namespace gpool::fabric {
namespace {

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

StatusOr<NodeNameMap> ParseNodeNameMap(std::string_view text, std::string_view source) {
  NodeNameMap map;
  std::unordered_map<uint64_t, int> line_of;
  int line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = TrimRight(TrimLeft(text.substr(0, nl)));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    auto bad = [&](std::string_view why) {
      return Status::InvalidArgument(fmt::format("{}:{}: {}", source, line_no, why));
    };
    size_t end = line.find_first_of(" \t");
    std::string_view guid_text = line.substr(0, end);
    std::string_view digits = guid_text;
    if (digits.substr(0, 2) == "0x" || digits.substr(0, 2) == "0X") digits.remove_prefix(2);
    uint64_t guid = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), guid, 16);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size()) {
      return bad(fmt::format("'{}' is not a GUID (want hex, e.g. 0x0002c90300a1b2c0)",
                             guid_text.substr(0, 40)));
    }
    std::string_view rest = end == std::string_view::npos ? "" : TrimLeft(line.substr(end));
    std::string name;
    if (!rest.empty() && rest.front() == '"') {
      size_t close = rest.find('"', 1);
      if (close == std::string_view::npos) return bad("unterminated quoted name");
      name = std::string(rest.substr(1, close - 1));
    } else {
      name = std::string(rest);
    }
    if (name.empty()) return bad(fmt::format("no name for GUID {}", guid_text));
    for (char c : name) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad("control byte in the name");
    }
    if (auto [it, fresh] = line_of.emplace(guid, line_no); !fresh) {
      return bad(fmt::format("GUID {} is already named at line {}", guid_text, it->second));
    }
    map[guid] = std::move(name);
  }
  return map;
}

}  // namespace gpool::fabric
