#include "fabric/load.h"

#include <cctype>

#include <fmt/format.h>

#include "common/file.h"

namespace gpool::fabric {
namespace {

std::string Lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool StartsWithWord(std::string_view line, std::string_view word) {
  if (line.substr(0, word.size()) != word) return false;
  if (line.size() == word.size()) return true;
  char c = line[word.size()];
  return c == ' ' || c == '\t' || c == '=' || c == '"';
}

}  // namespace

std::string_view FabricFormatName(FabricFormat f) {
  switch (f) {
    case FabricFormat::kAuto: return "auto";
    case FabricFormat::kIbnetdiscover: return "ibnetdiscover";
    case FabricFormat::kIbsim: return "ibsim";
    case FabricFormat::kClosCsv: return "clos-csv";
  }
  return "?";
}

StatusOr<FabricFormat> ParseFabricFormat(std::string_view name) {
  for (FabricFormat f : {FabricFormat::kAuto, FabricFormat::kIbnetdiscover, FabricFormat::kIbsim,
                         FabricFormat::kClosCsv})
    if (FabricFormatName(f) == name) return f;
  return Status::InvalidArgument(
      fmt::format("unknown fabric format '{}'; expected auto, ibnetdiscover, ibsim or clos-csv", name));
}

StatusOr<FabricFormat> DetectFabricFormat(std::string_view path, std::string_view text) {
  LineReader lines(text);
  std::string_view line;
  bool first = true;
  bool net = false;
  int scanned = 0;
  while (lines.Next(&line) && scanned < 100000) {
    std::string_view t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    ++scanned;
    if (first) {
      first = false;
      std::string l = Lower(t);
      if (l.find(',') != std::string::npos && l.find("dsw") != std::string::npos &&
          l.find("asw") != std::string::npos)
        return FabricFormat::kClosCsv;
    }
    if (StartsWithWord(t, "include") || StartsWithWord(t, "Hca") || StartsWithWord(t, "width") ||
        StartsWithWord(t, "speed") || StartsWithWord(t, "extspeed"))
      return FabricFormat::kIbsim;
    if (StartsWithWord(t, "Switch") || StartsWithWord(t, "Ca") || StartsWithWord(t, "Rt") ||
        StartsWithWord(t, "switchguid") || StartsWithWord(t, "caguid"))
      net = true;
  }
  if (net) return FabricFormat::kIbnetdiscover;
  if (path.size() >= 4 && Lower(path.substr(path.size() - 4)) == ".csv") return FabricFormat::kClosCsv;
  return Status::InvalidArgument(fmt::format(
      "{}: cannot tell the fabric format (no Switch/Ca records, no ip,DSW,PSW,ASW header); give "
      "the format explicitly (ibnetdiscover, ibsim or clos-csv)", path));
}

StatusOr<Fabric> LoadFabric(const std::string& path, const LoadOptions& options) {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  FabricFormat format = options.format;
  if (format == FabricFormat::kAuto) {
    GPOOL_ASSIGN_OR_RETURN(format, DetectFabricFormat(path, text));
  }
  if (options.detected) *options.detected = format;
  if (format == FabricFormat::kClosCsv) {
    ClosCsvOptions clos = options.clos;
    clos.source_name = path;
    return ParseClosCsv(text, clos);
  }
  NetParseOptions net = options.net;
  net.source_name = path;
  if (!net.read_include) net.read_include = [](const std::string& p) { return ReadFile(p); };
  if (options.warnings) net.warnings = options.warnings;
  return ParseNet(text, net);
}

}  // namespace gpool::fabric
