#include "fabric/ibnetdiscover.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "common/file.h"

namespace gpool::fabric {
namespace {

constexpr int kMaxIncludeDepth = 16;
constexpr uint32_t kNone = UINT32_MAX;
// ibsim's first GUIDs for records without a GUID line (switches, CAs); routers get their own.
constexpr uint64_t kGuidBase[3] = {0x200000, 0x100000, 0x300000};  // indexed by NodeType

int TypeIndex(NodeType t) { return static_cast<int>(t); }

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A position in one line. All helpers leave `pos` after what they consumed.
struct Cursor {
  std::string_view s;
  size_t pos = 0;

  bool done() const { return pos >= s.size(); }
  char peek() const { return pos < s.size() ? s[pos] : '\0'; }
  void SkipSpace() {
    while (pos < s.size() && IsSpace(s[pos])) ++pos;
  }
  bool Eat(char c) {
    if (peek() != c) return false;
    ++pos;
    return true;
  }
  std::string_view Word() {  // letters, digits, '_' and '-'
    size_t b = pos;
    while (pos < s.size() && (IsAlpha(s[pos]) || IsDigit(s[pos]) || s[pos] == '_' || s[pos] == '-'))
      ++pos;
    return s.substr(b, pos - b);
  }
  // Unsigned decimal.
  template <typename T>
  bool Dec(T* out) {
    const char* b = s.data() + pos;
    auto r = std::from_chars(b, s.data() + s.size(), *out, 10);
    if (r.ec != std::errc() || r.ptr == b) return false;
    pos += static_cast<size_t>(r.ptr - b);
    return true;
  }
  // Hex digits with an optional 0x prefix.
  bool Hex(uint64_t* out) {
    if (pos + 1 < s.size() && s[pos] == '0' && (s[pos + 1] == 'x' || s[pos + 1] == 'X')) pos += 2;
    const char* b = s.data() + pos;
    auto r = std::from_chars(b, s.data() + s.size(), *out, 16);
    if (r.ec != std::errc() || r.ptr == b) return false;
    pos += static_cast<size_t>(r.ptr - b);
    return true;
  }
  // "0x..." hex or decimal, as the ID lines and ibsim attributes write numbers.
  bool Number(uint64_t* out) {
    if (pos + 1 < s.size() && s[pos] == '0' && (s[pos + 1] == 'x' || s[pos + 1] == 'X'))
      return Hex(out);
    return Dec(out);
  }
  // A double-quoted string (no escapes: the format has none).
  bool Quoted(std::string_view* out) {
    if (!Eat('"')) return false;
    size_t e = s.find('"', pos);
    if (e == std::string_view::npos) return false;
    *out = s.substr(pos, e - pos);
    pos = e + 1;
    return true;
  }
  // Skips "[ext N]" if it comes next.
  void SkipExt() {
    if (s.substr(pos, 4) == "[ext") {
      size_t e = s.find(']', pos);
      pos = e == std::string_view::npos ? s.size() : e + 1;
    }
  }
  // Next whitespace-separated token of a comment; a quoted string is one token (with quotes).
  std::string_view Token() {
    SkipSpace();
    size_t b = pos;
    if (peek() == '"') {
      size_t e = s.find('"', pos + 1);
      pos = e == std::string_view::npos ? s.size() : e + 1;
    } else {
      while (pos < s.size() && !IsSpace(s[pos])) ++pos;
    }
    return s.substr(b, pos - b);
  }
};

struct Loc {
  uint32_t file = 0;
  int line = 0;
};

// Width and speed as one port line states them.
struct PortRate {
  LinkWidth width = 0;  // 0: not stated
  std::optional<LinkSpeed> speed;
};

struct RawNode {
  NodeSpec spec;
  std::string_view name;  // view into the source text: stable key for by_name_
  Loc loc;
  Lid lid_hint = 0;  // a switch's LID as its peers' port lines give it
  bool has_lmc = false;
};

struct RawPort {
  uint32_t node = 0;
  uint16_t port = 0;
  uint16_t rport = 0;
  std::string_view remote;  // empty: unconnected
  uint32_t rnode = kNone;   // remote record, resolved by Finish
  uint64_t guid = 0, rguid = 0;
  Lid lid = 0, rlid = 0;
  LinkWidth width = 4;
  LinkSpeed speed = LinkSpeed::kSdr;
  bool rate_stated = false;  // width/speed came from the line itself, not from defaults
  Loc loc;
};

struct RawLink {
  uint32_t a, b;  // global port indexes
  LinkWidth width;  // as the line of end a (or, when it states none, of end b) gives it
  LinkSpeed speed;
  bool rate_stated;
  uint32_t first_port_line;  // index into ports_
  LinkWidth b_width;  // end b's own rate when its line states a different one
  LinkSpeed b_speed;
};

// LinkWidth mask -> lanes, highest enabled first (12x, 8x, 4x, 2x, 1x).
LinkWidth WidthFromMask(uint64_t m) {
  if (m & 8) return 12;
  if (m & 4) return 8;
  if (m & 2) return 4;
  if (m & 16) return 2;
  return 1;
}
LinkSpeed SpeedFromMask(uint64_t m) {
  if (m & 4) return LinkSpeed::kQdr;
  if (m & 2) return LinkSpeed::kDdr;
  return LinkSpeed::kSdr;
}
LinkSpeed ExtSpeedFromMask(uint64_t m) {
  if (m & 8) return LinkSpeed::kNdr;
  if (m & 4) return LinkSpeed::kHdr;
  if (m & 2) return LinkSpeed::kEdr;
  return LinkSpeed::kFdr;
}

// "4xNDR" -> 4, NDR without allocating (model.h's ParseWidthSpeed upper-cases into a string).
bool WidthSpeedToken(std::string_view tok, LinkWidth* width, LinkSpeed* speed) {
  size_t x = tok.find_first_of("xX");
  if (x == 0 || x == std::string_view::npos || x > 2) return false;
  unsigned w = 0;
  for (size_t i = 0; i < x; ++i) {
    if (!IsDigit(tok[i])) return false;
    w = w * 10 + static_cast<unsigned>(tok[i] - '0');
  }
  if (w != 1 && w != 2 && w != 4 && w != 8 && w != 12) return false;
  std::string_view name = tok.substr(x + 1);
  static constexpr LinkSpeed kAll[] = {LinkSpeed::kSdr, LinkSpeed::kDdr, LinkSpeed::kQdr,
                                       LinkSpeed::kFdr10, LinkSpeed::kFdr, LinkSpeed::kEdr,
                                       LinkSpeed::kHdr, LinkSpeed::kNdr, LinkSpeed::kXdr};
  for (LinkSpeed s : kAll) {
    std::string_view n = LinkSpeedName(s);
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < n.size() && eq; ++i)
      eq = (name[i] & ~0x20) == n[i] || name[i] == n[i];
    if (eq) {
      *width = static_cast<LinkWidth>(w);
      *speed = s;
      return true;
    }
  }
  return false;
}

class NetParser {
 public:
  explicit NetParser(const NetParseOptions& options) : o_(options) {
    default_width_ = o_.default_link.width;
    default_speed_ = o_.default_link.speed;
    for (int t = 0; t < 3; ++t) next_guid_[t] = kGuidBase[t];
  }

  Status ParseText(std::string_view text, const std::string& name, int depth);
  StatusOr<Fabric> Finish();

 private:
  Status Err(Loc loc, std::string_view what) const {
    return Status::InvalidArgument(fmt::format("{}:{}: {}", files_[loc.file], loc.line, what));
  }
  void Warn(Loc loc, std::string_view what) {
    if (o_.warnings) o_.warnings->push_back(fmt::format("{}:{}: {}", files_[loc.file], loc.line, what));
  }
  std::string Where(Loc loc) const { return fmt::format("{}:{}", files_[loc.file], loc.line); }

  Status ParseHeader(Cursor c, NodeType type, std::string_view keyword, Loc loc);
  Status ParsePortLine(Cursor c, Loc loc);
  Status ParsePortComment(Cursor c, RawPort* p, PortRate* rate, bool is_switch, Loc loc);
  Status ParseAttribute(std::string_view token, PortRate* rate, std::optional<LinkSpeed>* ext,
                        Loc loc);
  Status ParseIdLine(Cursor c, std::string_view key, Loc loc);
  Status ParseInclude(Cursor c, Loc loc, int depth);
  Status ParseComment(Cursor c, Loc loc);

  const NetParseOptions& o_;
  std::vector<std::string> files_;
  std::deque<std::string> texts_;  // included files, kept alive for the views into them
  std::vector<std::string> include_stack_;
  std::vector<RawNode> nodes_;
  std::vector<RawPort> ports_;
  std::unordered_map<std::string_view, uint32_t> by_name_;
  uint32_t current_ = kNone;  // record taking port lines
  bool seen_record_ = false;  // past the preamble
  std::optional<uint64_t> pending_guid_[3];
  uint64_t next_guid_[3];
  uint64_t pending_sysimg_ = 0;
  LinkWidth default_width_;
  LinkSpeed default_speed_;
};

Status NetParser::ParseText(std::string_view text, const std::string& name, int depth) {
  uint32_t file = static_cast<uint32_t>(files_.size());
  files_.push_back(name);
  if (depth == 0) {
    // One memchr pass sizes the arrays, so a 100,000-endpoint dump does not regrow them.
    size_t lines_upper = 1;
    for (const char* p = text.data(); (p = static_cast<const char*>(std::memchr(
                                          p, '\n', static_cast<size_t>(text.data() + text.size() - p))));
         ++p)
      ++lines_upper;
    ports_.reserve(lines_upper);
    by_name_.reserve(text.size() / 256 + 16);
    include_stack_.push_back(std::filesystem::path(name).lexically_normal().string());
  }
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    Loc loc{file, lines.line_number()};
    std::string_view t = Trim(line);
    if (t.empty()) {
      current_ = kNone;
      continue;
    }
    if (t[0] == '#') {  // comments never end a record (as in ibsim)
      GPOOL_RETURN_IF_ERROR(ParseComment(Cursor{t, 1}, loc));
      continue;
    }
    Cursor c{t, 0};
    if (t[0] == '[') {
      if (current_ == kNone)
        return Err(loc, "port line outside a node record (a record starts with a header such as "
                        "'Switch 36 \"name\"' or 'Ca 1 \"name\"', and ends at a blank line)");
      GPOOL_RETURN_IF_ERROR(ParsePortLine(c, loc));
      continue;
    }
    if (t[0] == '@') return Status::Unimplemented(Where(loc) + ": ibsim port aliases ('@') are not supported");
    current_ = kNone;
    std::string_view key = c.Word();
    if (key == "Switch") {
      GPOOL_RETURN_IF_ERROR(ParseHeader(c, NodeType::kSwitch, key, loc));
    } else if (key == "Ca" || key == "Hca") {
      GPOOL_RETURN_IF_ERROR(ParseHeader(c, NodeType::kCa, key, loc));
    } else if (key == "Rt" || key == "Router") {
      GPOOL_RETURN_IF_ERROR(ParseHeader(c, NodeType::kRouter, key, loc));
    } else if (key == "switchguid" || key == "caguid" || key == "hcaguids" || key == "rtguid" ||
               key == "sysimgguid" || key == "vendid" || key == "devid" || key == "width" ||
               key == "speed" || key == "extspeed" || key == "pdebug") {
      seen_record_ = true;
      GPOOL_RETURN_IF_ERROR(ParseIdLine(c, key, loc));
    } else if (key == "include") {
      seen_record_ = true;
      GPOOL_RETURN_IF_ERROR(ParseInclude(c, loc, depth));
    } else if (key == "module" || key == "do") {
      return Status::Unimplemented(
          fmt::format("{}: ibsim '{}' lines are not supported", Where(loc), key));
    } else if (key == "Chassis" || key == "Non-Chassis" || key == "Hostname") {
      continue;  // ibnetdiscover -g grouping lines; the records that follow carry everything
    } else if (!seen_record_) {
      Warn(loc, fmt::format("skipped a line before the first record: '{}'",
                            t.substr(0, std::min<size_t>(t.size(), 80))));
    } else {
      return Err(loc, fmt::format("expected a node record ('Switch', 'Ca', 'Hca', 'Rt'), an ID "
                                  "line ('switchguid=', 'caguid=', ...), a port line ('[1] ...') "
                                  "or 'include'; got '{}'",
                                  t.substr(0, std::min<size_t>(t.size(), 60))));
    }
  }
  return Status::Ok();
}

Status NetParser::ParseHeader(Cursor c, NodeType type, std::string_view keyword, Loc loc) {
  seen_record_ = true;
  c.SkipSpace();
  uint32_t nports = 0;
  if (!c.Dec(&nports))
    return Err(loc, fmt::format("expected the port count after '{}'", keyword));
  if (nports == 0 || nports > 254)
    return Err(loc, fmt::format("port count {} is outside 1..254", nports));
  c.SkipSpace();
  std::string_view name;
  if (!c.Quoted(&name))
    return Err(loc, fmt::format("expected a quoted node name after '{} {}'", keyword, nports));
  if (name.empty()) return Err(loc, "node name is empty");
  RawNode n;
  n.spec.type = type;
  n.spec.num_ports = static_cast<uint16_t>(nports);
  n.spec.name = std::string(name);
  n.name = name;
  n.loc = loc;
  c.SkipSpace();
  if (c.Eat('#')) {
    c.SkipSpace();
    std::string_view desc;
    if (c.peek() == '"' && !c.Quoted(&desc)) return Err(loc, "unterminated quoted description");
    n.spec.description = std::string(desc);
    // Switches: "base port 0 lid 6 lmc 0"; anything else in the comment is ignored. A CA's
    // LIDs and LMC are on its port lines.
    while (type == NodeType::kSwitch && !c.done()) {
      std::string_view tok = c.Token();
      if (tok == "lid" || tok == "lmc") {
        c.SkipSpace();
        uint32_t v = 0;
        if (!c.Dec(&v)) return Err(loc, fmt::format("expected a number after '{}'", tok));
        if (tok == "lid") {
          if (v > kMaxUnicastLid) return Err(loc, fmt::format("LID {} is not a unicast LID", v));
          n.spec.lid = static_cast<Lid>(v);
        } else {
          if (v > 7) return Err(loc, fmt::format("LMC {} is outside 0..7", v));
          n.spec.lmc = static_cast<uint8_t>(v);
          n.has_lmc = true;
        }
      }
    }
  } else if (!c.done()) {
    return Err(loc, "expected '#' and a comment, or the end of the line, after the node name");
  }
  int ti = TypeIndex(type);
  if (pending_guid_[ti]) {
    n.spec.guid = *pending_guid_[ti];
    pending_guid_[ti].reset();
  } else {
    n.spec.guid = next_guid_[ti];
  }
  next_guid_[ti] = n.spec.guid + (type == NodeType::kSwitch ? 1 : nports + 1);
  n.spec.sysimg_guid = pending_sysimg_;
  pending_sysimg_ = 0;
  auto [it, inserted] = by_name_.emplace(name, static_cast<uint32_t>(nodes_.size()));
  if (!inserted)
    return Err(loc, fmt::format("node '{}' already has a record at {}", name,
                                Where(nodes_[it->second].loc)));
  current_ = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back(std::move(n));
  return Status::Ok();
}

Status NetParser::ParseAttribute(std::string_view token, PortRate* rate,
                                 std::optional<LinkSpeed>* ext, Loc loc) {
  size_t eq = token.find('=');
  std::string_view key = token.substr(0, eq);
  Cursor v{token.substr(eq + 1), 0};
  uint64_t n = 0;
  if (key != "w" && key != "s" && key != "e") return Status::Ok();  // v= and others: ignored
  if (!v.Number(&n) || !v.done())
    return Err(loc, fmt::format("attribute '{}' needs a number", token));
  if (key == "w") {
    if (n < 1 || n > 31) return Err(loc, fmt::format("'{}': w= is a LinkWidth mask 1..31", token));
    rate->width = WidthFromMask(n);
  } else if (key == "s") {
    if (n > 7) return Err(loc, fmt::format("'{}': s= is a LinkSpeed mask 0..7", token));
    rate->speed = n == 0 ? LinkSpeed::kQdr : SpeedFromMask(n);
  } else {
    if (n > 15) return Err(loc, fmt::format("'{}': e= is a LinkSpeedExt mask 0..15", token));
    if (n) *ext = ExtSpeedFromMask(n);
  }
  return Status::Ok();
}

Status NetParser::ParsePortComment(Cursor c, RawPort* p, PortRate* rate, bool is_switch, Loc loc) {
  bool seen_desc = false;
  PortRate attrs;
  std::optional<LinkSpeed> ext;
  while (!c.done()) {
    std::string_view tok = c.Token();
    if (tok.empty()) break;
    if (tok[0] == '"') {
      seen_desc = true;
    } else if (tok == "lid" || tok == "lmc") {
      c.SkipSpace();
      uint32_t v = 0;
      if (!c.Dec(&v)) return Err(loc, fmt::format("expected a number after '{}'", tok));
      if (tok == "lid") {
        if (v > kMaxUnicastLid) return Err(loc, fmt::format("LID {} is not a unicast LID", v));
        if (!is_switch && !seen_desc)
          p->lid = static_cast<Lid>(v);
        else
          p->rlid = static_cast<Lid>(v);
      } else if (!is_switch) {
        if (v > 7) return Err(loc, fmt::format("LMC {} is outside 0..7", v));
        RawNode& n = nodes_[p->node];
        if (!n.has_lmc && !p->remote.empty()) {
          n.spec.lmc = static_cast<uint8_t>(v);
          n.has_lmc = true;
        }
      }
    } else if (tok.size() > 2 && IsAlpha(tok[0]) && tok[1] == '=') {
      GPOOL_RETURN_IF_ERROR(ParseAttribute(tok, &attrs, &ext, loc));
    } else if (IsDigit(tok[0]) || tok[0] == '?') {
      LinkWidth w;
      LinkSpeed s;
      if (WidthSpeedToken(tok, &w, &s)) {
        rate->width = w;
        rate->speed = s;
      } else if (tok.find('x') != std::string_view::npos) {
        // "4x???": tools older than the link print unknown speeds so; keep what is known.
        size_t x = tok.find('x');
        Cursor wc{tok.substr(0, x), 0};
        uint32_t lanes = 0;
        if (wc.Dec(&lanes) && wc.done() &&
            (lanes == 1 || lanes == 2 || lanes == 4 || lanes == 8 || lanes == 12))
          rate->width = static_cast<LinkWidth>(lanes);
        Warn(loc, fmt::format("unknown link width/speed '{}'; using the default for what is "
                              "missing", tok));
      }
    }
  }
  if (attrs.width) rate->width = attrs.width;
  if (ext)
    rate->speed = ext;
  else if (attrs.speed)
    rate->speed = attrs.speed;
  return Status::Ok();
}

Status NetParser::ParsePortLine(Cursor c, Loc loc) {
  RawNode& node = nodes_[current_];
  bool is_switch = node.spec.type == NodeType::kSwitch;
  RawPort p;
  p.node = current_;
  p.loc = loc;
  c.Eat('[');
  uint32_t num = 0;
  if (!c.Dec(&num) || !c.Eat(']')) return Err(loc, "expected '[port]' at the start of a port line");
  if (num == 0)
    return Err(loc, "port 0 is a switch's management port and cannot be linked; ports are 1-based");
  if (num > node.spec.num_ports)
    return Err(loc, fmt::format("port {} is outside 1..{} of '{}'", num, node.spec.num_ports,
                                node.name));
  p.port = static_cast<uint16_t>(num);
  c.SkipExt();
  if (c.Eat('(')) {
    if (!c.Hex(&p.guid) || !c.Eat(')')) return Err(loc, "expected '(port GUID in hex)'");
  }
  c.SkipSpace();
  PortRate rate;
  if (c.peek() == '"') {
    if (!c.Quoted(&p.remote)) return Err(loc, "unterminated quoted remote node name");
    if (p.remote.empty()) return Err(loc, "remote node name is empty");
    p.rport = 1;  // ibsim's default when the line gives no remote port
    if (c.Eat('[')) {
      uint32_t r = 0;
      if (!c.Dec(&r) || !c.Eat(']')) return Err(loc, "expected '[remote port]' after the remote name");
      if (r == 0 || r > 254) return Err(loc, fmt::format("remote port {} is outside 1..254", r));
      p.rport = static_cast<uint16_t>(r);
    }
    c.SkipExt();
    c.SkipSpace();
    if (c.Eat('(')) {
      if (!c.Hex(&p.rguid) || !c.Eat(')')) return Err(loc, "expected '(remote port GUID in hex)'");
    }
  }
  // Attributes before the comment, then the comment (which may hold more attributes).
  PortRate attrs;
  std::optional<LinkSpeed> ext;
  while (true) {
    c.SkipSpace();
    if (c.done() || c.peek() == '#') break;
    std::string_view tok = c.Token();
    if (tok.size() > 2 && IsAlpha(tok[0]) && tok[1] == '=') {
      GPOOL_RETURN_IF_ERROR(ParseAttribute(tok, &attrs, &ext, loc));
    } else {
      return Err(loc, fmt::format("unexpected '{}' in port line; expected attributes "
                                  "(w=, s=, e=) or '# comment'", tok));
    }
  }
  if (c.Eat('#')) GPOOL_RETURN_IF_ERROR(ParsePortComment(c, &p, &rate, is_switch, loc));
  if (attrs.width) rate.width = attrs.width;
  if (ext)
    rate.speed = ext;
  else if (attrs.speed)
    rate.speed = attrs.speed;
  p.rate_stated = rate.width != 0 || rate.speed.has_value();
  p.width = rate.width ? rate.width : default_width_;
  p.speed = rate.speed ? *rate.speed : default_speed_;
  ports_.push_back(p);
  return Status::Ok();
}

Status NetParser::ParseIdLine(Cursor c, std::string_view key, Loc loc) {
  c.SkipSpace();
  if (!c.Eat('=')) return Err(loc, fmt::format("expected '=' after '{}'", key));
  c.SkipSpace();
  if (key == "pdebug") return Status::Ok();
  uint64_t v = 0;
  if (!c.Number(&v)) return Err(loc, fmt::format("expected a number (0x... or decimal) after '{}='", key));
  if (key == "switchguid" || key == "caguid" || key == "hcaguids" || key == "rtguid" ||
      key == "sysimgguid") {
    if (v == 0) return Err(loc, fmt::format("{} 0 is not a valid GUID", key));
    if (c.Eat('(')) {  // "switchguid=0x...(port GUID)"
      uint64_t port_guid = 0;
      if (!c.Hex(&port_guid) || !c.Eat(')')) return Err(loc, "expected '(port GUID in hex)'");
    }
    NodeType t = key == "switchguid" ? NodeType::kSwitch
                 : key == "rtguid"   ? NodeType::kRouter
                                     : NodeType::kCa;
    if (key == "sysimgguid")
      pending_sysimg_ = v;
    else
      pending_guid_[TypeIndex(t)] = v;
  } else if (key == "width") {
    if (v < 1 || v > 31) return Err(loc, "width= is a LinkWidth mask 1..31");
    default_width_ = WidthFromMask(v);
  } else if (key == "speed") {
    if (v < 1 || v > 7) return Err(loc, "speed= is a LinkSpeed mask 1..7");
    if (default_speed_ < LinkSpeed::kFdr10) default_speed_ = SpeedFromMask(v);
  } else if (key == "extspeed") {
    if (v > 15) return Err(loc, "extspeed= is a LinkSpeedExt mask 0..15");
    if (v) default_speed_ = ExtSpeedFromMask(v);
  }
  // vendid/devid: checked for form only; the model does not keep them.
  c.SkipSpace();
  if (!c.done() && c.peek() != '#')
    return Err(loc, fmt::format("unexpected text after '{}=' value", key));
  return Status::Ok();
}

// A comment line: only `# gpool: level N` means anything (see ibnetdiscover.h).
Status NetParser::ParseComment(Cursor c, Loc loc) {
  c.SkipSpace();
  if (c.s.substr(c.pos, 6) != "gpool:") return Status::Ok();
  c.pos += 6;
  c.SkipSpace();
  if (c.Word() != "level") return Status::Ok();  // other gpool notes: none are defined yet
  c.SkipSpace();
  uint32_t v = 0;
  if (!c.Dec(&v) || (c.SkipSpace(), !c.done()) || v > 31)
    return Err(loc, "expected '# gpool: level N' with N in 0..31");
  if (current_ == kNone || nodes_[current_].spec.type != NodeType::kSwitch) {
    Warn(loc, "level hint outside a switch record; ignored");
    return Status::Ok();
  }
  nodes_[current_].spec.level = static_cast<int16_t>(v);
  return Status::Ok();
}

Status NetParser::ParseInclude(Cursor c, Loc loc, int depth) {
  c.SkipSpace();
  std::string_view name;
  if (!c.Quoted(&name) || name.empty()) return Err(loc, "expected include \"file\"");
  if (!o_.read_include)
    return Err(loc, "include is only possible when parsing a file (no include reader given)");
  if (depth + 1 > kMaxIncludeDepth)
    return Err(loc, fmt::format("includes nested deeper than {}", kMaxIncludeDepth));
  namespace fs = std::filesystem;
  fs::path p(name);
  if (p.is_relative()) p = fs::path(files_[loc.file]).parent_path() / p;
  std::string resolved = p.lexically_normal().string();
  for (const std::string& open : include_stack_) {
    if (open == resolved) {
      std::string chain;
      for (const std::string& s : include_stack_) chain += s + " -> ";
      return Err(loc, fmt::format("include cycle: {}{}", chain, resolved));
    }
  }
  StatusOr<std::string> text = o_.read_include(resolved);
  if (!text.ok()) return text.status().WithContext(Where(loc) + ": include \"" + std::string(name) + "\"");
  texts_.push_back(std::move(*text));
  include_stack_.push_back(resolved);
  Status s = ParseText(texts_.back(), resolved, depth + 1);
  include_stack_.pop_back();
  current_ = kNone;
  return s;
}

StatusOr<Fabric> NetParser::Finish() {
  // Global port index of each node's port 1.
  std::vector<uint32_t> first(nodes_.size() + 1, 0);
  for (size_t i = 0; i < nodes_.size(); ++i) first[i + 1] = first[i] + nodes_[i].spec.num_ports;
  const uint32_t nports = first.back();
  std::vector<uint32_t> line_of(nports, kNone);  // port line that listed each port
  std::vector<uint32_t> peer(nports, kNone);
  std::vector<uint32_t> link_of(nports, kNone);
  std::vector<uint64_t> port_guid(nports, 0);
  std::vector<Lid> port_lid(nports, 0);
  std::vector<RawLink> links;
  links.reserve(ports_.size() / 2 + 1);

  auto port_name = [&](uint32_t g) {
    auto it = std::upper_bound(first.begin(), first.end(), g);
    size_t n = static_cast<size_t>(it - first.begin()) - 1;
    return fmt::format("'{}'[{}]", nodes_[n].name, g - first[n] + 1);
  };

  for (uint32_t i = 0; i < ports_.size(); ++i) {
    RawPort& p = ports_[i];
    const RawNode& n = nodes_[p.node];
    uint32_t g = first[p.node] + p.port - 1;
    if (line_of[g] != kNone)
      return Err(p.loc, fmt::format("port {} of '{}' is listed twice in its record (also at {})",
                                    p.port, n.name, Where(ports_[line_of[g]].loc)));
    line_of[g] = i;
    // An unconnected port is inactive: it has no LID, and its GUID stays the derived one.
    if (p.remote.empty()) continue;
    if (n.spec.type != NodeType::kSwitch) {
      if (p.guid) port_guid[g] = p.guid;
      if (p.lid) port_lid[g] = p.lid;
    }
    auto rit = by_name_.find(p.remote);
    if (rit == by_name_.end())
      return Err(p.loc, fmt::format("port {} of '{}' links to '{}', which has no record", p.port,
                                    n.name, p.remote));
    uint32_t r = rit->second;
    p.rnode = r;
    const RawNode& rn = nodes_[r];
    if (p.rport > rn.spec.num_ports)
      return Err(p.loc, fmt::format("'{}' has ports 1..{}, not port {}", rn.name,
                                    rn.spec.num_ports, p.rport));
    uint32_t rg = first[r] + p.rport - 1;
    if (rg == g) return Err(p.loc, fmt::format("port {} of '{}' is linked to itself", p.port, n.name));
    if (peer[g] == kNone && peer[rg] == kNone) {
      peer[g] = rg;
      peer[rg] = g;
      link_of[g] = link_of[rg] = static_cast<uint32_t>(links.size());
      links.push_back(RawLink{g, rg, p.width, p.speed, p.rate_stated, i, p.width, p.speed});
    } else if (peer[g] == rg) {
      // The same link from its other end.
      RawLink& l = links[link_of[g]];
      if (p.rate_stated && !l.rate_stated) {
        l.width = l.b_width = p.width;
        l.speed = l.b_speed = p.speed;
        l.rate_stated = true;
      } else if (p.rate_stated && (p.width != l.width || p.speed != l.speed)) {
        // Each end keeps its own rate (the model loses nothing; RateMismatches lists the link)
        // and the link runs at the lower of each, as an active link would.
        LinkWidth w = std::min(l.width, p.width);
        LinkSpeed s = std::min(l.speed, p.speed);
        Warn(p.loc, fmt::format("{}<->{}: the ends disagree on rate: {}x{} here but {}x{} at {}; "
                                "the link runs at {}x{}",
                                port_name(g), port_name(rg), p.width, LinkSpeedName(p.speed),
                                l.width, LinkSpeedName(l.speed), Where(ports_[l.first_port_line].loc),
                                w, LinkSpeedName(s)));
        l.b_width = p.width;
        l.b_speed = p.speed;
      }
    } else {
      uint32_t busy = peer[g] != kNone ? g : rg;
      const RawLink& l = links[link_of[busy]];
      return Err(p.loc, fmt::format("{} is already linked to {} (from {}); cannot link {} to {}",
                                    port_name(busy), port_name(peer[busy]),
                                    Where(ports_[l.first_port_line].loc), port_name(g),
                                    port_name(rg)));
    }
  }
  // Addresses the far end reports fill what a record leaves out (ibsim nets list few).
  for (const RawPort& p : ports_) {
    if (p.remote.empty()) continue;
    uint32_t r = p.rnode;
    RawNode& rn = nodes_[r];
    uint32_t rg = first[r] + p.rport - 1;
    if (rn.spec.type == NodeType::kSwitch) {
      if (p.rlid && !rn.lid_hint) rn.lid_hint = p.rlid;
    } else {
      if (p.rguid && !port_guid[rg]) port_guid[rg] = p.rguid;
      if (p.rlid && !port_lid[rg]) port_lid[rg] = p.rlid;
    }
  }

  FabricBuilder b;
  for (RawNode& n : nodes_) {
    if (n.spec.type == NodeType::kSwitch && n.spec.lid == 0) n.spec.lid = n.lid_hint;
    StatusOr<NodeId> id = b.AddNode(std::move(n.spec));
    if (!id.ok()) return id.status().WithContext(Where(n.loc));
  }
  auto node_of = [&](uint32_t g) {
    return static_cast<uint32_t>(std::upper_bound(first.begin(), first.end(), g) - first.begin()) - 1;
  };
  for (const RawLink& l : links) {
    uint32_t na = node_of(l.a), nb = node_of(l.b);
    const auto bport = static_cast<uint16_t>(l.b - first[nb] + 1);
    Status s = b.AddLink(NodeId(na), static_cast<uint16_t>(l.a - first[na] + 1), NodeId(nb), bport,
                         LinkSpec{l.width, l.speed});
    if (s.ok() && (l.b_width != l.width || l.b_speed != l.speed))
      s = b.SetPortRate(NodeId(nb), bport, LinkSpec{l.b_width, l.b_speed});
    if (!s.ok()) return s.WithContext(Where(ports_[l.first_port_line].loc));
  }
  for (uint32_t n = 0; n < nodes_.size(); ++n) {
    for (uint32_t g = first[n]; g < first[n + 1]; ++g) {
      if (!port_guid[g] && !port_lid[g]) continue;
      GPOOL_RETURN_IF_ERROR(b.SetPortAddress(NodeId(n), static_cast<uint16_t>(g - first[n] + 1),
                                             port_guid[g], port_lid[g]));
    }
  }
  FabricBuilder::BuildOptions bo;
  bo.assign_lids = o_.assign_lids;
  StatusOr<Fabric> f = b.Build(bo);
  if (!f.ok()) return f.status().WithContext(files_.empty() ? "<input>" : files_[0]);
  return f;
}

}  // namespace

StatusOr<Fabric> ParseNet(std::string_view text, const NetParseOptions& options) {
  NetParser parser(options);
  GPOOL_RETURN_IF_ERROR(parser.ParseText(text, options.source_name, 0));
  return parser.Finish();
}

StatusOr<Fabric> LoadNetFile(const std::string& path, NetParseOptions options) {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  options.source_name = path;
  if (!options.read_include) options.read_include = [](const std::string& p) { return ReadFile(p); };
  return ParseNet(text, options);
}

}  // namespace gpool::fabric
