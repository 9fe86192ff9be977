// libFuzzer target for the fabric file parsers: ibnetdiscover/ibsim net text and the Clos CSV
// take files from operators and other tools. The first byte picks the parser; the rest is the
// file. Beyond "never crash", every fabric that parses must survive the round trip the project
// promises: written as ibnetdiscover text (and as an ibsim net when its names allow) it parses
// back to the same fabric, or the target aborts. The other writers run on it too.
// Corpus: fuzz/corpus/fabric_parse_fuzz (the testdata/fabric files behind a selector byte).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fabric/clos_csv.h"
#include "fabric/compare.h"
#include "fabric/ibnetdiscover.h"
#include "fabric/writers.h"

namespace {

using namespace gpool::fabric;

void CheckRoundTrip(const Fabric& f, const gpool::StatusOr<std::string>& text, const char* what) {
  if (!text.ok()) return;  // the writer refused (a name it cannot hold): that is fine
  NetParseOptions o;
  o.source_name = "written.net";
  auto back = ParseNet(*text, o);
  gpool::Status same = back.ok() ? SameFabric(f, *back, CompareOptions{.descriptions = true})
                                 : back.status();
  if (!same.ok()) {
    std::fprintf(stderr, "%s round trip failed: %s\n--- written ---\n%s\n", what,
                 same.ToString().c_str(), text->c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  gpool::StatusOr<Fabric> f = gpool::Status::InvalidArgument("unset");
  if (data[0] % 2 == 0) {
    NetParseOptions o;
    o.source_name = "dir/main.net";
    std::string self(text);
    // "self.net" is the input itself (so includes can cycle); "inc.net" a small record.
    o.read_include = [&self](const std::string& path) -> gpool::StatusOr<std::string> {
      if (path == "dir/self.net") return self;
      if (path == "dir/inc.net") return std::string("Switch 2 \"inc\"\n[1] \"inc\"[2]\n");
      return gpool::Status::NotFound("no file " + path);
    };
    f = ParseNet(text, o);
  } else {
    ClosCsvOptions o;
    o.hcas_per_host = 1 + data[0] / 64;  // 1..4
    f = ParseClosCsv(text, o);
  }
  if (!f.ok()) return 0;
  CheckRoundTrip(*f, WriteIbnetdiscover(*f), "ibnetdiscover");
  CheckRoundTrip(*f, WriteIbsimNet(*f), "ibsim");
  (void)WriteSlurmTopology(*f);
  (void)WriteDot(*f);
  (void)WriteJson(*f, -1);
  return 0;
}
