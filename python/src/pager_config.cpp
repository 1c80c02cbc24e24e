// htp.PagerConfig and the enums it uses: every pager_config field by its C++ name (pager.hpp).
#include "bindings.hpp"

#include <nanobind/stl/optional.h>

namespace htp::python {

void bind_pager_config(nb::module_& m) {
  nb::enum_<tensor_kind>(m, "TensorKind")
      .value("weight", tensor_kind::weight, "Read-only; eviction just frees HBM.")
      .value("mutable_state", tensor_kind::mutable_state, "KV blocks, activations: written back.");
  nb::enum_<eviction_rule>(m, "EvictionRule")
      .value("automatic", eviction_rule::automatic)
      .value("lru", eviction_rule::lru)
      .value("belady", eviction_rule::belady);
  nb::enum_<prefetch_mode>(m, "PrefetchMode")
      .value("pipeline", prefetch_mode::pipeline)
      .value("min_page_ins", prefetch_mode::min_page_ins);
  nb::enum_<lookahead_mode>(m, "LookaheadMode")
      .value("count", lookahead_mode::count, "The next prefetch_lookahead tensors.")
      .value("automatic", lookahead_mode::automatic,
             "Ahead in bytes and time, by the compute measured on the device.");
  nb::enum_<oom_policy>(m, "OomPolicy")
      .value("throw_error", oom_policy::throw_error)
      .value("allow_degraded", oom_policy::allow_degraded);

  nb::enum_<host_region_kind>(m, "HostRegionKind")
      .value("pinned", host_region_kind::pinned, "Page-locked and mapped for this GPU already.")
      .value("pageable", host_region_kind::pageable, "Ordinary memory; htp registers it.")
      .value("pageable_read_only", host_region_kind::pageable_read_only,
             "Read-only memory (a mapped file); weights only.");

  nb::class_<transfer_link_config>(m, "LinkConfig",
                                   "One direction's rate cap (transfer_engine.hpp).")
      .def(nb::init<>())
      .def_rw("rate_bytes_per_second", &transfer_link_config::rate_bytes_per_second,
              "The cap; None = 80% of the calibrated link.")
      .def_rw("link_bytes_per_second", &transfer_link_config::link_bytes_per_second,
              "The link's peak; None = measured at construction.")
      .def_rw("unlimited", &transfer_link_config::unlimited)
      .def_rw("burst_bytes", &transfer_link_config::burst_bytes);

  nb::class_<pager_config>(m, "PagerConfig", "A pager's configuration (pager.hpp, pager_config).")
      .def(nb::init<>())
      .def_rw("hbm_budget_bytes", &pager_config::hbm_budget_bytes)
      .def_rw("host_budget_bytes", &pager_config::host_budget_bytes)
      .def_rw("slab_bytes", &pager_config::slab_bytes)
      .def_rw("page_bytes", &pager_config::page_bytes)
      .def_rw("chunk_bytes", &pager_config::chunk_bytes)
      .def_rw("max_in_flight_chunks", &pager_config::max_in_flight_chunks)
      .def_rw("h2d", &pager_config::h2d)
      .def_rw("d2h", &pager_config::d2h)
      .def_rw("lookahead", &pager_config::lookahead)
      .def_rw("prefetch_lookahead", &pager_config::prefetch_lookahead)
      .def_rw("lookahead_max_tensors", &pager_config::lookahead_max_tensors)
      .def_rw("popularity_half_life", &pager_config::popularity_half_life)
      .def_rw("eviction", &pager_config::eviction)
      .def_rw("prefetch", &pager_config::prefetch)
      .def_rw("compaction_threshold", &pager_config::compaction_threshold)
      .def_rw("auto_compact", &pager_config::auto_compact)
      .def_rw("on_oom", &pager_config::on_oom)
      .def_prop_rw(
          "latency_budget_ms", [](const pager_config& c) { return c.latency_budget.count(); },
          [](pager_config& c, std::int64_t ms) {
            c.latency_budget = std::chrono::milliseconds(ms);
          })
      .def_rw("trace", &pager_config::trace)
      .def_rw("trace_capacity", &pager_config::trace_capacity)
      .def_rw("checked", &pager_config::checked)
      .def_rw("modelled_compression_ratio", &pager_config::modelled_compression_ratio)
      .def_rw("verify_page_ins", &pager_config::verify_page_ins);
}

}  // namespace htp::python
