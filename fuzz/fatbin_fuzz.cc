// libFuzzer target for the fatbin parser: the container, decompression, cubin .nv.info records
// and PTX parameter lists all take untrusted bytes. The first byte picks the layer so one corpus
// (fuzz/corpus/fatbin_fuzz: the testdata/remote fixtures behind a selector byte) reaches each.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "remote/fatbin/fatbin.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace gpool::remote::fatbin;
  Bytes bytes(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  ParseOptions options;
  options.max_entry_bytes = size_t{4} << 20;  // keep each run fast
  switch (data[0] % 3) {
    case 0: {
      auto entries = ListEntries(bytes);
      if (entries.ok()) {
        for (const Entry& e : *entries) (void)EntryPayload(e, options);
      }
      (void)ParseFatbin(bytes, options);
      break;
    }
    case 1:
      (void)ParseCubin(bytes);
      break;
    default:
      (void)ParsePtx(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
      break;
  }
  return 0;
}
