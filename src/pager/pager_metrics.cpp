// The pager's metrics snapshot (the counters from the stats component, occupancy from the
// allocators, transfers from the engine) and the out-of-memory diagnostic.
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>
#include <cmath>

namespace htp {

namespace {
tier_occupancy occupancy_of(const slab_allocator& a, double peak, double mean) {
  const auto s = a.statistics();
  tier_occupancy o;
  o.capacity_bytes = a.capacity_bytes();
  o.used_bytes = s.bytes_in_use;
  o.occupancy_pct = o.capacity_bytes ? 100.0 * static_cast<double>(o.used_bytes) /
                                           static_cast<double>(o.capacity_bytes)
                                     : 0;
  o.peak_pct = std::max(peak, o.occupancy_pct);
  o.mean_pct = mean;
  o.fragmentation_pct = 100.0 * s.fragmentation.combined;
  o.largest_free_extent_bytes = s.fragmentation.largest_free_extent_bytes;
  return o;
}
}  // namespace

pager_metrics pager::impl::snapshot() const {
  pager_metrics m = observe.stats.snapshot();
  m.latency_budget_ms = static_cast<std::uint64_t>(config.latency_budget.count());
  m.hbm = occupancy_of(*tiers.hbm, observe.stats.hbm_peak_pct(), observe.stats.hbm_mean_pct());
  if (const auto& host = tiers.host) {
    const auto host_pct = 100.0 * static_cast<double>(host->statistics().bytes_in_use) /
                          static_cast<double>(host->capacity_bytes());
    m.host = occupancy_of(*host, host_pct, host_pct);
  }
  for (const auto& [ptr, r] : host_regions) m.caller_host_bytes += r.bytes;
  m.events_created = events.created();
  // fault_wait: filled by pager::metrics() outside the lock (sorting 2^20 samples takes a while).
  m.transfers = tiers.engine->metrics();
  return m;
}

}  // namespace htp
