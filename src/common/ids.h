// Strongly typed dense ids.
//
// Fabric nodes, ports, links, cluster nodes and jobs are all referred to by small integers that
// index flat arrays. A distinct type per kind makes it a compile error to index the port array
// with a node id. Values; thread-compatible.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <limits>

namespace gpool {

template <typename Tag, typename Rep = uint32_t>
class Id {
 public:
  using rep_type = Rep;
  static constexpr Rep kInvalid = std::numeric_limits<Rep>::max();

  constexpr Id() = default;
  constexpr explicit Id(Rep v) : v_(v) {}
  constexpr Rep value() const { return v_; }
  constexpr bool valid() const { return v_ != kInvalid; }
  friend constexpr auto operator<=>(Id, Id) = default;

 private:
  Rep v_ = kInvalid;
};

}  // namespace gpool

template <typename Tag, typename Rep>
struct std::hash<gpool::Id<Tag, Rep>> {
  size_t operator()(gpool::Id<Tag, Rep> id) const noexcept { return std::hash<Rep>()(id.value()); }
};
