// Pager.metrics(): the metrics as a dict, built here from the counter lists of htp/metrics.hpp
// (HTP_PAGER_COUNTERS, HTP_OOM_LADDER_RUNGS) and the nested structures, with the keys and nesting
// of to_json (which writes the same snapshot to files); no JSON crosses into Python.
#include "bindings.hpp"

#include <htp/metrics.hpp>

#include <nanobind/stl/string.h>

namespace htp::python {
namespace {

nb::dict latency(const latency_summary& s) {
  nb::dict d;
  d["count"] = s.count;
  d["p50_ns"] = s.p50_ns;
  d["p95_ns"] = s.p95_ns;
  d["p99_ns"] = s.p99_ns;
  d["max_ns"] = s.max_ns;
  d["mean_ns"] = s.mean_ns;
  return d;
}

nb::dict occupancy(const tier_occupancy& o) {
  nb::dict d;
  d["capacity_bytes"] = o.capacity_bytes;
  d["used_bytes"] = o.used_bytes;
  d["occupancy_pct"] = o.occupancy_pct;
  d["peak_pct"] = o.peak_pct;
  d["mean_pct"] = o.mean_pct;
  d["fragmentation_pct"] = o.fragmentation_pct;
  d["largest_free_extent_bytes"] = o.largest_free_extent_bytes;
  return d;
}

nb::dict direction(const transfer_direction_metrics& t) {
  nb::dict d;
  d["bytes"] = t.bytes;
  d["chunks"] = t.chunks;
  d["busy_ns"] = t.busy_ns;
  d["achieved_gbps"] = t.achieved_gbps;
  d["utilization"] = t.utilization;
  d["token_wait_ns"] = t.token_wait_ns;
  d["rate_cap_bytes_per_second"] = t.rate_cap_bytes_per_second;
  d["link_peak_bytes_per_second"] = t.link_peak_bytes_per_second;
  return d;
}

nb::dict fault_wait(const fault_wait_summary& w) {
  nb::dict d;
  d["count"] = w.count;
  d["dropped"] = w.dropped;
  d["bytes"] = w.bytes;
  d["p50_ms"] = w.p50_ms;
  d["p90_ms"] = w.p90_ms;
  d["p99_ms"] = w.p99_ms;
  d["max_ms"] = w.max_ms;
  d["mean_ms"] = w.mean_ms;
  d["ms_per_64mib_page"] = w.ms_per_64mib_page;
  d["floor_multiple_p50"] = w.floor_multiple_p50;
  d["floor_multiple_p99"] = w.floor_multiple_p99;
  return d;
}

nb::dict transfers(const transfer_metrics& t) {
  nb::dict classes;
  for (std::size_t i = 0; i < transfer_priority_count; ++i) {
    const transfer_class_metrics& c = t.classes[i];
    nb::dict d;
    d["queue_depth"] = c.queue_depth;
    d["submitted"] = c.submitted;
    d["completed"] = c.completed;
    d["cancelled"] = c.cancelled;
    d["failed"] = c.failed;
    d["latency"] = latency(c.latency);
    classes[to_string(static_cast<transfer_priority>(i))] = d;
  }
  nb::dict d;
  d["h2d"] = direction(t.h2d);
  d["d2h"] = direction(t.d2h);
  d["d2d"] = direction(t.d2d);
  d["classes"] = classes;
  d["elapsed_ns"] = t.elapsed_ns;
  return d;
}

}  // namespace

nb::dict metrics_dict(const pager_metrics& m) {
  nb::dict d;
  d["elapsed_ms"] = m.elapsed_ms;
  d["latency_budget_ms"] = m.latency_budget_ms;
  d["hbm"] = occupancy(m.hbm);
  d["host"] = occupancy(m.host);
  d["caller_host_bytes"] = m.caller_host_bytes;
  d["events_created"] = m.events_created;
  d["fault_rate_per_ms"] = m.fault_rate_per_ms;
  d["fault_latency"] = latency(m.fault_latency);
  d["prefetch_timely_share"] = m.prefetch_timely_share;
  d["prefetch_lateness"] = latency(m.prefetch_lateness);
  d["fault_wait"] = fault_wait(m.fault_wait);
  d["transfers"] = transfers(m.transfers);
#define HTP_DICT_COUNTER(field, kind, help) d[#field] = m.field;
  HTP_PAGER_COUNTERS(HTP_DICT_COUNTER)
#undef HTP_DICT_COUNTER
  nb::dict rungs;
#define HTP_DICT_RUNG(field, help) rungs[#field] = m.oom.field;
  HTP_OOM_LADDER_RUNGS(HTP_DICT_RUNG)
#undef HTP_DICT_RUNG
  d["oom_ladder"] = rungs;
  return d;
}

}  // namespace htp::python
