// One entry point for reading a fabric file in any supported format.
//
// Formats: ibnetdiscover dumps and ibsim net files (one grammar, see ibnetdiscover.h; the two
// names differ only in what auto-detection reports) and the three-layer Clos CSV (clos_csv.h).
// Auto-detection looks at the content, not only the name: a first line that is a CSV header
// naming DSW/PSW/ASW (or a .csv name) is clos-csv; a file with `include`, `Hca` records or ibsim
// default lines (`width=`, `speed=`) is ibsim; one with Switch/Ca/Rt records or GUID lines is
// ibnetdiscover. Anything else is an error asking for an explicit format.
//
// Thread safety: stateless functions; safe to call concurrently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fabric/clos_csv.h"
#include "fabric/ibnetdiscover.h"
#include "fabric/model.h"

namespace gpool::fabric {

enum class FabricFormat : uint8_t { kAuto, kIbnetdiscover, kIbsim, kClosCsv };

// "auto", "ibnetdiscover", "ibsim", "clos-csv".
std::string_view FabricFormatName(FabricFormat f);
StatusOr<FabricFormat> ParseFabricFormat(std::string_view name);

// Never returns kAuto. `path` is used for its extension and in the error.
StatusOr<FabricFormat> DetectFabricFormat(std::string_view path, std::string_view text);

struct LoadOptions {
  FabricFormat format = FabricFormat::kAuto;
  ClosCsvOptions clos;  // used for clos-csv (source_name is set from the path)
  // ibnetdiscover/ibsim: default link rate and LID assignment (source_name and read_include are
  // set by LoadFabric).
  NetParseOptions net;
  // When set, receives the format actually used.
  FabricFormat* detected = nullptr;
  // When set, receives non-fatal findings ("file:line: ...").
  std::vector<std::string>* warnings = nullptr;
};

StatusOr<Fabric> LoadFabric(const std::string& path, const LoadOptions& options = {});

}  // namespace gpool::fabric
