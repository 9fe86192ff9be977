// Fuzzes the simulator's input parsers: openb pods and nodes, generic jobs (CSV, JSONL), the
// Clos CSV, run-time lists, synthetic specs and --queues YAML. Each must return a Status, never
// crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sim/cluster.h"
#include "sim/queues.h"
#include "sim/trace.h"
#include "sim/workload_gen.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)gpool::sim::ParseOpenbTrace(text, "fuzz");
  (void)gpool::sim::ParseJobsCsv(text, "fuzz");
  (void)gpool::sim::ParseJobsJsonl(text, "fuzz");
  (void)gpool::sim::ParseOpenbNodes(text, "fuzz", {});
  (void)gpool::sim::ParseClosCsv(text, "fuzz", {});
  (void)gpool::sim::ReadRuntimes(text, "fuzz");
  (void)gpool::sim::ParseSyntheticSpec(text.substr(0, 256), {});
  (void)gpool::sim::ParseQueueConfig(text, "fuzz");
  return 0;
}
