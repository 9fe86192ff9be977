// Replays fuzz corpora through the fuzz targets in ordinary (gcc, non-libFuzzer) builds, so that
// every input that once crashed a parser (fuzz/corpus/NAME/, crashers included) is run by CTest
// and a regression fails CI. Each *_fuzz.cc is compiled here with its LLVMFuzzerTestOneInput
// renamed to GpoolFuzz_NAME (fuzz/CMakeLists.txt), so one binary holds all targets.
// Usage: fuzz_replay NAME PATH... (files, or directories whose regular files are inputs).
// Exits 1 when a path is missing or holds no input; a crash or abort is the failure mode the
// sanitizer builds (make test-asan) catch best.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define GPOOL_FUZZ_TARGET(name) extern "C" int GpoolFuzz_##name(const uint8_t* data, size_t size);
#include "fuzz_targets.inc"
#undef GPOOL_FUZZ_TARGET

namespace {

using Entry = int (*)(const uint8_t*, size_t);

struct Target {
  const char* name;
  Entry entry;
};

const Target kTargets[] = {
#define GPOOL_FUZZ_TARGET(name) {#name, &GpoolFuzz_##name},
#include "fuzz_targets.inc"
#undef GPOOL_FUZZ_TARGET
};

bool RunFile(Entry entry, const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz_replay: cannot read %s\n", p.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "fuzz_replay: %s (%zu bytes)\n", p.c_str(), bytes.size());
  // A copy of exactly the input's size, so that ASan sees reads past the end.
  std::vector<uint8_t> data(bytes.begin(), bytes.end());
  entry(data.empty() ? nullptr : data.data(), data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_replay NAME PATH...\n");
    return 2;
  }
  Entry entry = nullptr;
  for (const Target& t : kTargets) {
    if (std::strcmp(t.name, argv[1]) == 0) entry = t.entry;
  }
  if (entry == nullptr) {
    std::fprintf(stderr, "fuzz_replay: no fuzz target '%s'\n", argv[1]);
    return 2;
  }
  size_t n = 0;
  for (int i = 2; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) n += RunFile(entry, f);
    } else if (std::filesystem::is_regular_file(p, ec)) {
      n += RunFile(entry, p);
    } else {
      std::fprintf(stderr, "fuzz_replay: %s: no such file or directory\n", argv[i]);
      return 1;
    }
  }
  if (n == 0) {
    std::fprintf(stderr, "fuzz_replay: %s: no inputs\n", argv[1]);
    return 1;
  }
  std::printf("fuzz_replay %s: %zu inputs, no crash\n", argv[1], n);
  return 0;
}
