// The sim backend's layer compute: host functions on the compute stream.
#include "compute.hpp"

#include <htp/checksum.hpp>
#include <htp/detail/check.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

namespace htp::bench {
namespace {

class sim_compute final : public layer_compute {
 public:
  sim_compute(device& dev, bool checksum_mode, double gbps, double link_gbps)
      : dev_(dev), checksum_mode_(checksum_mode), gbps_(gbps), link_gbps_(link_gbps) {}

  void run_layer(const std::vector<weight_view>& weights, int, stream_ref s) override {
    dev_.launch_host_func(
        [this, weights] {
          const auto t0 = std::chrono::steady_clock::now();
          if (checksum_mode_) {
            for (const auto& w : weights) {
              const std::uint64_t sum = checksum(w.span.data, w.span.bytes);
              if (w.verify && sum != w.expected_checksum) ++mismatches_;
            }
          } else {
            double modelled_ns = 0;
            for (const auto& w : weights) {
              const bool over_link = w.span.degraded && link_gbps_ > 0;
              modelled_ns += static_cast<double>(w.span.bytes) / (over_link ? link_gbps_ : gbps_);
              if (!w.verify) continue;
              const auto* p = static_cast<const unsigned char*>(w.span.data);
              const std::size_t n = std::min(sample_bytes, w.span.bytes);
              if (checksum(p, n) != w.expected_head ||
                  checksum(p + w.span.bytes - n, n) != w.expected_tail) {
                ++mismatches_;
              }
            }
            // The modelled device time of reading the weights from HBM (or over the link).
            std::this_thread::sleep_until(
                t0 + std::chrono::nanoseconds(static_cast<std::int64_t>(modelled_ns)));
          }
          const auto t1 = std::chrono::steady_clock::now();
          const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
          compute_ns_ += static_cast<std::uint64_t>(ns);
          std::lock_guard lock(samples_mutex_);
          spans_.push_back({t0, t1});
        },
        s);
  }

  double take_compute_ms() override { return static_cast<double>(compute_ns_.exchange(0)) / 1e6; }

  // The stream's thread runs the marks in order: the begin mark's stamp is when the stream reached
  // the waits, the end mark's when they were all satisfied.
  void begin_stall(stream_ref s) override {
    dev_.launch_host_func([this] { stall_from_ = std::chrono::steady_clock::now(); }, s);
  }
  void end_stall(stream_ref s) override {
    dev_.launch_host_func(
        [this] {
          const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now() - stall_from_)
                              .count();
          stall_ns_ += static_cast<std::uint64_t>(ns);
          std::lock_guard lock(samples_mutex_);
          samples_.push_back(static_cast<double>(ns) / 1e6);
        },
        s);
  }
  double take_stall_ms() override {
    std::lock_guard lock(samples_mutex_);
    samples_.clear();
    return static_cast<double>(stall_ns_.exchange(0)) / 1e6;
  }
  std::vector<span> take_spans() override {
    std::lock_guard lock(samples_mutex_);
    std::vector<span> out;
    out.swap(spans_);
    return out;
  }
  std::vector<double> stall_samples_ms() const override {
    std::lock_guard lock(samples_mutex_);
    return samples_;
  }
  std::uint64_t take_mismatches() override { return mismatches_.exchange(0); }

  std::string description() const override {
    if (checksum_mode_) return "sim: a host function per layer that checksums every weight byte";
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "sim: modelled device time per layer, weight bytes / %.0f GB/s (HBM), ends of "
                  "each weight verified",
                  gbps_);
    return buf;
  }

 private:
  device& dev_;
  bool checksum_mode_;
  double gbps_;
  double link_gbps_;  // degraded weights (mapped host memory) are read at this rate; 0: as HBM
  std::atomic<std::uint64_t> compute_ns_{0};
  std::atomic<std::uint64_t> stall_ns_{0};
  mutable std::mutex samples_mutex_;
  std::vector<double> samples_;  // per pair of marks
  std::vector<span> spans_;      // run_layer work, stamped by the stream's thread
  std::chrono::steady_clock::time_point stall_from_;  // written and read by the stream's thread
  std::atomic<std::uint64_t> mismatches_{0};
};

}  // namespace

std::unique_ptr<layer_compute> make_sim_compute(device& dev, const std::string& mode,
                                                double modelled_gbps, double link_gbps) {
  HTP_EXPECTS(mode == "checksum" || mode == "modelled", invalid_argument, "--sim-compute '", mode,
              "': use 'checksum' or 'modelled'");
  HTP_EXPECTS(mode == "checksum" || modelled_gbps > 0, invalid_argument,
              "--sim-compute-gbps must be positive");
  return std::make_unique<sim_compute>(dev, mode == "checksum", modelled_gbps, link_gbps);
}

}  // namespace htp::bench
