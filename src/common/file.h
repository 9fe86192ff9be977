// Small file helpers shared by loaders, writers and daemons.
//
// WriteFileAtomic writes to a temporary file in the same directory, fsyncs it and renames it over
// the target, so a reader (OpenSM rereading partitions.conf, a restarted daemon) sees either the
// old or the new content, never a torn one. Thread-compatible.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpool {

StatusOr<std::string> ReadFile(const std::string& path);
Status WriteFileAtomic(const std::string& path, std::string_view content);

// Iterates the lines of a text buffer with 1-based line numbers, for parsers that report
// file:line. Strips a trailing '\r'. Does not copy.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : text_(text) {}
  // Returns false at the end.
  bool Next(std::string_view* line);
  int line_number() const { return line_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 0;
};

// Trims ASCII white space at both ends.
std::string_view Trim(std::string_view s);
// Splits on a single character; keeps empty fields.
std::vector<std::string_view> Split(std::string_view s, char sep);

}  // namespace gpool
