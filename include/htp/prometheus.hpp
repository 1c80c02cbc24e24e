// The metrics in the Prometheus text exposition format (version 0.0.4), for a /metrics endpoint
// the program serves itself (htp opens no socket; examples/prometheus_metrics.cpp shows one way).
// Names follow Prometheus's conventions: prefix `htp_`, base units in the name (`_bytes`,
// `_seconds`), counters end in `_total`, ratios are 0..1. Families:
//  - counters: acquires, hits, faults, page-ins and their bytes, prefetches (hits, late, wasted,
//    skipped), evictions, write-backs and bytes, compactions (moves, bytes), degraded acquires,
//    failed acquires/loads, host-blocked seconds, out-of-memory ladder rungs {rung=...}, transfer
//    bytes and token-wait seconds {direction="h2d|d2h|d2d"}, transfer requests
//    {class="fault|prefetch|writeback|compaction", outcome="completed|cancelled|failed"};
//  - gauges: registered tensors, tier capacity / used / largest free extent bytes and
//    occupancy / fragmentation ratios {tier="hbm|host"}, transfer queue depth {class}, rate caps;
//  - one histogram: htp_fault_wait_seconds (buckets fault_wait_summary::bucket_bounds_ms, _sum,
//    _count), the page-fault wait of metrics.hpp.
// A node's exposition labels each GPU's pager families with gpu="k" and adds the node's own
// (host tier, shared links {link=..., direction=...}). A gradient reducer's has its reductions
// {kind="all_reduce|reduce_scatter"}, bytes, steps and seconds {part="total|hidden|exposed"}.
#pragma once

#include <htp/gradient_reducer.hpp>
#include <htp/metrics.hpp>
#include <htp/node.hpp>

#include <string>

namespace htp {

/// Content-Type of the exposition, for an HTTP response header.
inline constexpr const char* prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

/// One pager's metrics as a complete exposition (HELP and TYPE lines, one family after another,
/// ending in a newline). Counters are since construction or pager::reset_metrics (transfer
/// counters since construction), as in the snapshot. Thread-safe (a pure function).
/// Never throws.
std::string to_prometheus(const pager_metrics& m);

/// A node's metrics as one exposition: every GPU's pager families labelled gpu="k", then the
/// node's host tier and shared-link families. Thread-safe (a pure function).
/// Never throws.
std::string to_prometheus(const node_metrics& m);

/// A gradient reducer's figures as one exposition (htp_gradient_* families); `labels` is put
/// inside every sample's braces, e.g. gpu="0" (empty: none; the caller escapes its values).
/// Thread-safe (a pure function). Never throws but std::bad_alloc.
std::string to_prometheus(const gradient_reduction_metrics& m, const std::string& labels = "");

}  // namespace htp
