// The pager's metrics: occupancy sampling, the snapshot, the out-of-memory diagnostic, JSON.
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace htp {

void pager::impl::sample_occupancy() {
  const auto now = std::chrono::steady_clock::now();
  const double cap = static_cast<double>(hbm->capacity_bytes());
  const double pct = 100.0 * static_cast<double>(hbm_bytes_held) / cap;
  hbm_occupancy_integral += pct * std::chrono::duration<double>(now - last_sample).count();
  last_sample = now;
  hbm_peak_pct = std::max(hbm_peak_pct, pct);
}

std::uint64_t pager::impl::ns_between(std::chrono::steady_clock::time_point from,
                                      std::chrono::steady_clock::time_point to) noexcept {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
  return ns > 0 ? static_cast<std::uint64_t>(ns) : 0;
}

void pager::impl::record_fault_wait(std::chrono::steady_clock::time_point from,
                                    std::chrono::steady_clock::time_point to, std::size_t bytes) {
  if (from == std::chrono::steady_clock::time_point{}) return;
  if (fault_waits.size() >= fault_wait_cap) {
    ++fault_waits_dropped;
    return;
  }
  fault_waits.push_back({ns_between(from, to), bytes});
}

fault_wait_summary pager::impl::summarize_fault_waits(const std::vector<detail::fault_wait_sample>& fault_waits,
                                                      std::uint64_t dropped, double peak) {
  fault_wait_summary s;
  s.count = fault_waits.size();
  s.dropped = dropped;
  if (fault_waits.empty()) return s;
  std::vector<double> ms, floor_multiple;
  ms.reserve(fault_waits.size());
  floor_multiple.reserve(fault_waits.size());
  double total_ms = 0;
  for (const auto& w : fault_waits) {
    const double x = static_cast<double>(w.ns) / 1e6;
    ms.push_back(x);
    total_ms += x;
    s.bytes += w.bytes;
    if (peak > 0 && w.bytes > 0) floor_multiple.push_back(x / (static_cast<double>(w.bytes) / peak * 1e3));
  }
  // Exact order statistics: the smallest sample with at least q of the samples at or below it.
  const auto quantile = [](std::vector<double>& v, double q) {
    if (v.empty()) return 0.0;
    const auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    const std::size_t i = k == 0 ? 0 : std::min(v.size(), k) - 1;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
    return v[i];
  };
  s.p50_ms = quantile(ms, 0.5);
  s.p90_ms = quantile(ms, 0.9);
  s.p99_ms = quantile(ms, 0.99);
  s.max_ms = *std::max_element(ms.begin(), ms.end());
  s.mean_ms = total_ms / static_cast<double>(ms.size());
  s.sum_ms = total_ms;
  for (const double x : ms) {
    for (std::size_t b = 0; b < s.bucket_counts.size(); ++b) {
      if (x <= fault_wait_summary::bucket_bounds_ms[b]) ++s.bucket_counts[b];
    }
  }
  s.ms_per_64mib_page = s.bytes ? total_ms * static_cast<double>(std::size_t{64} << 20) / static_cast<double>(s.bytes) : 0;
  s.floor_multiple_p50 = quantile(floor_multiple, 0.5);
  s.floor_multiple_p99 = quantile(floor_multiple, 0.99);
  return s;
}

void pager::impl::reset_metrics() {
  const pager_metrics states = counters;  // the states survive; the event counts start afresh
  counters = pager_metrics{};
  counters.registered_tensors = states.registered_tensors;
  counters.device_resident_tensors = states.device_resident_tensors;
  counters.device_resident_bytes = states.device_resident_bytes;
  counters.file_backed_tensors = states.file_backed_tensors;
  counters.file_backed_bytes = states.file_backed_bytes;
  fault_latency.reset();
  if (trace) trace->clear();
  fault_waits.clear();
  fault_waits_dropped = 0;
  start = last_sample = std::chrono::steady_clock::now();
  hbm_occupancy_integral = 0;
  hbm_peak_pct = 100.0 * static_cast<double>(hbm_bytes_held) / static_cast<double>(hbm->capacity_bytes());
}

namespace {
tier_occupancy occupancy_of(const slab_allocator& a, double peak, double mean) {
  const auto s = a.statistics();
  tier_occupancy o;
  o.capacity_bytes = a.capacity_bytes();
  o.used_bytes = s.bytes_in_use;
  o.occupancy_pct = o.capacity_bytes ? 100.0 * static_cast<double>(o.used_bytes) / static_cast<double>(o.capacity_bytes) : 0;
  o.peak_pct = std::max(peak, o.occupancy_pct);
  o.mean_pct = mean;
  o.fragmentation_pct = 100.0 * s.fragmentation.combined;
  o.largest_free_extent_bytes = s.fragmentation.largest_free_extent_bytes;
  return o;
}
}  // namespace

pager_metrics pager::impl::snapshot() const {
  pager_metrics m = counters;
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - start).count();
  m.elapsed_ms = secs * 1e3;
  m.latency_budget_ms = static_cast<std::uint64_t>(config.latency_budget.count());
  m.hbm = occupancy_of(*hbm, hbm_peak_pct, secs > 0 ? hbm_occupancy_integral / secs : 0);
  if (host) {
    const auto host_pct = 100.0 * static_cast<double>(host->statistics().bytes_in_use) /
                          static_cast<double>(host->capacity_bytes());
    m.host = occupancy_of(*host, host_pct, host_pct);
  }
  for (const auto& [ptr, r] : host_regions) m.caller_host_bytes += r.bytes;
  m.events_created = events.created();
  m.fault_rate_per_ms = m.elapsed_ms > 0 ? static_cast<double>(m.faults) / m.elapsed_ms : 0;
  m.fault_latency = fault_latency.summary();
  // fault_wait: filled by pager::metrics() outside the lock (sorting 2^20 samples takes a while).
  m.transfers = engine->metrics();
  return m;
}

std::string pager::impl::oom_message(std::size_t bytes, const std::string& name, const char* what) const {
  std::size_t pinned = 0, in_flight_bytes = 0;
  std::size_t pinned_count = 0;
  for (const auto& t : tensors) {
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
      "; pinned by ", pinned_count, " acquired tensor(s): ", pinned, " bytes; device-resident: ",
      counters.device_resident_tensors, " tensor(s), ", counters.device_resident_bytes, " bytes; in flight: ",
      in_flight_bytes, " bytes; fragmentation ", 100.0 * f.combined, "%; largest free extent ",
      f.largest_free_extent_bytes,
      " bytes. The ladder evicted what it could (clean, dirty, in-flight, compaction). Release "
      "tensors sooner, acquire fewer at once, raise hbm_budget_bytes, or set on_oom = "
      "allow_degraded to serve from host memory.");
}

std::string to_json(const pager_metrics& m) {
  using nlohmann::json;
  const auto lat = [](const latency_summary& s) {
    return json{{"count", s.count}, {"p50_ns", s.p50_ns}, {"p95_ns", s.p95_ns},
                {"p99_ns", s.p99_ns}, {"max_ns", s.max_ns}, {"mean_ns", s.mean_ns}};
  };
  const auto occ = [](const tier_occupancy& o) {
    return json{{"capacity_bytes", o.capacity_bytes}, {"used_bytes", o.used_bytes},
                {"occupancy_pct", o.occupancy_pct}, {"peak_pct", o.peak_pct},
                {"mean_pct", o.mean_pct}, {"fragmentation_pct", o.fragmentation_pct},
                {"largest_free_extent_bytes", o.largest_free_extent_bytes}};
  };
  const auto dir = [](const transfer_direction_metrics& d) {
    return json{{"bytes", d.bytes}, {"chunks", d.chunks}, {"busy_ns", d.busy_ns},
                {"achieved_gbps", d.achieved_gbps}, {"utilization", d.utilization},
                {"token_wait_ns", d.token_wait_ns},
                {"rate_cap_bytes_per_second", d.rate_cap_bytes_per_second},
                {"link_peak_bytes_per_second", d.link_peak_bytes_per_second}};
  };
  json classes = json::object();
  for (std::size_t i = 0; i < transfer_priority_count; ++i) {
    const auto& c = m.transfers.classes[i];
    classes[to_string(static_cast<transfer_priority>(i))] = {
        {"queue_depth", c.queue_depth}, {"submitted", c.submitted}, {"completed", c.completed},
        {"cancelled", c.cancelled}, {"failed", c.failed}, {"latency", lat(c.latency)}};
  }
  json j{
      {"elapsed_ms", m.elapsed_ms},
      {"latency_budget_ms", m.latency_budget_ms},
      {"hbm", occ(m.hbm)},
      {"host", occ(m.host)},
      {"registered_tensors", m.registered_tensors},
      {"caller_host_bytes", m.caller_host_bytes},
      {"device_resident_tensors", m.device_resident_tensors},
      {"device_resident_bytes", m.device_resident_bytes},
      {"file_backed_tensors", m.file_backed_tensors},
      {"file_backed_bytes", m.file_backed_bytes},
      {"events_created", m.events_created},
      {"acquires", m.acquires},
      {"hits", m.hits},
      {"faults", m.faults},
      {"failed_acquires", m.failed_acquires},
      {"failed_loads", m.failed_loads},
      {"fault_rate_per_ms", m.fault_rate_per_ms},
      {"fault_latency", lat(m.fault_latency)},
      {"fault_wait",
       {{"count", m.fault_wait.count}, {"dropped", m.fault_wait.dropped}, {"bytes", m.fault_wait.bytes},
        {"p50_ms", m.fault_wait.p50_ms}, {"p90_ms", m.fault_wait.p90_ms}, {"p99_ms", m.fault_wait.p99_ms},
        {"max_ms", m.fault_wait.max_ms}, {"mean_ms", m.fault_wait.mean_ms},
        {"ms_per_64mib_page", m.fault_wait.ms_per_64mib_page},
        {"floor_multiple_p50", m.fault_wait.floor_multiple_p50},
        {"floor_multiple_p99", m.fault_wait.floor_multiple_p99}}},
      {"host_blocked_ns", m.host_blocked_ns},
      {"page_ins", m.page_ins},
      {"page_in_bytes", m.page_in_bytes},
      {"prefetches", m.prefetches},
      {"prefetch_hits", m.prefetch_hits},
      {"late_prefetches", m.late_prefetches},
      {"wasted_prefetches", m.wasted_prefetches},
      {"prefetch_skipped", m.prefetch_skipped},
      {"evictions", m.evictions},
      {"evictions_in_flight", m.evictions_in_flight},
      {"write_backs", m.write_backs},
      {"write_back_bytes", m.write_back_bytes},
      {"compactions", m.compactions},
      {"compaction_moves", m.compaction_moves},
      {"compaction_bytes", m.compaction_bytes},
      {"degraded_acquires", m.degraded_acquires},
      {"oom_ladder",
       {{"evict_clean", m.oom.evict_clean}, {"write_back_dirty", m.oom.write_back_dirty},
        {"wait_in_flight", m.oom.wait_in_flight}, {"compact", m.oom.compact},
        {"degraded", m.oom.degraded}, {"thrown", m.oom.thrown}}},
      {"transfers",
       {{"h2d", dir(m.transfers.h2d)}, {"d2h", dir(m.transfers.d2h)}, {"d2d", dir(m.transfers.d2d)},
        {"classes", classes}, {"elapsed_ns", m.transfers.elapsed_ns}}},
  };
  return j.dump(2);
}

}  // namespace htp
