// libFuzzer target for ReadLftDump (fabric/lft_dump.h): opensm-lfts.dump files come from OpenSM
// and from operators. The fabric is fixed (a two-level fat-tree of 4-port switches, 8 HCAs); the
// first byte's low bit turns the LID-owner check on or off, the rest is the dump. Beyond "never
// crash": tables that parse must survive WriteLftDump -> ReadLftDump unchanged, or the target
// aborts. Corpus: fuzz/corpus/lft_dump_fuzz (minhop and updn dumps of that fabric).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fabric/generators.h"
#include "fabric/lft_dump.h"

namespace {

using namespace gpool::fabric;

const Fabric& TheFabric() {
  static const Fabric f = *GenerateFatTree({.levels = 2, .radix = 4});
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Fabric& f = TheFabric();
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  LftReadOptions o{.source_name = "fuzz.dump", .check_lid_owners = (data[0] & 1) != 0};
  auto t = ReadLftDump(text, f, o);
  if (!t.ok()) return 0;
  std::string written = WriteLftDump(f, *t);
  auto back = ReadLftDump(written, f, {.source_name = "written.dump"});
  bool same = back.ok();
  for (NodeId s : f.switches())
    for (uint32_t lid = 1; same && lid <= f.max_lid(); ++lid)
      same = t->out_port(s, static_cast<Lid>(lid)) == back->out_port(s, static_cast<Lid>(lid));
  if (!same) {
    std::fprintf(stderr, "lft round trip failed: %s\n--- written ---\n%s\n",
                 back.ok() ? "tables differ" : back.status().ToString().c_str(), written.c_str());
    std::abort();
  }
  return 0;
}
