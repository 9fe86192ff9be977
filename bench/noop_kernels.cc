// A plugin of CPU kernels for the emulated backend (src/remote/server/emulated_kernels.h) in
// which every kernel does nothing: noop(int) (bench/layer_kernels.cu) and each kernel named in
// the environment variable GPOOL_BENCH_NOOP_KERNELS (mangled names, comma-separated), read when
// a session's backend loads the plugin. bench/driver_layer.sh names there the cuBLAS kernels
// that layer_static's SGEMM launches, so that the SGEMM loop measures the interception, not a
// CPU matrix product. A bench aid only: results of such kernels are garbage.
#include <cstdlib>
#include <string>
#include <vector>

#include "remote/server/emulated_kernels.h"

namespace {

int Noop(const gpool_emu_launch*) { return 0; }

}  // namespace

extern "C" const gpool_emu_kernel* gpool_emulated_kernels(size_t* count) {
  // Built once per process (each session worker loads the plugin itself); the names' storage
  // lives as long as the table.
  static std::vector<std::string>* names = [] {
    auto* v = new std::vector<std::string>{"_Z4noopi"};
    const char* env = std::getenv("GPOOL_BENCH_NOOP_KERNELS");
    std::string list = env ? env : "";
    for (size_t pos = 0; pos < list.size();) {
      size_t end = list.find(',', pos);
      if (end == std::string::npos) end = list.size();
      if (end > pos) v->push_back(list.substr(pos, end - pos));
      pos = end + 1;
    }
    return v;
  }();
  static std::vector<gpool_emu_kernel>* table = [] {
    auto* t = new std::vector<gpool_emu_kernel>;
    for (const std::string& n : *names) t->push_back({n.c_str(), Noop});
    return t;
  }();
  *count = table->size();
  return table->data();
}
