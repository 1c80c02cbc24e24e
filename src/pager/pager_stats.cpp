// The pager's statistics (pager_stats.hpp), and the metrics that are generated from the one
// description of the counters: to_json and metrics_delta.
#include "pager/pager_stats.hpp"

#include "pager/tensor_table.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace htp {
namespace detail {

pager_stats::pager_stats(std::size_t trace_capacity) {
  if (trace_capacity > 0) trace_ = std::make_unique<trace_log>(start_, trace_capacity);
}

void pager_stats::registered(const tensor_record& t) {
  ++counters_.registered_tensors;
  if (t.source.is_coded()) {
    ++counters_.compressed_tensors;
    counters_.compressed_bytes += t.bytes;
    counters_.compressed_wire_bytes += t.source.wire_bytes();
  }
  if (t.source.place == source_place::file) {
    ++counters_.file_backed_tensors;
    counters_.file_backed_bytes += t.bytes;
  }
}

void pager_stats::unregistered(const tensor_record& t) {
  --counters_.registered_tensors;
  if (t.source.is_coded()) {
    --counters_.compressed_tensors;
    counters_.compressed_bytes -= t.bytes;
    counters_.compressed_wire_bytes -= t.source.wire_bytes();
  }
  if (t.source.place == source_place::file) {
    --counters_.file_backed_tensors;
    counters_.file_backed_bytes -= t.bytes;
  }
  if (t.device_resident && t.hbm) {
    --counters_.device_resident_tensors;
    counters_.device_resident_bytes -= t.bytes;
  }
}

void pager_stats::placed_resident(const tensor_record& t) {
  ++counters_.device_resident_tensors;
  counters_.device_resident_bytes += t.bytes;
}

void pager_stats::load_started(const tensor_record& t, transfer_priority priority) {
  ++counters_.page_ins;
  counters_.page_in_bytes += t.bytes;
  counters_.page_in_wire_bytes += t.source.wire_bytes();
  if (priority == transfer_priority::prefetch) ++counters_.prefetches;
}

void pager_stats::evicted(const tensor_record& t, eviction how, cause why) {
  ++counters_.evictions;
  if (how == eviction::load_in_flight) ++counters_.evictions_in_flight;
  if (how == eviction::write_back) {
    ++counters_.write_backs;
    counters_.write_back_bytes += t.bytes;
    if (t.kind == tensor_kind::activation) counters_.activation_write_back_bytes += t.bytes;
  }
  if (t.notes.prefetched_unused) ++counters_.wasted_prefetches;
  if (why == cause::demand) {
    ++(how == eviction::write_back ? counters_.oom.write_back_dirty : counters_.oom.evict_clean);
  }
}

void pager_stats::move_started(const tensor_record& t) { counters_.compaction_bytes += t.bytes; }

void pager_stats::compaction_started(std::size_t moves, cause why) {
  ++counters_.compactions;
  counters_.compaction_moves += moves;
  if (why == cause::demand) ++counters_.oom.compact;
}

void pager_stats::load_finished(const tensor_record& t, transfer_ticket ticket,
                                clock::time_point at, std::chrono::nanoseconds latency) {
  if (t.notes.fault_load) fault_latency_.record(static_cast<std::uint64_t>(latency.count()));
  close_wait(ticket, at);
  if (!trace_) return;
  // Category: why the copy ran. A prefetch requeued at fault priority stays a prefetch
  // ("late prefetch"), so "fault" spans count exactly the faults in the metrics.
  const char* why = t.notes.fault_load                                    ? "fault"
                    : t.notes.ticket_priority == transfer_priority::fault ? "late prefetch"
                                                                          : "prefetch";
  trace_->add(trace_track::prefetch, t.name, why, t.times.ticket_start, at);
}

void pager_stats::load_failed(const tensor_record&, transfer_ticket ticket,
                              const std::exception_ptr& why) {
  ++counters_.failed_loads;
  close_wait(ticket, std::nullopt);
  if (!why) return;
  try {
    std::rethrow_exception(why);
  } catch (const corrupt_data&) {
    ++counters_.corrupt_page_ins;
  } catch (...) {
  }
}

void pager_stats::copy_finished(const tensor_record& t, bool ok, std::chrono::nanoseconds latency) {
  if (!ok || !trace_) return;
  const auto end = t.times.ticket_start + std::chrono::duration_cast<clock::duration>(latency);
  trace_->add(trace_track::reduction, t.name, to_string(t.notes.ticket_priority),
              t.times.ticket_start, end);
}

void pager_stats::detached_load_finished(transfer_ticket ticket, bool ok, bool fault,
                                         clock::time_point started,
                                         std::chrono::nanoseconds latency, std::size_t,
                                         const std::string& name) {
  if (!ok) {
    ++counters_.failed_loads;
    close_wait(ticket, std::nullopt);
    return;
  }
  if (fault) fault_latency_.record(static_cast<std::uint64_t>(latency.count()));
  const auto at = started + std::chrono::duration_cast<clock::duration>(latency);
  if (trace_)
    trace_->add(trace_track::prefetch, name, fault ? "fault" : "late prefetch", started, at);
  close_wait(ticket, at);
}

void pager_stats::close_wait(transfer_ticket ticket, std::optional<clock::time_point> at) {
  if (open_waits_.empty()) return;
  const auto w = open_waits_.find(ticket.id);
  if (w == open_waits_.end()) return;
  if (at) fault_wait(w->second.from, *at, w->second.bytes);
  open_waits_.erase(w);
}

std::uint64_t pager_stats::ns_between(clock::time_point from, clock::time_point to) noexcept {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
  return ns > 0 ? static_cast<std::uint64_t>(ns) : 0;
}

void pager_stats::fault_wait(clock::time_point from, clock::time_point to, std::size_t bytes) {
  if (from == clock::time_point{}) return;
  if (fault_waits_.size() >= fault_wait_cap) {
    ++fault_waits_dropped_;
    return;
  }
  fault_waits_.push_back({ns_between(from, to), bytes});
}

void pager_stats::acquire_succeeded(const acquired_element* elements, std::size_t n,
                                    clock::time_point called) {
  auto& c = counters_;
  c.acquires += n;
  for (std::size_t i = 0; i < n; ++i) {
    const acquired_element& e = elements[i];
    switch (e.outcome) {
      case acquire_outcome::hit: ++c.hits; break;
      case acquire_outcome::prefetch_hit:
        ++c.hits;
        ++c.prefetch_hits;
        break;
      case acquire_outcome::late_prefetch:
        ++c.hits;
        ++c.late_prefetches;
        break;
      case acquire_outcome::fault: ++c.faults; break;
      case acquire_outcome::degraded: ++c.degraded_acquires; break;
      case acquire_outcome::degraded_oom:
        ++c.degraded_acquires;
        ++c.oom.degraded;
        break;
      case acquire_outcome::fresh: ++c.activation_fresh_acquires; break;
    }
    // A fault's wait: from the call to its bytes' arrival, now (they came while the call waited)
    // or when the load still in flight ends. The first acquire that waits for a load owns it.
    if (e.outcome != acquire_outcome::fault && e.outcome != acquire_outcome::late_prefetch)
      continue;
    if (e.loading) {
      open_waits_.try_emplace(e.loading.id, open_wait{called, e.bytes});
    } else if (e.loaded_at >= called) {
      fault_wait(called, e.loaded_at, e.bytes);
    }
  }
}

void pager_stats::acquire_failed(std::size_t n, bool exhausted) {
  counters_.acquires += n;
  counters_.failed_acquires += n - (exhausted ? 1 : 0);  // the ladder counted its own (oom.thrown)
}

double pager_stats::timely_share(const pager_metrics& m) noexcept {
  const std::uint64_t prefetched = m.prefetch_hits + m.late_prefetches;
  const std::uint64_t timely = m.prefetch_hits + std::min(m.prefetches_on_time, m.late_prefetches);
  return prefetched ? static_cast<double>(timely) / static_cast<double>(prefetched) : 1.0;
}

void pager_stats::prefetches_late(std::uint32_t prefetches, std::chrono::nanoseconds stall) {
  for (std::uint32_t i = 0; i < prefetches; ++i)
    prefetch_lateness_.record(static_cast<std::uint64_t>(stall.count()));
}

void pager_stats::blocked(clock::time_point from) {
  counters_.host_blocked_ns += ns_between(from, clock::now());
}

void pager_stats::last_release(const tensor_record& t) {
  if (trace_)
    trace_->add(trace_track::host_acquired, t.name, "acquired", t.times.acquired_at, clock::now());
}

void pager_stats::last_use(const tensor_record& t) {
  ++counters_.activation_dead_releases;
  last_release(t);
}

void pager_stats::discarded(const tensor_record&) { ++counters_.activation_discards; }

void pager_stats::compute_span(const std::string& name, clock::time_point begin,
                               clock::time_point end) {
  if (trace_)
    trace_->add(trace_track::compute, name, "compute", begin, end);  // trace_log locks itself
}

void pager_stats::sample_occupancy(std::size_t held, std::size_t capacity) {
  const auto now = clock::now();
  const double pct = 100.0 * static_cast<double>(held) / static_cast<double>(capacity);
  hbm_occupancy_integral_ += pct * std::chrono::duration<double>(now - last_sample_).count();
  last_sample_ = now;
  hbm_peak_pct_ = std::max(hbm_peak_pct_, pct);
}

void pager_stats::reset(std::size_t held, std::size_t capacity) {
  pager_metrics fresh;  // the levels survive; the event counts start afresh
#define HTP_KEEP_LEVEL(field, kind, help) \
  if (counter_kind::kind == counter_kind::level) fresh.field = counters_.field;
  HTP_PAGER_COUNTERS(HTP_KEEP_LEVEL)
#undef HTP_KEEP_LEVEL
  counters_ = fresh;
  fault_latency_.reset();
  prefetch_lateness_.reset();
  if (trace_) trace_->clear();
  fault_waits_.clear();
  open_waits_.clear();
  fault_waits_dropped_ = 0;
  start_ = last_sample_ = clock::now();
  hbm_occupancy_integral_ = 0;
  hbm_peak_pct_ = 100.0 * static_cast<double>(held) / static_cast<double>(capacity);
}

double pager_stats::hbm_mean_pct() const {
  const double secs = std::chrono::duration<double>(clock::now() - start_).count();
  return secs > 0 ? hbm_occupancy_integral_ / secs : 0;
}

pager_metrics pager_stats::snapshot() const {
  pager_metrics m = counters_;
  m.elapsed_ms = std::chrono::duration<double, std::milli>(clock::now() - start_).count();
  m.fault_rate_per_ms = m.elapsed_ms > 0 ? static_cast<double>(m.faults) / m.elapsed_ms : 0;
  m.fault_latency = fault_latency_.summary();
  m.prefetch_lateness = prefetch_lateness_.summary();
  m.prefetch_timely_share = timely_share(m);
  return m;
}

fault_wait_summary pager_stats::summarize(const std::vector<fault_wait_sample>& samples,
                                          std::uint64_t dropped, double peak) {
  fault_wait_summary s;
  s.count = samples.size();
  s.dropped = dropped;
  if (samples.empty()) return s;
  std::vector<double> ms, floor_multiple;
  ms.reserve(samples.size());
  floor_multiple.reserve(samples.size());
  double total_ms = 0;
  for (const auto& w : samples) {
    const double x = static_cast<double>(w.ns) / 1e6;
    ms.push_back(x);
    total_ms += x;
    s.bytes += w.bytes;
    if (peak > 0 && w.bytes > 0)
      floor_multiple.push_back(x / (static_cast<double>(w.bytes) / peak * 1e3));
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
  s.ms_per_64mib_page =
      s.bytes ? total_ms * static_cast<double>(std::size_t{64} << 20) / static_cast<double>(s.bytes)
              : 0;
  s.floor_multiple_p50 = quantile(floor_multiple, 0.5);
  s.floor_multiple_p99 = quantile(floor_multiple, 0.99);
  return s;
}

}  // namespace detail

pager_metrics metrics_delta(const pager_metrics& later, const pager_metrics& earlier) noexcept {
  pager_metrics d = later;
  const auto minus = [](std::uint64_t a, std::uint64_t b) { return a >= b ? a - b : 0; };
#define HTP_DELTA_COUNTER(field, kind, help) \
  if (counter_kind::kind != counter_kind::level) d.field = minus(later.field, earlier.field);
  HTP_PAGER_COUNTERS(HTP_DELTA_COUNTER)
#undef HTP_DELTA_COUNTER
#define HTP_DELTA_RUNG(field, help) d.oom.field = minus(later.oom.field, earlier.oom.field);
  HTP_OOM_LADDER_RUNGS(HTP_DELTA_RUNG)
#undef HTP_DELTA_RUNG
  d.elapsed_ms = later.elapsed_ms >= earlier.elapsed_ms ? later.elapsed_ms - earlier.elapsed_ms
                                                        : later.elapsed_ms;
  d.fault_rate_per_ms = d.elapsed_ms > 0 ? static_cast<double>(d.faults) / d.elapsed_ms : 0;
  d.prefetch_timely_share = detail::pager_stats::timely_share(d);
  return d;
}

namespace {

/// Builds the nested JSON object visit_metrics walks.
struct json_writer {
  std::vector<nlohmann::json> open_objects{nlohmann::json::object()};
  std::vector<std::string> names;
  template <typename T>
  void number(const std::string& name, T value) {
    open_objects.back()[name] = value;
  }
  void open(const std::string& name) {
    names.push_back(name);
    open_objects.push_back(nlohmann::json::object());
  }
  void close() {
    nlohmann::json done = std::move(open_objects.back());
    open_objects.pop_back();
    open_objects.back()[names.back()] = std::move(done);
    names.pop_back();
  }
};

}  // namespace

std::string to_json(const pager_metrics& m) {
  json_writer w;
  visit_metrics(m, w);
  return w.open_objects.front().dump(2);
}

}  // namespace htp
