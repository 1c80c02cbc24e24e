// The device a benchmark runs on, made in one place from the options the benches share: cuda when
// asked for (or, with --backend auto, when a GPU is visible), else a sim device whose configuration
// (memory, modelled link, poisoning, timing-only) is named field by field in device_options.
#pragma once

#include <htp/device.hpp>
#include <htp/sim_device.hpp>

#include <CLI/CLI.hpp>

#include <cstddef>
#include <memory>
#include <string>

namespace htp::bench {

/// Device memory freed at scope exit (after the streams using it were drained).
struct device_buffer {
  device& dev;
  std::size_t bytes;
  void* ptr;
  device_buffer(device& d, std::size_t n)
      : dev(d), bytes(n), ptr(d.allocate(memory_kind::device, n)) {}
  ~device_buffer() { dev.deallocate(memory_kind::device, ptr, bytes); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

/// The backend a benchmark asks for and, on sim, the device it models.
struct device_options {
  std::string backend = "auto";  ///< "auto" (cuda when a GPU is visible, else sim), "cuda" or "sim"
  int ordinal = 0;               ///< cuda: the GPU to open; sim: the ordinal it reports
  std::size_t sim_memory_bytes = std::size_t{4} << 30;  ///< sim: device memory capacity
  std::size_t sim_pinned_bytes = 0;  ///< sim: pinned memory capacity; 0 = no limit
  double sim_link_gbps = 0;   ///< sim: modelled H2D and D2H link, GB/s each way; 0 = unmodelled
  double sim_latency_us = 0;  ///< sim: modelled fixed cost of each copy, microseconds
  /// sim: fill fresh device memory with sim_config's poison byte (0xA5), so a read of bytes nothing
  /// wrote shows up in checksums; false leaves it as is (no fill cost, for the timing benches).
  bool sim_poison = false;
  bool sim_timing_only = false;  ///< sim: no bytes stored or moved (see htp/sim_device.hpp)
};

/// True when `backend` names sim: "sim", or "auto" while no CUDA GPU is visible.
bool wants_sim(const std::string& backend);

/// The sim device configuration `o` names (the sim_* fields and the ordinal).
sim_config sim_config_of(const device_options& o);

/// The device `o` names: a sim device with sim_config_of(o) when wants_sim(o.backend), else cuda
/// GPU o.ordinal. @throws what make_sim_device or make_device throw (no GPU, bad configuration).
std::unique_ptr<device> make_bench_device(const device_options& o);

/// Adds --backend to `app`, into `backend`, restricted to auto, cuda and sim.
/// Returns the option, for further settings.
CLI::Option* add_backend_option(CLI::App& app, std::string& backend);

/// Adds --sim-link-gbps and --sim-latency-us to `app`, into o.sim_link_gbps and o.sim_latency_us,
/// with the descriptions the bench gives.
void add_sim_link_options(CLI::App& app, device_options& o, const std::string& link_help,
                          const std::string& latency_help);

}  // namespace htp::bench
