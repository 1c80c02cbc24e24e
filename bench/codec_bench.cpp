// htp-codec-bench: the weight codec (codec.hpp) on synthetic weights (docs/codec.md, "The
// weights"). For each format and distribution: the ratio (frame / raw), the CPU encode and decode
// rates on one core (bytes over the thread's CPU time), and the coded symbol's histogram and
// entropy, beside DFloat11's published ratios. With --gpu-gib and a GPU: the decode kernel on that
// many GiB of Llama-like bf16 weights, checked bit for bit against the CPU encoder's input, and its
// rate in GB/s of output.
#include <htp/codec.hpp>
#include <htp/device.hpp>
#include <htp/error.hpp>

#include "common/bench_device.hpp"
#include "common/synthetic_weights.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

namespace {

using bytes_t = std::vector<std::uint8_t>;
using clock_type = std::chrono::steady_clock;

/// htp-codec-bench's options, with their defaults.
struct options {
  std::size_t elements = std::size_t{8} << 20;  ///< elements per distribution and format
  std::vector<std::string> formats = {"bf16", "fp16", "fp32"};
  int repeats = 3;               ///< timed runs; the best is reported
  double gpu_gib = 0;            ///< > 0: the GPU decode check on this many GiB (needs cuda)
  std::string backend = "auto";  ///< for the GPU decode: auto, cuda or sim
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());  ///< for the GPU input
  std::string json_path;
};

/// Parses argv into `o`. Returns -1 to go on, or the exit code to return now.
int parse_options(int argc, char** argv, options& o) {
  CLI::App app{"htp-codec-bench: the bf16/fp16/fp32 weight codec on synthetic weights"};
  app.add_option("--elements", o.elements, "elements per distribution and format");
  app.add_option("--formats", o.formats, "formats to measure (bf16, fp16, fp32)")->delimiter(',');
  app.add_option("--repeats", o.repeats, "timed runs of each encode and decode (best reported)");
  app.add_option("--gpu-gib", o.gpu_gib,
                 "also decode this many GiB of Llama-like bf16 weights with the device's decode "
                 "(a kernel on cuda), bit-exact against the CPU encoder's input, and time it");
  htp::bench::add_backend_option(app, o.backend);
  app.add_option("--threads", o.threads, "threads drawing and encoding the --gpu-gib weights");
  app.add_option("--json", o.json_path, "write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (o.elements == 0 || o.repeats < 1 || o.gpu_gib < 0 || o.threads < 1) {
    fmt::print(stderr, "htp-codec-bench: need --elements > 0, --repeats >= 1, --gpu-gib >= 0\n");
    return 2;
  }
  return -1;
}

htp::weight_format format_of(const std::string& name) {
  if (name == "bf16") return htp::weight_format::bf16;
  if (name == "fp16") return htp::weight_format::fp16;
  if (name == "fp32") return htp::weight_format::fp32;
  throw htp::invalid_argument("htp-codec-bench: unknown format " + name + " (bf16, fp16, fp32)");
}

struct distribution {
  std::string name;
  std::string how;
  std::function<bytes_t(std::size_t, htp::weight_format)> draw;
};

std::vector<distribution> distributions() {
  using namespace htp::synthetic;
  auto g = [](double sd) {
    return [sd](std::size_t n, htp::weight_format f) { return gaussian(n, sd, f, 1); };
  };
  return {
      {"gaussian_0.02", "N(0, 0.02^2)", g(0.02)},
      {"gaussian_0.006", "N(0, 0.006^2)", g(0.006)},
      {"gaussian_0.1", "N(0, 0.1^2)", g(0.1)},
      {"llama_mixture",
       "per-matrix N(0, s^2), s log-uniform in [0.006, 0.05], 2% outliers x10, "
       "1 matrix in 64 a norm gain N(1, 0.05^2)",
       [](std::size_t n, htp::weight_format f) { return llama_mixture(n, f, 2); }},
      {"uniform_bits", "every bit pattern equally likely",
       [](std::size_t n, htp::weight_format f) {
         return uniform_bits(n * htp::element_bytes(f), 3);
       }},
      {"all_equal", "0.0125 everywhere",
       [](std::size_t n, htp::weight_format f) { return all_equal(n, 0.0125f, f); }},
      {"specials_1pct", "N(0, 0.02^2) with 1 element in 100 a NaN, Inf, subnormal or zero",
       [](std::size_t n, htp::weight_format f) { return with_specials(n, f, 4, 100); }},
  };
}

/// CPU time of the calling thread, in seconds: what a run costs its core, whatever else shares
/// the machine (the per-core rates below use it; wall time would count other processes' turns).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// Best thread CPU time of `repeats` runs of `fn` (single-threaded work), in seconds.
double best_cpu_seconds(int repeats, const std::function<void()>& fn) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = thread_cpu_seconds();
    fn();
    best = std::min(best, thread_cpu_seconds() - t0);
  }
  return best;
}

/// Best wall time of `repeats` runs of `fn`, in seconds.
double best_seconds(int repeats, const std::function<void()>& fn) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock_type::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return best;
}

/// The symbol histogram's non-empty bins, its entropy and the ratio that entropy allows.
nlohmann::json histogram_json(const bytes_t& raw, htp::weight_format f) {
  const auto h = htp::symbol_histogram(raw.data(), raw.size(), f);
  nlohmann::json bins = nlohmann::json::object();
  for (std::size_t s = 0; s < h.size(); ++s) {
    if (h[s] != 0) bins[std::to_string(s)] = h[s];
  }
  const double bits = htp::synthetic::entropy_bits(h);
  const double w = 8.0 * static_cast<double>(htp::element_bytes(f));
  return {
      {"symbol", f == htp::weight_format::fp16 ? "exponent*8 + top 3 mantissa bits" : "exponent"},
      {"entropy_bits", bits},
      {"entropy_bound_ratio", (bits + w - 8) / w},
      {"bins", bins}};
}

nlohmann::json measure(const distribution& d, htp::weight_format f, const options& o) {
  const bytes_t raw = d.draw(o.elements, f);
  bytes_t frame;
  const double enc =
      best_cpu_seconds(o.repeats, [&] { frame = htp::encode_weights(raw.data(), raw.size(), f); });
  bytes_t back(raw.size());
  const double dec = best_cpu_seconds(o.repeats, [&] {
    htp::decode_weights(frame.data(), frame.size(), back.data(), back.size());
  });
  if (back != raw) throw htp::logic_error("htp-codec-bench: " + d.name + " did not round-trip");
  const double mb = static_cast<double>(raw.size()) / 1e6;
  const double ratio = static_cast<double>(frame.size()) / static_cast<double>(raw.size());
  fmt::print("{:5} {:15} ratio {:6.4f}  encode {:7.1f} MB/s  decode {:7.1f} MB/s (one core)\n",
             htp::to_string(f), d.name, ratio, mb / enc, mb / dec);
  return {{"format", htp::to_string(f)},
          {"distribution", d.name},
          {"drawn_as", d.how},
          {"raw_bytes", raw.size()},
          {"wire_bytes", frame.size()},
          {"ratio", ratio},
          {"encode_mb_per_s_one_core", mb / enc},
          {"decode_mb_per_s_one_core", mb / dec},
          {"histogram", histogram_json(raw, f)}};
}

/// Llama-like bf16 weights, drawn in 64 MiB slices on `threads` threads (each slice its own seed).
bytes_t draw_parallel(std::size_t bytes, unsigned threads) {
  constexpr std::size_t slice = std::size_t{64} << 20;
  bytes_t out(bytes);
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i * slice < bytes; i = next++) {
      const std::size_t n = std::min(slice, bytes - i * slice);
      const bytes_t part = htp::synthetic::llama_mixture(n / 2, htp::weight_format::bf16, 100 + i);
      std::memcpy(out.data() + i * slice, part.data(), part.size());
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return out;
}

struct device_buffer {
  htp::device& dev;
  htp::memory_kind kind;
  std::size_t bytes;
  void* ptr;
  device_buffer(htp::device& d, htp::memory_kind k, std::size_t n)
      : dev(d), kind(k), bytes(n), ptr(d.allocate(k, n)) {}
  ~device_buffer() { dev.deallocate(kind, ptr, bytes); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

/// The device decode on gpu_gib GiB: bit-exact check and rate. Returns its JSON.
nlohmann::json gpu_decode(const options& o) {
  htp::bench::device_options d;
  d.backend = o.backend;
  const std::size_t bytes = static_cast<std::size_t>(o.gpu_gib * (1 << 30)) & ~std::size_t{1};
  d.sim_memory_bytes = bytes * 2 + (std::size_t{256} << 20);
  auto dev = htp::bench::make_bench_device(d);
  const bytes_t raw = draw_parallel(bytes, o.threads);
  htp::codec_options co;
  co.threads = o.threads;
  const auto t0 = clock_type::now();
  const bytes_t frame = htp::encode_weights(raw.data(), raw.size(), htp::weight_format::bf16, co);
  const double enc = std::chrono::duration<double>(clock_type::now() - t0).count();
  device_buffer host(*dev, htp::memory_kind::pinned_host, std::max(frame.size(), bytes));
  device_buffer wire(*dev, htp::memory_kind::device, frame.size());
  device_buffer out(*dev, htp::memory_kind::device, bytes);
  htp::stream s(*dev);
  std::memcpy(host.ptr, frame.data(), frame.size());
  dev->copy_async(wire.ptr, host.ptr, frame.size(), htp::copy_direction::host_to_device, s);
  s.synchronize();
  const double sec = best_seconds(std::max(o.repeats, 3), [&] {
    dev->decode_weights_async(wire.ptr, frame.size(), out.ptr, bytes, s);
    s.synchronize();
  });
  dev->copy_async(host.ptr, out.ptr, bytes, htp::copy_direction::device_to_host, s);
  s.synchronize();
  const bool exact = std::memcmp(host.ptr, raw.data(), bytes) == 0;
  const auto& p = dev->properties();
  fmt::print("device decode on {} ({}): {:.2f} GiB, ratio {:.4f}, {:.1f} GB/s of output, {}\n",
             p.name, htp::to_string(p.kind), o.gpu_gib,
             static_cast<double>(frame.size()) / static_cast<double>(bytes),
             static_cast<double>(bytes) / sec / 1e9, exact ? "bit-exact" : "MISMATCH");
  return {{"device", p.name},
          {"backend", htp::to_string(p.kind)},
          {"decoded_bytes", bytes},
          {"wire_bytes", frame.size()},
          {"bit_exact", exact},
          {"decode_gb_per_s", static_cast<double>(bytes) / sec / 1e9},
          {"cpu_encode_gb_per_s", static_cast<double>(bytes) / enc / 1e9},
          {"cpu_encode_threads", o.threads}};
}

nlohmann::json published() {
  return {{"dfloat11",
           {{"source", "DFloat11, arXiv 2504.11651"},
            {"models", "Llama 3.1 8B, Llama 3.3 70B, Llama 3.1 405B (bf16)"},
            {"ratio_min", 0.676},
            {"ratio_max", 0.695},
            {"exponent_entropy_bits", 2.6}}}};
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const int rc = parse_options(argc, argv, o); rc >= 0) return rc;
  nlohmann::json j;
  j["benchmark"] = "htp-codec-bench";
  j["elements"] = o.elements;
  j["published"] = published();
  try {
    for (const auto& name : o.formats) {
      const htp::weight_format f = format_of(name);
      for (const auto& d : distributions()) j["results"].push_back(measure(d, f, o));
    }
    if (o.gpu_gib > 0) {
      j["device_decode"] = gpu_decode(o);
      if (!j["device_decode"]["bit_exact"].get<bool>()) {
        std::ofstream(o.json_path.empty() ? "/dev/null" : o.json_path) << j.dump(2) << "\n";
        return 1;
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "htp-codec-bench: {}\n", e.what());
    return 2;
  }
  if (!o.json_path.empty()) {
    std::ofstream(o.json_path) << j.dump(2) << "\n";
    fmt::print("wrote {}\n", o.json_path);
  }
  return 0;
}
