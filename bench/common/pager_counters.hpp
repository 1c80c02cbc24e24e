// The pager's counters by name (HTP_PAGER_COUNTERS, include/htp/metrics.hpp), for the drivers'
// results: a driver keeps metrics_delta of its timed steps whole and reports the counters it shows
// under the counters' own names, instead of copying them field by field.
#pragma once

#include <htp/metrics.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace htp::bench {

/// The counter of HTP_PAGER_COUNTERS named `field` in `m`.
/// @throws htp::invalid_argument for a name that is not in the list.
std::uint64_t pager_counter(const pager_metrics& m, std::string_view field);

/// Sets out[field] to the counter `field` of `m` for each of `fields` (out: a JSON object).
/// @throws htp::invalid_argument for a name that is not in HTP_PAGER_COUNTERS.
void add_pager_counters(nlohmann::json& out, const pager_metrics& m,
                        std::initializer_list<const char*> fields);

}  // namespace htp::bench
