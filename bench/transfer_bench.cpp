// htp-transfer-bench: rate accuracy of the token bucket, head-of-line blocking of an urgent fault
// (engine versus one big copy per page), page-in throughput against the raw copy peak, and the
// cost of verified page-ins from a file (chunk checksums on the device) against unverified ones.
// On sim the host link is modelled (4 GB/s each way, 5 us per copy) and the output says so.
#include <htp/checksum.hpp>
#include <htp/device.hpp>
#include <htp/latency_histogram.hpp>
#include <htp/sim_device.hpp>
#include <htp/tensor_file.hpp>
#include <htp/transfer_engine.hpp>

#include "common/bench_device.hpp"

#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using nlohmann::json;
constexpr std::size_t mib = std::size_t{1} << 20;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct buffers {
  htp::device& dev;
  std::size_t bytes;
  void* host;
  void* hbm;
  buffers(htp::device& d, std::size_t n)
      : dev(d), bytes(n), host(d.allocate(htp::memory_kind::pinned_host, n)),
        hbm(d.allocate(htp::memory_kind::device, n)) {}
  ~buffers() {
    dev.deallocate(htp::memory_kind::device, hbm, bytes);
    dev.deallocate(htp::memory_kind::pinned_host, host, bytes);
  }
  char* h(std::size_t off = 0) const { return static_cast<char*>(host) + off; }
  char* d(std::size_t off = 0) const { return static_cast<char*>(hbm) + off; }
};

htp::transfer_config engine_config(const buffers& b, std::uint64_t link) {
  htp::transfer_config c;
  c.h2d.link_bytes_per_second = link;
  c.d2h.link_bytes_per_second = link;
  c.device_memory = {{b.hbm, b.bytes}};
  c.host_memory = {{b.host, b.bytes}};
  return c;
}

/// Streams `seconds` worth of H2D at `cap` and reports the achieved rate over the whole run.
json rate_accuracy(htp::device& dev, const buffers& b, std::uint64_t link, std::uint64_t cap,
                   double seconds) {
  auto c = engine_config(b, link);
  c.h2d.rate_bytes_per_second = cap;
  htp::transfer_engine eng(dev, c);
  const std::size_t page = 16 * mib;
  const auto total = static_cast<std::size_t>(static_cast<double>(cap) * seconds);
  const std::size_t pages = std::max<std::size_t>(1, total / page);
  const auto t0 = clock_type::now();
  std::vector<htp::transfer_ticket> t;
  for (std::size_t i = 0; i < pages; ++i)
    t.push_back(eng.submit(b.d(), b.h(page), page, htp::copy_direction::host_to_device,
                           htp::transfer_priority::prefetch));
  eng.drain();
  const double elapsed = seconds_since(t0);
  const double moved = static_cast<double>(pages * page);
  const double burst = static_cast<double>(eng.config().h2d.burst_bytes);
  const double achieved = (moved - burst) / elapsed;  // the burst is free at t0
  const auto m = eng.metrics();
  json r = {
      {"cap_gbps", static_cast<double>(cap) / 1e9},
      {"bytes", pages * page},
      {"seconds", elapsed},
      {"achieved_gbps", achieved / 1e9},
      {"error_percent", (achieved - static_cast<double>(cap)) / static_cast<double>(cap) * 100},
      {"above_cap_plus_burst", moved > static_cast<double>(cap) * elapsed + burst},
      {"token_wait_ms", static_cast<double>(m.h2d.token_wait_ns) / 1e6}};
  fmt::print("  cap {:7.3f} GB/s: achieved {:7.3f} GB/s over {:.2f} s, error {:+6.2f}%\n",
             static_cast<double>(cap) / 1e9, achieved / 1e9, elapsed,
             r["error_percent"].get<double>());
  return r;
}

/// p50 and max of latencies in ms, through the library's latency histogram (p50 within 6.25%).
json summarize(const std::vector<double>& ms) {
  htp::latency_histogram h;
  for (const double x : ms) h.record(static_cast<std::uint64_t>(x * 1e6));
  const htp::latency_summary s = h.summary();
  return {{"p50_ms", static_cast<double>(s.p50_ns) / 1e6},
          {"max_ms", static_cast<double>(s.max_ns) / 1e6},
          {"samples", ms}};
}

/// Latency of a 2 MiB fault submitted while 64 MiB prefetches stream: engine versus naive.
json head_of_line(htp::device& dev, const buffers& b, std::uint64_t link, int reps, int pages) {
  const std::size_t page = 64 * mib, fault = 2 * mib;
  const auto delay = std::chrono::milliseconds(2);  // the fault arrives while a page is moving
  std::vector<double> engine_ms, engine_own_ms, naive_ms;
  {
    auto c = engine_config(b, link);
    c.h2d.unlimited = true;
    htp::transfer_engine eng(dev, c);
    for (int r = 0; r < reps; ++r) {
      for (int i = 0; i < pages; ++i)
        eng.submit(b.d(), b.h(page + fault), page, htp::copy_direction::host_to_device,
                   htp::transfer_priority::prefetch);
      std::this_thread::sleep_for(delay);
      const auto t0 = clock_type::now();
      const auto t = eng.submit(b.d(page), b.h(), fault, htp::copy_direction::host_to_device,
                                htp::transfer_priority::fault);
      eng.wait(t);
      engine_ms.push_back(seconds_since(t0) * 1e3);
      engine_own_ms.push_back(static_cast<double>(eng.latency(t)->count()) / 1e6);
      eng.drain();
    }
  }
  {
    htp::stream bulk(dev), urgent(dev, htp::stream_priority::high);
    htp::event done(dev);
    for (int r = 0; r < reps; ++r) {
      for (int i = 0; i < pages; ++i)
        dev.copy_async(b.d(), b.h(page + fault), page, htp::copy_direction::host_to_device, bulk);
      std::this_thread::sleep_for(delay);
      const auto t0 = clock_type::now();
      dev.copy_async(b.d(page), b.h(), fault, htp::copy_direction::host_to_device, urgent);
      done.record(urgent);
      done.synchronize();
      naive_ms.push_back(seconds_since(t0) * 1e3);
      bulk.synchronize();
    }
  }
  json r = {{"prefetch_page_mib", 64},
            {"prefetch_pages_queued", pages},
            {"fault_mib", 2},
            {"engine", summarize(engine_ms)},
            {"engine_reported", summarize(engine_own_ms)},
            {"naive", summarize(naive_ms)}};
  fmt::print(
      "  2 MiB fault behind {} x 64 MiB prefetches: engine p50 {:.3f} ms max {:.3f} ms | naive "
      "p50 {:.3f} ms max {:.3f} ms\n",
      pages, r["engine"]["p50_ms"].get<double>(), r["engine"]["max_ms"].get<double>(),
      r["naive"]["p50_ms"].get<double>(), r["naive"]["max_ms"].get<double>());
  return r;
}

/// Raw copy bandwidth sweep, then engine page-in throughput with no cap.
json throughput(htp::device& dev, const buffers& b, std::uint64_t link, std::size_t total) {
  json sweep = json::array();
  double peak = 0;
  for (std::size_t n : {std::size_t{256} << 10, 2 * mib, 8 * mib, 32 * mib, 64 * mib}) {
    const int reps = static_cast<int>(std::clamp<std::size_t>(256 * mib / n, 2, 64));
    const auto bps = static_cast<double>(
        htp::measure_copy_bandwidth(dev, htp::copy_direction::host_to_device, n, reps));
    peak = std::max(peak, bps);
    sweep.push_back({{"bytes", n}, {"gbps", bps / 1e9}});
    fmt::print("  raw H2D copy of {:6} KiB: {:7.3f} GB/s\n", n >> 10, bps / 1e9);
  }
  json engine_runs = json::array();
  const std::pair<std::size_t, std::size_t> variants[] = {
      {2 * mib, 2}, {2 * mib, 3}, {2 * mib, 4}, {8 * mib, 3}};
  for (const auto& [chunk, in_flight] : variants) {
    auto c = engine_config(b, link);
    c.h2d.unlimited = true;
    c.chunk_bytes = chunk;
    c.max_in_flight_chunks = in_flight;
    htp::transfer_engine eng(dev, c);
    const std::size_t page = 64 * mib;
    const std::size_t pages = std::max<std::size_t>(1, total / page);
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < pages; ++i)
      eng.submit(b.d(), b.h(page), page, htp::copy_direction::host_to_device,
                 htp::transfer_priority::prefetch);
    eng.drain();
    const double bps = static_cast<double>(pages * page) / seconds_since(t0);
    const auto m = eng.metrics();
    engine_runs.push_back({{"chunk_mib", chunk / mib},
                           {"max_in_flight_chunks", in_flight},
                           {"gbps", bps / 1e9},
                           {"fraction_of_raw_peak", bps / peak},
                           {"utilization_vs_calibrated", m.h2d.utilization}});
    fmt::print(
        "  engine page-in, {} MiB chunks, {} in flight: {:7.3f} GB/s = {:5.1f}% of raw peak\n",
        chunk / mib, in_flight, bps / 1e9, 100 * bps / peak);
  }
  return {{"raw_sweep", sweep}, {"raw_peak_gbps", peak / 1e9}, {"engine", engine_runs}};
}

/// A temporary file of `bytes` pattern bytes (page cache warm once written); removed on
/// destruction.
struct temp_file {
  std::string path;
  explicit temp_file(std::size_t bytes) {
    char name[] = "/tmp/htp-transfer-bench-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) throw std::runtime_error("htp-transfer-bench: cannot create a file in /tmp");
    close(fd);
    path = name;
    std::vector<char> data(bytes);
    htp::fill_pattern(data.data(), bytes, 77);
    std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(bytes));
  }
  ~temp_file() { std::remove(path.c_str()); }
};

/// Median of `v` (not empty).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Page-ins of a 64 MiB file range (2 MiB chunks, 3 in flight, no cap), unverified and verified
/// (submit_from_file with the chunks' checksums: a device checksum per chunk in HBM), alternating,
/// `reps` of each; and the device checksum alone over 64 MiB of HBM against the raw H2D copy of the
/// same bytes.
json verified_page_ins(htp::device& dev, const buffers& b, std::uint64_t link, int reps) {
  const std::size_t bytes = 64 * mib;
  temp_file tf(bytes);
  auto file = htp::tensor_file::open(tf.path);
  auto c = engine_config(b, link);
  c.h2d.unlimited = true;
  htp::transfer_engine eng(dev, c);
  auto sums = std::make_shared<std::vector<std::uint64_t>>();
  {
    std::vector<char> chunk(c.chunk_bytes);
    for (std::size_t at = 0; at < bytes; at += c.chunk_bytes) {
      file->read(chunk.data(), c.chunk_bytes, at);
      sums->push_back(htp::checksum(chunk.data(), c.chunk_bytes));
    }
  }
  std::vector<double> plain_s, verified_s;
  for (int r = 0; r < reps + 1; ++r) {  // the first of each is a warm-up
    for (bool verify : {false, true}) {
      const auto t0 = clock_type::now();
      eng.wait(eng.submit_from_file(b.d(), file, 0, bytes, htp::transfer_priority::prefetch, {},
                                    verify ? sums : nullptr));
      if (r > 0) (verify ? verified_s : plain_s).push_back(seconds_since(t0));
    }
  }
  // The checksum alone, on a stream of its own, and the raw copy of the same bytes.
  htp::stream s(dev);
  auto* word = static_cast<std::uint64_t*>(dev.allocate(htp::memory_kind::pinned_host, 64));
  std::vector<double> sum_s;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = clock_type::now();
    dev.checksum_async(b.d(), bytes, word, s);
    s.synchronize();
    if (r > 0) sum_s.push_back(seconds_since(t0));
  }
  dev.deallocate(htp::memory_kind::pinned_host, word, 64);
  const auto copy_bps = static_cast<double>(
      htp::measure_copy_bandwidth(dev, htp::copy_direction::host_to_device, bytes, reps));
  const double plain = static_cast<double>(bytes) / median(plain_s);
  const double verified = static_cast<double>(bytes) / median(verified_s);
  const double sum_bps = static_cast<double>(bytes) / median(sum_s);
  fmt::print("  file page-in of 64 MiB, 2 MiB chunks: unverified {:7.3f} GB/s, verified {:7.3f} "
             "GB/s ({:+.1f}% time)\n",
             plain / 1e9, verified / 1e9, 100 * (plain / verified - 1));
  fmt::print("  device checksum of 64 MiB: {:7.3f} GB/s = {:.1f}% of the raw H2D copy's time "
             "({:.3f} GB/s)\n",
             sum_bps / 1e9, 100 * copy_bps / sum_bps, copy_bps / 1e9);
  return {{"bytes", bytes},
          {"chunk_bytes", c.chunk_bytes},
          {"unverified_gbps", plain / 1e9},
          {"verified_gbps", verified / 1e9},
          {"verified_extra_time_fraction", plain / verified - 1},
          {"device_checksum_gbps", sum_bps / 1e9},
          {"raw_h2d_copy_gbps", copy_bps / 1e9},
          {"checksum_time_vs_copy_time", copy_bps / sum_bps}};
}

}  // namespace

namespace {

/// htp-transfer-bench's options, with their defaults.
struct options {
  std::string backend_name = "auto";
  std::string json_path;
  double seconds = 1.0;
  int reps = 5;
};

/// Parses argv into `o`. Returns -1 to go on, or the exit code to return now (0 after --help,
/// non-zero for a bad command line, which it has reported).
int parse_options(int argc, char** argv, options& o) {
  CLI::App app{"htp transfer engine benchmark"};
  app.add_option("--backend", o.backend_name, "auto|sim|cuda")
      ->check(CLI::IsMember({"auto", "sim", "cuda"}));
  app.add_option("--json", o.json_path, "write the results as JSON to this file");
  app.add_option("--seconds", o.seconds, "length of each rate-accuracy run");
  app.add_option("--reps", o.reps, "repetitions of the head-of-line measurement");
  CLI11_PARSE(app, argc, argv);
  return -1;
}

/// The benchmark: the device, the calibration, then each measurement, printed and written as JSON.
int run(int argc, char** argv) {
  options o;
  if (const int rc = parse_options(argc, argv, o); rc >= 0) return rc;
  const std::string& backend_name = o.backend_name;
  const std::string& json_path = o.json_path;
  const double seconds = o.seconds;
  const int reps = o.reps;

  htp::bench::device_options dopt;  // the modelled link the sim numbers are of
  dopt.sim_memory_bytes = 512 * mib;
  dopt.sim_link_gbps = 4;
  dopt.sim_latency_us = 5;
  dopt.sim_poison = true;
  const bool want_sim = htp::bench::wants_sim(backend_name);
  dopt.backend = want_sim ? "sim" : "cuda";
  std::unique_ptr<htp::device> dev = htp::bench::make_bench_device(dopt);
  json setup;
  if (want_sim) {
    setup = {{"backend", "sim"}, {"modelled_link", "4 GB/s each way, 5 us per copy"}};
    fmt::print("backend: sim, MODELLED link (4 GB/s each way, 5 us per copy); not GPU numbers\n");
  } else {
    setup = {{"backend", "cuda"}, {"device", dev->properties().name}};
    fmt::print("backend: cuda, {}\n", dev->properties().name);
  }
  buffers b(*dev, 64 * mib + 2 * mib + 64 * mib);  // page-sized windows on both sides
  const std::uint64_t link =
      htp::measure_copy_bandwidth(*dev, htp::copy_direction::host_to_device, 64 * mib, 3);
  setup["calibrated_h2d_gbps"] = static_cast<double>(link) / 1e9;
  fmt::print("calibrated H2D link: {:.3f} GB/s\n", static_cast<double>(link) / 1e9);

  json out = {{"setup", setup}};
  fmt::print("rate accuracy (H2D, 2 MiB chunks, burst 2 chunks):\n");
  json rates = json::array();
  for (double f : {0.125, 0.25, 0.5, 0.8})
    rates.push_back(rate_accuracy(
        *dev, b, link, static_cast<std::uint64_t>(f * static_cast<double>(link)), seconds));
  out["rate_accuracy"] = rates;
  fmt::print("head-of-line blocking:\n");
  out["head_of_line"] = head_of_line(*dev, b, link, reps, 4);
  fmt::print("page-in throughput:\n");
  out["throughput"] = throughput(*dev, b, link, want_sim ? 1024 * mib : 8192 * mib);
  fmt::print("verified page-ins (pager_config::verify_page_ins):\n");
  out["verified_page_ins"] = verified_page_ins(*dev, b, link, std::max(reps, 3));
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(2) << "\n";
    fmt::print("wrote {}\n", json_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a typed htp error: say it, do not abort
    std::fprintf(stderr, "htp-transfer-bench: %s\n", e.what());
    return 2;
  }
}
