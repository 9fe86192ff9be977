// The dashboard's static files (web/*.html, *.js, *.css, *.svg), embedded at build time by
// cmake/embed_web.cmake into a generated source, so the controller needs no asset directory.
//
// Thread safety: immutable data; safe from any thread.
#pragma once

#include <cstddef>
#include <string_view>

namespace gpool::control {

struct WebAsset {
  const char* path;          // "/index.html"
  const char* content_type;  // "text/html; charset=utf-8"
  const unsigned char* data;  // `size` bytes (plus a terminating 0 that is not counted)
  size_t size;
};

extern const WebAsset kWebAssets[];
extern const size_t kWebAssetCount;

// The asset served at `path` ("/" means "/index.html"), or nullptr.
const WebAsset* FindWebAsset(std::string_view path);

}  // namespace gpool::control
