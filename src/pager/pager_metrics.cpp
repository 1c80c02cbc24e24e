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
  pager_metrics m = stats.snapshot();
  m.latency_budget_ms = static_cast<std::uint64_t>(config.latency_budget.count());
  m.hbm = occupancy_of(*hbm, stats.hbm_peak_pct(), stats.hbm_mean_pct());
  if (host) {
    const auto host_pct = 100.0 * static_cast<double>(host->statistics().bytes_in_use) /
                          static_cast<double>(host->capacity_bytes());
    m.host = occupancy_of(*host, host_pct, host_pct);
  }
  for (const auto& [ptr, r] : host_regions) m.caller_host_bytes += r.bytes;
  m.events_created = events.created();
  // fault_wait: filled by pager::metrics() outside the lock (sorting 2^20 samples takes a while).
  m.transfers = engine->metrics();
  return m;
}

std::string pager::impl::oom_message(std::size_t bytes, const std::string& name,
                                     const char* what) const {
  std::size_t pinned = 0, in_flight_bytes = 0;
  std::size_t pinned_count = 0;
  for (std::uint32_t s = 0; s < tensors.size(); ++s) {  // a rare error path: a scan is fine
    const detail::tensor_record& t = tensors[s];
    if (!t.live || !t.hbm || t.device_resident) continue;
    if (t.pins > 0) {
      pinned += t.bytes;
      ++pinned_count;
    } else if (t.pending != detail::pending_kind::none || !t.release_events.empty()) {
      in_flight_bytes += t.bytes;
    }
  }
  const auto f = hbm->fragmentation();
  const std::size_t cap = hbm->capacity_bytes();
  return detail::concat(
      "htp out of memory: cannot ", what, " '", name, "' (", bytes, " bytes). HBM budget ", cap,
      " bytes; held ", hbm_bytes_held, ", free ", cap - std::min(cap, hbm_bytes_held),
      "; pinned by ", pinned_count, " acquired tensor(s): ", pinned,
      " bytes; device-resident: ", stats.counters().device_resident_tensors, " tensor(s), ",
      stats.counters().device_resident_bytes, " bytes; in flight: ", in_flight_bytes,
      " bytes; fragmentation ", 100.0 * f.combined, "%; largest free extent ",
      f.largest_free_extent_bytes,
      " bytes. The ladder evicted what it could (clean, dirty, in-flight, compaction). Release "
      "tensors sooner, acquire fewer at once, raise hbm_budget_bytes, or set on_oom = "
      "allow_degraded to serve from host memory.");
}

}  // namespace htp
