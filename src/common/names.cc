#include "common/names.h"

#include <fmt/format.h>

namespace gpool {
namespace {

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool IsNameChar(char c) { return IsAlnum(c) || c == '.' || c == '_' || c == '-'; }

// The first byte that breaks the syntax, or npos.
size_t FirstBad(std::string_view name) {
  for (size_t i = 0; i < name.size(); ++i) {
    if (i == 0 ? !IsAlnum(name[i]) : !IsNameChar(name[i])) return i;
  }
  return std::string_view::npos;
}

}  // namespace

std::string EscapeForMessage(std::string_view s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\\': out += "\\\\"; break;
      case '\'': out += "\\'"; break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += static_cast<char>(c);
        } else {
          out += fmt::format("\\x{:02x}", c);
        }
    }
  }
  if (s.size() > max_bytes) out += "...";
  return out;
}

bool IsValidName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxNameLength && FirstBad(name) == std::string_view::npos;
}

Status ValidateName(std::string_view field, std::string_view name) {
  if (name.empty()) {
    return Status::InvalidArgument(fmt::format("{}: empty (names are {})", field, kNameSyntax));
  }
  if (name.size() > kMaxNameLength) {
    return Status::InvalidArgument(fmt::format("{}: '{}' is {} characters, at most {} allowed",
                                               field, EscapeForMessage(name), name.size(),
                                               kMaxNameLength));
  }
  size_t bad = FirstBad(name);
  if (bad == std::string_view::npos) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{}: '{}': character '{}' at position {} is not allowed (names are {})", field,
      EscapeForMessage(name), EscapeForMessage(name.substr(bad, 1)), bad, kNameSyntax));
}

}  // namespace gpool
