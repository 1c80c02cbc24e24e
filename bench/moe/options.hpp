// htp-moe-bench's command line: its options, their defaults and the parser.
#pragma once

#include "common/bench_device.hpp"

#include <htp/pager.hpp>

#include <cstdint>
#include <string>

namespace htp::bench {

/// Every option of htp-moe-bench, with its default. The device ones (--backend, --sim-link-gbps,
/// --sim-latency-us) are in `device`; timing-only sim unless --store-bytes.
struct moe_options {
  device_options device = [] {
    device_options d;
    d.backend = "sim";
    d.sim_link_gbps = 4;
    d.sim_latency_us = 5;
    d.sim_timing_only = true;
    return d;
  }();
  bool store_bytes = false;
  std::string model_name = "mixtral-8x7b", dtype_name = "bf16";
  int layers = 4, tokens = 1, steps = 32, warmup = 8;
  std::string sweep = "0.3,0.5,0.75", policies = "today,lru,popularity";
  std::string json_path, trace_out, trace_in;
  double zipf_s = 1.1;
  int drift_every = 0;
  std::uint64_t seed = 1;
  double half_life = pager_config{}.popularity_half_life;
  double slab_mib = 64, page_kib = 64, chunk_mib = 2, sim_compute_gbps = 0;
};

/// Parses argv into `o`. Returns -1 to go on, or the exit code to return now (0 after --help,
/// non-zero for a bad command line, which it has reported).
int parse_moe_options(int argc, char** argv, moe_options& o);

}  // namespace htp::bench
