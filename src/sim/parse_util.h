// Field parsing shared by the simulator's readers: numbers from CSV cells with errors that name
// file:line and the column. Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace gpool::sim {

// Parses a whole cell as a signed integer; "12.0" is accepted when integral.
StatusOr<int64_t> ParseIntField(std::string_view cell, std::string_view field,
                                std::string_view where);
// Parses a whole cell as a finite double.
StatusOr<double> ParseDoubleField(std::string_view cell, std::string_view field,
                                  std::string_view where);

// A CSV header: column name -> index. Errors on duplicate or empty names.
class CsvHeader {
 public:
  static StatusOr<CsvHeader> Parse(std::string_view line, std::string_view where);
  // Index of `name`, or -1.
  int Find(std::string_view name) const;
  // Errors naming the first required column missing from the header.
  Status Require(const std::vector<std::string_view>& names, std::string_view where) const;
  const std::vector<std::string>& names() const { return names_; }
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;
  std::unordered_map<std::string, int> index_;
};

}  // namespace gpool::sim
