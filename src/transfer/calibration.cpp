// measure_copy_bandwidth: the start-up link calibration, also used by the benchmark's sweep.
#include <htp/detail/check.hpp>
#include <htp/error.hpp>
#include <htp/transfer_engine.hpp>

#include <algorithm>
#include <chrono>

namespace htp {

std::uint64_t measure_copy_bandwidth(device& dev, copy_direction direction, std::size_t bytes,
                                     int repeats) {
  HTP_EXPECTS(bytes > 0 && repeats >= 1, invalid_argument, "measure_copy_bandwidth(", bytes, ", ",
              repeats, "): need bytes > 0 and repeats >= 1");
  HTP_EXPECTS(
      direction == copy_direction::host_to_device || direction == copy_direction::device_to_host,
      invalid_argument, "measure_copy_bandwidth: direction ", to_string(direction),
      " has no host link; use H2D or D2H");
  void* host = dev.allocate(memory_kind::pinned_host, bytes);
  void* hbm = nullptr;
  try {
    hbm = dev.allocate(memory_kind::device, bytes);
  } catch (...) {
    dev.deallocate(memory_kind::pinned_host, host, bytes);
    throw;
  }
  std::uint64_t result = 1;
  try {
    stream s(dev);
    const bool h2d = direction == copy_direction::host_to_device;
    void* dst = h2d ? hbm : host;
    const void* src = h2d ? host : hbm;
    dev.copy_async(dst, src, bytes, direction, s);  // warm-up
    s.synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repeats; ++i) dev.copy_async(dst, src, bytes, direction, s);
    s.synchronize();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    const double bps = static_cast<double>(bytes) * repeats * 1e9 /
                       static_cast<double>(std::max<std::int64_t>(ns, 1));
    result = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(bps));
  } catch (...) {
    dev.deallocate(memory_kind::device, hbm, bytes);
    dev.deallocate(memory_kind::pinned_host, host, bytes);
    throw;
  }
  dev.deallocate(memory_kind::device, hbm, bytes);
  dev.deallocate(memory_kind::pinned_host, host, bytes);
  return result;
}

}  // namespace htp
