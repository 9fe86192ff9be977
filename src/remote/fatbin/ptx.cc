// Kernel parameter layouts from PTX ".entry" declarations (for PTX-only modules).
//
// Layout rule (the one the CUDA driver applies to .param space): each parameter starts at the
// next multiple of its alignment (.align N if given, else its element size); its size is element
// size times the array count. The total is the end of the last parameter, unpadded.
#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "common/file.h"
#include "remote/fatbin/fatbin.h"

namespace gpool::remote::fatbin {
namespace {

// Blanks out // and /* */ comments but keeps newlines, so offsets still give line numbers.
std::string StripComments(std::string_view in) {
  std::string out(in);
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '/' && i + 1 < out.size() && out[i + 1] == '/') {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out[i] == '/' && i + 1 < out.size() && out[i + 1] == '*') {
      while (i < out.size() && !(out[i] == '*' && i + 1 < out.size() && out[i + 1] == '/')) {
        if (out[i] != '\n') out[i] = ' ';
        ++i;
      }
      if (i < out.size()) out[i] = ' ';
      if (i + 1 < out.size()) out[++i] = ' ';
    } else if (out[i] == '\0') {
      out[i] = ' ';  // entries are NUL-padded
    }
  }
  return out;
}

bool IsIdentChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' || c == '.';
}

int LineOf(std::string_view text, size_t pos) {
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + std::min(pos, text.size()), '\n'));
}

uint32_t TypeSize(std::string_view t) {
  static constexpr std::pair<std::string_view, uint32_t> kTypes[] = {
      {".b8", 1},   {".u8", 1},   {".s8", 1},     {".b16", 2},    {".u16", 2},
      {".s16", 2},  {".f16", 2},  {".bf16", 2},   {".b32", 4},    {".u32", 4},
      {".s32", 4},  {".f32", 4},  {".f16x2", 4},  {".bf16x2", 4}, {".b64", 8},
      {".u64", 8},  {".s64", 8},  {".f64", 8},    {".b128", 16}};
  for (auto [name, size] : kTypes) {
    if (t == name) return size;
  }
  return 0;
}

StatusOr<uint32_t> ParseNumber(std::string_view s, int line, std::string_view what) {
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v > (1u << 24)) {
    return Status::InvalidArgument(fmt::format("ptx:{}: bad {} '{}'", line, what, s));
  }
  return v;
}

// One ".param ..." declaration -> (align, size).
Status ParseParam(std::string_view decl, int line, uint32_t* align, uint32_t* size) {
  std::vector<std::string_view> tokens;
  size_t i = 0;
  while (i < decl.size()) {
    while (i < decl.size() && std::isspace(static_cast<unsigned char>(decl[i]))) ++i;
    size_t start = i;
    while (i < decl.size() && !std::isspace(static_cast<unsigned char>(decl[i]))) ++i;
    if (i > start) tokens.push_back(decl.substr(start, i - start));
  }
  if (tokens.empty() || tokens[0] != ".param") {
    return Status::InvalidArgument(fmt::format("ptx:{}: expected '.param' in '{}'", line, Trim(decl)));
  }
  uint32_t elem = 0, explicit_align = 0;
  std::string_view name;
  for (size_t t = 1; t < tokens.size(); ++t) {
    std::string_view tok = tokens[t];
    if (tok == ".align") {
      if (t + 1 >= tokens.size()) return Status::InvalidArgument(fmt::format("ptx:{}: .align without value", line));
      GPOOL_ASSIGN_OR_RETURN(explicit_align, ParseNumber(tokens[++t], line, "alignment"));
      if (explicit_align == 0 || (explicit_align & (explicit_align - 1)) != 0) {
        return Status::InvalidArgument(fmt::format("ptx:{}: alignment {} not a power of two", line, explicit_align));
      }
    } else if (uint32_t s = TypeSize(tok); s != 0) {
      elem = s;
    } else if (tok == ".ptr" || tok == ".global" || tok == ".const" || tok == ".shared" ||
               tok == ".local") {
      // pointer attributes of a .u64 parameter: no effect on layout
    } else if (tok.starts_with(".")) {
      return Status::InvalidArgument(fmt::format("ptx:{}: unsupported parameter type '{}'", line, tok));
    } else {
      if (!name.empty()) return Status::InvalidArgument(fmt::format("ptx:{}: stray token '{}'", line, tok));
      name = tok;
    }
  }
  if (elem == 0 || name.empty()) {
    return Status::InvalidArgument(fmt::format("ptx:{}: parameter '{}' lacks a type or name", line, Trim(decl)));
  }
  uint32_t count = 1;
  if (size_t lb = name.find('['); lb != std::string_view::npos) {
    size_t rb = name.find(']', lb);
    if (rb == std::string_view::npos || rb + 1 != name.size()) {
      return Status::InvalidArgument(fmt::format("ptx:{}: bad array declarator '{}'", line, name));
    }
    GPOOL_ASSIGN_OR_RETURN(count, ParseNumber(name.substr(lb + 1, rb - lb - 1), line, "array size"));
  }
  *align = explicit_align != 0 ? explicit_align : elem;
  *size = elem * count;
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<KernelInfo>> ParsePtx(std::string_view ptx_in) {
  const std::string text = StripComments(ptx_in);
  std::string_view ptx(text);
  std::vector<KernelInfo> kernels;
  size_t pos = 0;
  constexpr std::string_view kEntry = ".entry";
  while ((pos = ptx.find(kEntry, pos)) != std::string_view::npos) {
    size_t at = pos;
    pos += kEntry.size();
    // Whole-token match only (".entry" must not be the tail of another directive).
    if ((at > 0 && IsIdentChar(ptx[at - 1])) || (pos < ptx.size() && IsIdentChar(ptx[pos]))) continue;
    int line = LineOf(ptx, at);
    while (pos < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[pos]))) ++pos;
    size_t name_start = pos;
    while (pos < ptx.size() && IsIdentChar(ptx[pos])) ++pos;
    if (pos == name_start) return Status::InvalidArgument(fmt::format("ptx:{}: .entry without a name", line));
    KernelInfo k;
    k.name = std::string(ptx.substr(name_start, pos - name_start));
    while (pos < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[pos]))) ++pos;
    if (pos < ptx.size() && ptx[pos] == '(') {
      size_t close = ptx.find(')', pos);
      if (close == std::string_view::npos) {
        return Status::InvalidArgument(fmt::format("ptx:{}: parameter list of {} not closed", line, k.name));
      }
      std::string_view list = ptx.substr(pos + 1, close - pos - 1);
      pos = close + 1;
      uint64_t cur = 0;
      if (!Trim(list).empty()) {
        for (std::string_view decl : Split(list, ',')) {
          uint32_t align = 1, size = 0;
          GPOOL_RETURN_IF_ERROR(ParseParam(decl, line, &align, &size));
          cur = (cur + align - 1) / align * align;
          k.params.push_back(KernelParam{static_cast<uint32_t>(cur), size});
          cur += size;
          if (cur > (uint64_t{1} << 30)) {
            return Status::InvalidArgument(fmt::format("ptx:{}: parameters of {} too large", line, k.name));
          }
        }
      }
      k.param_bytes = static_cast<uint32_t>(cur);
    }
    kernels.push_back(std::move(k));
  }
  return kernels;
}

}  // namespace gpool::remote::fatbin
