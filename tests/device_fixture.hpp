// Per-backend factories for the typed device conformance suite. The cuda instance skips, with the
// reason, when no GPU is visible.
#pragma once

#include <htp/device.hpp>
#include <htp/sim_device.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace htp::test {

struct sim_backend {
  static constexpr const char* name = "sim";
  static std::unique_ptr<device> make(std::string*) {
    sim_config c;
    c.device_memory_bytes = std::size_t{256} << 20;
    c.pinned_memory_bytes = std::size_t{256} << 20;
    return make_sim_device(c);
  }
};

struct cuda_backend {
  static constexpr const char* name = "cuda";
  static std::unique_ptr<device> make(std::string* skip_reason) {
    std::string why;
    if (cuda_device_count(&why) == 0) {
      *skip_reason = "no GPU here (" + why + "); the cuda instance runs on a machine with one";
      return nullptr;
    }
    return make_device(backend::cuda);
  }
};

/// Every backend, for TYPED_TEST_SUITE(suite, backends, backend_names): sim always runs, cuda skips
/// without a GPU.
using backends = ::testing::Types<sim_backend, cuda_backend>;
/// Names the typed instances by backend ("sim", "cuda") instead of a number.
struct backend_names {
  template <typename T>
  static std::string GetName(int) {
    return T::name;
  }
};

/// RAII for one allocation of `dev`, so a failing assertion leaks nothing.
struct buffer {
  device& dev;
  memory_kind kind;
  std::size_t bytes;
  void* ptr;
  buffer(device& d, memory_kind k, std::size_t n)
      : dev(d), kind(k), bytes(n), ptr(d.allocate(k, n)) {}
  ~buffer() { dev.deallocate(kind, ptr, bytes); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  unsigned char* at(std::size_t off) const { return static_cast<unsigned char*>(ptr) + off; }
};

/// Fixture giving each test a fresh device `dev` of the backend, or skipping.
template <typename Backend>
class device_test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    dev = Backend::make(&reason);
    if (!dev) GTEST_SKIP() << reason;
  }
  std::unique_ptr<device> dev;
};

}  // namespace htp::test
