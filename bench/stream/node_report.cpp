// Printing and JSON of the node modes (htp-stream-bench --gpus N).
#include "node_report.hpp"

#include <cstdio>

namespace htp::bench {

void print_node_table(const std::vector<node_result>& results, double budget_ms,
                      double tail_budget_ms) {
  if (results.empty()) return;
  std::printf("\nnode of %zu GPUs, one host tier (same per-GPU HBM budget)\n",
              results.front().gpus);
  std::printf("%-26s %9s %9s %7s | %10s %8s %7s | %9s %9s %8s | %9s %6s\n", "mode", "step p50",
              "p99", "budget", "MB/step/GPU", "hostGB/s", "shared", "coll/lyr", "stall/st",
              "sync/lyr", "host MB", "corrupt");
  for (const auto& r : results) {
    if (r.skipped) {
      std::printf("%-26s skipped: %s\n", r.mode.c_str(), r.skip_reason.c_str());
      continue;
    }
    std::printf("%-26s %9.2f %9.2f %7s | %10.1f %8.2f %6.0f%% | %9.3f %9.2f %8.2f | %9.1f %6llu\n",
                r.mode.c_str(), r.step.p50, r.step.p99, r.meets_budget ? "meets" : "MISSES",
                r.bytes_per_step_per_gpu / 1e6, r.host_gbps, 100.0 * r.shared_link_use,
                r.collective_ms_per_layer, r.stall_ms_per_step, r.barriers_per_layer,
                static_cast<double>(r.host_tier_bytes) / 1e6,
                static_cast<unsigned long long>(r.mismatches));
  }
  std::printf("%-26s %9s %9s %9s %8s %8s\n", "mode", "resident", "ms/64MiB", "faults/ms", "HBM pk",
              "link%");
  for (const auto& r : results) {
    if (r.skipped) continue;
    std::printf("%-26s %9d %9.3f %9.4f %7.1f%% %7.1f%%\n", r.mode.c_str(), r.resident_layers,
                r.fault_ms_per_64mib_page, r.faults_per_ms, r.hbm_peak_pct, r.link_use_pct);
  }
  for (const auto& r : results) {
    if (r.skipped || r.squeeze_leave_bytes == 0) continue;
    std::printf("%s: HBM forced short to %.0f MiB for paged tensors (a %.2f GB block took the "
                "rest); %.1f acquires "
                "per step per GPU served from host memory (degraded); step p99.9 %.2f ms (nearest "
                "rank of %zu steps) "
                "against the %.0f ms tail budget: %s\n",
                r.mode.c_str(), static_cast<double>(r.squeeze_leave_bytes) / 1048576.0,
                static_cast<double>(r.squeeze_block_bytes) / 1e9, r.degraded_per_step, r.step.p999,
                r.step_ms.size(), tail_budget_ms,
                r.step.p999 <= tail_budget_ms ? "within" : "EXCEEDS");
  }
  std::printf("(times in ms; budget: step p99 <= %.0f ms, the slowest GPU's step; MB/step/GPU: "
              "bytes paged in per\n"
              " step per GPU; hostGB/s: all GPUs' page-ins over the timed wall time; shared: of "
              "the shared link's cap;\n"
              " coll/lyr: the all-reduce per layer (tensor-parallel) or the barrier cost per layer "
              "(swap-and-shard: the\n"
              " compute stream's wait for gathered layers, per layer), device-side; sync/lyr: "
              "swap-and-shard's compute-\n"
              " stream waits per layer (0.5 = once per two layers); host MB: the one host tier's "
              "bytes, every mode once; corrupt:\n"
              " weight samples that differ from the registered bytes, the single-GPU run's "
              "patterns; resident: layers kept\n"
              " in HBM on every GPU (--resident); ms/64MiB: the wait of faults and late prefetches "
              "per 64 MiB, per GPU;\n"
              " faults/ms: faults and late prefetches per timed ms per GPU; HBM pk: the fullest "
              "GPU's peak; link%%: each\n"
              " GPU's page-in rate over its link peak)\n",
              budget_ms);
}

nlohmann::json to_json(const node_result& r) {
  if (r.skipped)
    return {{"mode", r.mode}, {"gpus", r.gpus}, {"skipped", true}, {"skip_reason", r.skip_reason}};
  return {{"mode", r.mode},
          {"gpus", r.gpus},
          {"step_ms", r.step_ms},
          {"step_ms_p50", r.step.p50},
          {"step_ms_p99", r.step.p99},
          {"step_ms_p999", r.step.p999},
          {"step_ms_max", r.step.max},
          {"squeeze_leave_bytes", r.squeeze_leave_bytes},
          {"squeeze_block_bytes", r.squeeze_block_bytes},
          {"degraded_acquires_per_step", r.degraded_per_step},
          {"meets_budget", r.meets_budget},
          {"bytes_per_step_per_gpu", r.bytes_per_step_per_gpu},
          {"host_gbps", r.host_gbps},
          {"shared_link_use", r.shared_link_use},
          {"collective_ms_per_layer", r.collective_ms_per_layer},
          {"layers_per_sync", r.layers_per_sync},
          {"barriers_per_layer", r.barriers_per_layer},
          {"layer_source", r.layer_source},
          {"interconnect_gbps", r.interconnect_gbps},
          {"interconnect_measured", r.interconnect_measured},
          {"stall_ms_per_step", r.stall_ms_per_step},
          {"host_tier_bytes", r.host_tier_bytes},
          {"host_budget_bytes", r.host_budget_bytes},
          {"resident_layers", r.resident_layers},
          {"fault_ms_per_64mib_page", r.fault_ms_per_64mib_page},
          {"faults_per_ms", r.faults_per_ms},
          {"hbm_peak_pct", r.hbm_peak_pct},
          {"link_use_pct", r.link_use_pct},
          {"timing_only", r.timing_only},
          {"time_scale", r.time_scale},
          {"verification_mismatches", r.mismatches}};
}

}  // namespace htp::bench
