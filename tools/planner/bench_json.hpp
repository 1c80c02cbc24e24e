// Reading a benchmark's JSON for the planner: the measured host->device rate and, from the stream
// bench, the measured step time. The contract (docs/planner.md):
//   stream bench:   {"measured": {"h2d_gbps": X, "step_ms_p50": Y}, ...}   (both optional alone)
//   htp-bandwidth:  {"fits": {"pinned_H2D": {"peak_gb_per_s": X}}, ...}
#pragma once

#include <string>

namespace htp::bench {

/// What a benchmark measured. Zero means "not in the file".
struct measured_run {
  double h2d_gbps = 0;     // pinned host->device rate, GB/s
  double step_ms_p50 = 0;  // median step time of the stream bench, ms (node runs: the first mode's)
  double link_peak_gbps = 0;  // the stream bench's calibrated copy peak (the cap's reference), GB/s
  std::string source;         // the file it came from
};

/// Reads `path` as the stream bench's or htp-bandwidth's JSON. Throws htp::invalid_argument
/// naming the file when it cannot be read, is not JSON, holds neither contract's fields, or holds
/// a value that is not a positive number (naming the field).
/// `node_mode`: for a node-only stream bench run, whose node[] entry gives step_ms_p50 (e.g.
/// "tensor-parallel"); empty: the first that ran.
measured_run read_bench_json(const std::string& path, const std::string& node_mode = "");

}  // namespace htp::bench
