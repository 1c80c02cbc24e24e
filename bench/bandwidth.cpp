// htp-bandwidth: the host<->device copy bandwidth sweep. On a GPU this is htp's measurement of the
// physical limit (pinned memory over PCIe Gen5 moves about 55 GB/s each way on H100/H200); on sim
// it shows the modelled link. Prints a table, derives per-call overhead and the half-bandwidth
// size from a least-squares fit t(n) = overhead + n / peak, and writes --json FILE.
#include <htp/device.hpp>
#include <htp/error.hpp>
#include <htp/sim_device.hpp>

#include "common/bench_device.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct sample {
  std::string mode;  // H2D, D2H, bidir
  bool pinned;
  std::size_t bytes;
  int reps;
  double seconds_per_copy;
  double gb_per_s;
};

struct fit {
  double overhead_us = 0;
  double peak_gb_per_s = 0;
  double half_bandwidth_bytes = 0;
};

/// Least squares over (bytes, seconds per copy): t = a + b n. Overhead a, peak 1/b, n_half = a/b.
fit fit_line(const std::vector<sample>& rows) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const auto n = static_cast<double>(rows.size());
  for (const auto& r : rows) {
    const auto x = static_cast<double>(r.bytes);
    sx += x;
    sy += r.seconds_per_copy;
    sxx += x * x;
    sxy += x * r.seconds_per_copy;
  }
  fit f;
  const double den = n * sxx - sx * sx;
  if (rows.size() < 2 || den == 0) return f;
  const double b = (n * sxy - sx * sy) / den;
  const double a = (sy - b * sx) / n;
  if (b <= 0) return f;
  f.overhead_us = std::max(a, 0.0) * 1e6;
  f.peak_gb_per_s = 1e-9 / b;
  f.half_bandwidth_bytes = std::max(a, 0.0) / b;
  return f;
}

std::string human(std::size_t b) {
  return b >= (1u << 20) ? fmt::format("{} MiB", b >> 20) : fmt::format("{} KiB", b >> 10);
}

/// htp-bandwidth's options, with their defaults.
struct options {
  htp::bench::device_options device = [] {
    htp::bench::device_options d;
    d.sim_link_gbps = 4.0;
    d.sim_latency_us = 5.0;
    return d;
  }();
  std::size_t min_bytes = 4 << 10;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::size_t bytes_per_point = std::size_t{1} << 30;
  std::string json_path;
};

/// Parses argv into `o`. Returns -1 to go on, or the exit code to return now (0 after --help;
/// 2, reported, for a bad command line or sizes).
int parse_options(int argc, char** argv, options& o) {
  CLI::App app{"htp-bandwidth: host<->device copy bandwidth sweep"};
  htp::bench::add_backend_option(app, o.device.backend);
  app.add_option("--min-bytes", o.min_bytes, "smallest copy (bytes)");
  app.add_option("--max-bytes", o.max_bytes, "largest copy (bytes)");
  app.add_option("--bytes-per-point", o.bytes_per_point,
                 "bytes moved per measured point (sets repetitions)");
  htp::bench::add_sim_link_options(app, o.device, "sim only: modelled link rate each way, GB/s",
                                   "sim only: modelled per-copy latency, microseconds");
  app.add_option("--json", o.json_path, "write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (o.min_bytes == 0 || o.max_bytes < o.min_bytes) {
    fmt::print(stderr, "htp-bandwidth: need 0 < --min-bytes <= --max-bytes (got {}, {})\n",
               o.min_bytes, o.max_bytes);
    return 2;
  }
  return -1;
}

/// The sweep: pinned then pageable host memory, sizes from min_bytes by factors of 4, each size
/// H2D, D2H and both at once (on two streams), after a warm-up copy each way.
std::vector<sample> sweep(htp::device& dev, const options& o) {
  using htp::copy_direction;
  using htp::memory_kind;
  const std::size_t max_bytes = o.max_bytes;
  void* dmem_a = dev.allocate(memory_kind::device, max_bytes);
  void* dmem_b = dev.allocate(memory_kind::device, max_bytes);
  void* pinned_a = dev.allocate(memory_kind::pinned_host, max_bytes);
  void* pinned_b = dev.allocate(memory_kind::pinned_host, max_bytes);
  std::vector<unsigned char> pageable_a(max_bytes, 1), pageable_b(max_bytes, 2);
  std::vector<sample> rows;
  {
    htp::stream s1(dev), s2(dev);
    for (bool pinned : {true, false}) {
      void* host_src = pinned ? pinned_a : pageable_a.data();
      void* host_dst = pinned ? pinned_b : pageable_b.data();
      for (std::size_t n = o.min_bytes; n <= max_bytes; n *= 4) {
        const int reps = static_cast<int>(std::clamp<std::size_t>(o.bytes_per_point / n, 3, 2000));
        for (const char* mode : {"H2D", "D2H", "bidir"}) {
          const std::string m = mode;
          auto issue = [&] {
            for (int r = 0; r < reps; ++r) {
              if (m != "D2H")
                dev.copy_async(dmem_a, host_src, n, copy_direction::host_to_device, s1);
              if (m != "H2D")
                dev.copy_async(host_dst, dmem_b, n, copy_direction::device_to_host,
                               m == "bidir" ? s2 : s1);
            }
            dev.synchronize_all();
          };
          // warm-up: one copy each way, so first-touch and lazy set-up stay out of the numbers
          dev.copy_async(dmem_a, host_src, n, copy_direction::host_to_device, s1);
          dev.copy_async(host_dst, dmem_b, n, copy_direction::device_to_host, s1);
          dev.synchronize_all();
          const auto t0 = clock_type::now();
          issue();
          const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
          const double moved = static_cast<double>(n) * reps * (m == "bidir" ? 2 : 1);
          rows.push_back({m, pinned, n, reps, secs / reps, moved / secs / 1e9});
        }
      }
    }
  }
  dev.deallocate(memory_kind::device, dmem_a, max_bytes);
  dev.deallocate(memory_kind::device, dmem_b, max_bytes);
  dev.deallocate(memory_kind::pinned_host, pinned_a, max_bytes);
  dev.deallocate(memory_kind::pinned_host, pinned_b, max_bytes);
  return rows;
}

/// Prints the samples' table, then each memory and direction's fitted line; returns the fits as
/// JSON.
nlohmann::json print_and_fit(const std::vector<sample>& rows) {
  fmt::print("\n{:<8} {:<9} {:>10} {:>6} {:>12} {:>10}\n", "memory", "direction", "size", "reps",
             "us/copy", "GB/s");
  for (const auto& r : rows) {
    fmt::print("{:<8} {:<9} {:>10} {:6} {:12.2f} {:10.2f}\n", r.pinned ? "pinned" : "pageable",
               r.mode, human(r.bytes), r.reps, r.seconds_per_copy * 1e6, r.gb_per_s);
  }
  nlohmann::json fits = nlohmann::json::object();
  fmt::print("\n{:<8} {:<9} {:>14} {:>12} {:>16}\n", "memory", "direction", "overhead us",
             "peak GB/s", "n_half");
  for (bool pinned : {true, false}) {
    for (const char* mode : {"H2D", "D2H"}) {
      std::vector<sample> sel;
      for (const auto& r : rows) {
        if (r.pinned == pinned && r.mode == mode) sel.push_back(r);
      }
      const fit f = fit_line(sel);
      fmt::print("{:<8} {:<9} {:14.2f} {:12.2f} {:>16}\n", pinned ? "pinned" : "pageable", mode,
                 f.overhead_us, f.peak_gb_per_s,
                 human(static_cast<std::size_t>(f.half_bandwidth_bytes)));
      fits[std::string(pinned ? "pinned_" : "pageable_") + mode] = {
          {"overhead_us", f.overhead_us},
          {"peak_gb_per_s", f.peak_gb_per_s},
          {"half_bandwidth_bytes", f.half_bandwidth_bytes}};
    }
  }
  return fits;
}

/// Writes the device, the sim's link, every sample and the fits as JSON to o.json_path.
void write_json(const options& o, const htp::device_properties& props,
                const std::vector<sample>& rows, const nlohmann::json& fits) {
  nlohmann::json j;
  j["benchmark"] = "htp-bandwidth";
  j["device"] = {{"name", props.name},
                 {"backend", htp::to_string(props.kind)},
                 {"total_memory", props.total_memory},
                 {"copy_engines", props.copy_engines},
                 {"compute_capability", std::to_string(props.compute_capability_major) + "." +
                                            std::to_string(props.compute_capability_minor)}};
  if (props.kind == htp::backend::sim) {
    j["sim_link"] = {{"gb_per_s", o.device.sim_link_gbps}, {"latency_us", o.device.sim_latency_us}};
  }
  for (const auto& r : rows) {
    j["samples"].push_back({{"memory", r.pinned ? "pinned" : "pageable"},
                            {"direction", r.mode},
                            {"bytes", r.bytes},
                            {"reps", r.reps},
                            {"seconds_per_copy", r.seconds_per_copy},
                            {"gb_per_s", r.gb_per_s}});
  }
  j["fits"] = fits;
  std::ofstream(o.json_path) << j.dump(2) << "\n";
  fmt::print("\nwrote {}\n", o.json_path);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const int rc = parse_options(argc, argv, o); rc >= 0) return rc;
  std::unique_ptr<htp::device> dev;
  try {
    o.device.sim_memory_bytes = o.max_bytes * 2 + (64u << 20);
    dev = htp::bench::make_bench_device(o.device);
  } catch (const std::exception& e) {
    fmt::print(stderr, "htp-bandwidth: {}\n", e.what());
    return 2;
  }
  const auto& props = dev->properties();
  fmt::print("htp-bandwidth on {} ({} backend)\n", props.name, htp::to_string(props.kind));
  if (props.kind == htp::backend::sim) {
    fmt::print("  sim: the link is MODELLED at {:.1f} GB/s each way with {:.1f} us per copy; these "
               "are not GPU numbers\n",
               o.device.sim_link_gbps, o.device.sim_latency_us);
  }
  const std::vector<sample> rows = sweep(*dev, o);
  const nlohmann::json fits = print_and_fit(rows);
  if (!o.json_path.empty()) write_json(o, props, rows, fits);
  return 0;
}
