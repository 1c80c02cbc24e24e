// Shared set-up for the pager tests: a small sim device, small geometry (64 KiB slabs), an
// unlimited link with a known peak (no calibration), and helpers that verify a tensor's bytes on
// the device (a checksum "kernel" on the compute stream), as a model runner's kernel would read
// them.
#pragma once

#include <htp/checksum.hpp>
#include <htp/error.hpp>
#include <htp/pager.hpp>
#include <htp/sim_device.hpp>
#include <htp/transfer_engine.hpp>

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <vector>

namespace htp::test {

constexpr std::size_t slab = 64 << 10;

inline pager_config small_pager_config(std::size_t hbm_slabs, std::size_t host_slabs = 256) {
  pager_config c;
  c.hbm_budget_bytes = hbm_slabs * slab;
  c.host_budget_bytes = host_slabs * slab;
  c.slab_bytes = slab;
  c.chunk_bytes = 16 << 10;
  c.h2d.link_bytes_per_second = 10'000'000'000;
  c.h2d.unlimited = true;
  c.d2h.link_bytes_per_second = 10'000'000'000;
  c.d2h.unlimited = true;
  return c;
}

/// A transfer engine's settings for `bytes` of HBM at `hbm` alone: 16 KiB chunks, an unlimited
/// link with a known peak (the engine tests that read files build one beside no pager).
inline transfer_config small_engine_config(void* hbm, std::size_t bytes) {
  transfer_config tc;
  tc.chunk_bytes = 16 << 10;
  tc.h2d.link_bytes_per_second = 10'000'000'000;
  tc.h2d.unlimited = true;
  tc.d2h = tc.h2d;
  tc.device_memory = {{hbm, bytes}};
  return tc;
}

inline std::unique_ptr<device> small_sim_device() {
  sim_config c;
  c.device_memory_bytes = 64 << 20;
  c.pinned_memory_bytes = 128 << 20;
  return make_sim_device(c);
}

/// Holds a stream until opened; opens itself on destruction so a failing test never hangs.
struct gate {
  std::promise<void> promise;
  std::shared_future<void> future = promise.get_future().share();
  bool opened = false;
  void hold(device& dev, stream_ref s) {
    dev.launch_host_func([f = future] { f.wait(); }, s);
  }
  void open() {
    if (!opened) promise.set_value();
    opened = true;
  }
  ~gate() { open(); }
};

/// A payload of `bytes` bytes made from `seed`.
inline std::vector<unsigned char> payload(std::size_t bytes, std::uint64_t seed) {
  std::vector<unsigned char> v(bytes);
  fill_pattern(v.data(), bytes, seed);
  return v;
}

/// Pinned result slot for device checksums.
struct checksum_slot {
  device& dev;
  std::uint64_t* value;
  explicit checksum_slot(device& d)
      : dev(d), value(static_cast<std::uint64_t*>(d.allocate(memory_kind::pinned_host, 8))) {}
  ~checksum_slot() { dev.deallocate(memory_kind::pinned_host, value, 8); }
};

/// A test with a small sim device, a compute stream and a checksum slot (the pager suites' set-up).
class sim_pager_test : public ::testing::Test {
 protected:
  std::unique_ptr<device> dev = small_sim_device();
  stream compute{*dev};
  checksum_slot slot{*dev};
};

/// Acquires `h`, checksums its bytes on `compute` like a kernel would, releases, and returns the
/// checksum (synchronizing the stream).
inline std::uint64_t device_checksum(pager& p, device& dev, tensor_handle h, stream& compute,
                                     checksum_slot& slot) {
  const device_span s = p.acquire(h, compute);
  dev.checksum_async(s.data, s.bytes, slot.value, compute);
  p.release(h, compute);
  compute.synchronize();
  return *slot.value;
}

}  // namespace htp::test
