// N sim GPUs with a stream each, for the tests of what runs across GPUs (collectives, gradient
// reduction).
#pragma once

#include <htp/device.hpp>
#include <htp/sim_device.hpp>

#include <cstddef>
#include <memory>
#include <vector>

namespace htp::test {

struct sim_gpus {
  std::vector<std::unique_ptr<device>> devs;
  std::vector<device*> ptrs;
  std::vector<std::unique_ptr<stream>> streams;
  explicit sim_gpus(std::size_t n) {
    for (std::size_t g = 0; g < n; ++g) {
      sim_config c;
      c.device_memory_bytes = 8 << 20;
      c.ordinal = static_cast<int>(g);
      devs.push_back(make_sim_device(c));
      ptrs.push_back(devs.back().get());
      streams.push_back(std::make_unique<stream>(*devs.back()));
    }
  }
};

}  // namespace htp::test
