// htp-stream-bench --gpus N: a mode's result from what its GPU threads measured. See
// node_runner.hpp.
#pragma once

#include "node_threads.hpp"

#include <cstddef>

namespace htp::bench::node_run {

/// The run's result from the GPUs' outputs: per-step times (the slowest GPU), rates, metrics.
/// Undoes sim time dilation in `run`'s per-GPU times first.
node_result results_of(gpu_threads& run, int resident_layers, std::size_t per_sync);

}  // namespace htp::bench::node_run
