// A small model runner: N layers of weights larger than the HBM budget, streamed through the pager
// with a schedule, one "kernel" per layer that reads every weight byte (a checksum kernel on the
// GPU; a host function on sim), and a KV block per layer written each step. Prints the metrics.
//
//   htp-example-layer-streaming [layers] [layer_mib] [hbm_mib] [steps]
#include <htp/checksum.hpp>
#include <htp/pager.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 12;
  const std::size_t layer_mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 8;
  const std::size_t hbm_mib = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 48;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 4;
  const std::size_t layer_bytes = layer_mib << 20;

  auto dev = htp::make_device(htp::backend::cuda_or_sim);  // the GPU, else sim (a warning)
  htp::pager_config cfg;
  cfg.hbm_budget_bytes = hbm_mib << 20;
  cfg.host_budget_bytes = (static_cast<std::size_t>(layers) * (layer_mib + 1) + 64) << 20;
  cfg.slab_bytes = 2 << 20;  // small slabs suit this small demo model
  htp::pager pager(*dev, cfg);
  htp::stream compute(*dev);

  std::vector<htp::tensor_handle> weights, kv;
  std::vector<std::uint64_t> sums;
  std::vector<unsigned char> staging(layer_bytes);
  for (int i = 0; i < layers; ++i) {
    htp::fill_pattern(staging.data(), layer_bytes, static_cast<std::uint64_t>(i));
    sums.push_back(htp::checksum(staging.data(), layer_bytes));
    weights.push_back(pager.register_tensor("layer" + std::to_string(i), layer_bytes,
                                            htp::tensor_kind::weight, staging.data()));
    kv.push_back(pager.register_tensor("kv" + std::to_string(i), 256 << 10,
                                       htp::tensor_kind::mutable_state));
  }
  pager.set_schedule(weights, /*cyclic=*/true);

  auto* result = static_cast<std::uint64_t*>(
      dev->allocate(htp::memory_kind::pinned_host, 8 * static_cast<std::size_t>(layers)));
  int bad = 0;
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < layers; ++i) {
      const auto w = pager.acquire(weights[static_cast<std::size_t>(i)], compute);
      const auto k = pager.acquire(kv[static_cast<std::size_t>(i)], compute);
      dev->checksum_async(w.data, w.bytes, &result[i],
                          compute);  // the layer's "GEMM" reads every byte
      dev->fill_pattern_async(k.data, k.bytes, static_cast<std::uint64_t>(s),
                              compute);  // appends to the KV cache
      pager.release(kv[static_cast<std::size_t>(i)], compute, /*dirty=*/true);
      pager.release(weights[static_cast<std::size_t>(i)], compute);
    }
    compute.synchronize();
    for (int i = 0; i < layers; ++i) bad += result[i] != sums[static_cast<std::size_t>(i)];
  }
  dev->deallocate(htp::memory_kind::pinned_host, result, 8 * static_cast<std::size_t>(layers));

  const auto m = pager.metrics();
  std::printf("%s: %d layers x %zu MiB through %zu MiB of HBM, %d steps\n",
              dev->properties().name.c_str(), layers, layer_mib, hbm_mib, steps);
  std::printf(
      "  acquires %llu, faults %llu, prefetch hits %llu, late %llu, evictions %llu, write-backs "
      "%llu\n",
      static_cast<unsigned long long>(m.acquires), static_cast<unsigned long long>(m.faults),
      static_cast<unsigned long long>(m.prefetch_hits),
      static_cast<unsigned long long>(m.late_prefetches),
      static_cast<unsigned long long>(m.evictions), static_cast<unsigned long long>(m.write_backs));
  std::printf("  HBM occupancy mean %.1f%% peak %.1f%%, H2D %.2f GB/s, fault p99 %.3f ms\n",
              m.hbm.mean_pct, m.hbm.peak_pct, m.transfers.h2d.achieved_gbps,
              static_cast<double>(m.fault_latency.p99_ns) / 1e6);
  std::printf("  weight checksums: %s\n", bad == 0 ? "all match" : "MISMATCH");
  return bad == 0 ? 0 : 1;
}
