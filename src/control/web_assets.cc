#include "control/web_assets.h"

namespace gpool::control {

const WebAsset* FindWebAsset(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (size_t i = 0; i < kWebAssetCount; ++i) {
    if (path == kWebAssets[i].path) return &kWebAssets[i];
  }
  return nullptr;
}

}  // namespace gpool::control
