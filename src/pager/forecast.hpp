// What the pager knows of the future: the schedule of accesses, the routed groups (experts after
// their router) and the experts the running expect() call named. The prefetcher owns and writes
// it (prefetcher.hpp); the room maker reads it to rank victims, the tensor table to key its victim
// index. Not thread-safe: the pager's mutex guards it.
#pragma once

#include <htp/pager.hpp>

#include "pager/routed_groups.hpp"
#include "pager/schedule.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace htp::detail {

struct forecast {
  explicit forecast(const pager_config& c) : config(c), groups(c.popularity_half_life) {}

  const pager_config& config;
  access_schedule schedule;
  routed_groups groups;
  std::vector<std::uint32_t> expected;  // the slots of the expect() call running (not victims)

  /// True when Belady's rule is in force: asked for, or automatic with a schedule.
  bool belady() const {
    return config.eviction == eviction_rule::belady ||
           (config.eviction == eviction_rule::automatic && !schedule.empty());
  }
  /// True when `slot` is one the running expect() call named.
  bool is_expected(std::uint32_t slot) const {
    return std::find(expected.begin(), expected.end(), slot) != expected.end();
  }
};

}  // namespace htp::detail
