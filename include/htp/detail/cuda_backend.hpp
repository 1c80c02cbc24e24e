// Entry points of the cuda backend (cuda/), declared without CUDA headers so that src/ can reach
// them. When htp is built without CUDA, src/no_cuda.cpp defines them to report that.
#pragma once

#include <htp/device.hpp>

#include <memory>
#include <string>

namespace htp::detail {

/// Creates the cuda device for `ordinal`. @throws htp::invalid_argument if there is no such GPU.
std::unique_ptr<device> make_cuda_device(int ordinal);

/// Number of visible CUDA devices; 0 with a reason in `why` when none.
int cuda_device_count(std::string* why) noexcept;

/// True when this build of htp contains the cuda backend.
bool built_with_cuda() noexcept;

}  // namespace htp::detail
