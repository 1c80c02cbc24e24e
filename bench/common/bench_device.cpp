// The benchmarks' device set-up. See bench_device.hpp.
#include "common/bench_device.hpp"

#include <cstdint>

namespace htp::bench {

bool wants_sim(const std::string& backend) {
  return backend == "sim" || (backend == "auto" && cuda_device_count() == 0);
}

sim_config sim_config_of(const device_options& o) {
  sim_config sc;
  sc.device_memory_bytes = o.sim_memory_bytes;
  sc.pinned_memory_bytes = o.sim_pinned_bytes;
  sc.h2d_bytes_per_second = static_cast<std::uint64_t>(o.sim_link_gbps * 1e9);
  sc.d2h_bytes_per_second = sc.h2d_bytes_per_second;
  sc.copy_latency_ns = static_cast<std::uint64_t>(o.sim_latency_us * 1e3);
  if (!o.sim_poison) sc.poison_byte = -1;
  sc.timing_only = o.sim_timing_only;
  sc.ordinal = o.ordinal;
  return sc;
}

std::unique_ptr<device> make_bench_device(const device_options& o) {
  if (wants_sim(o.backend)) return make_sim_device(sim_config_of(o));
  return make_device(backend::cuda, o.ordinal);
}

CLI::Option* add_backend_option(CLI::App& app, std::string& backend) {
  return app.add_option("--backend", backend, "auto, cuda or sim")
      ->check(CLI::IsMember({"auto", "cuda", "sim"}));
}

void add_sim_link_options(CLI::App& app, device_options& o, const std::string& link_help,
                          const std::string& latency_help) {
  app.add_option("--sim-link-gbps", o.sim_link_gbps, link_help);
  app.add_option("--sim-latency-us", o.sim_latency_us, latency_help);
}

}  // namespace htp::bench
