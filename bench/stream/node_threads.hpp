// htp-stream-bench --gpus N: one thread per GPU, as an engine drives a node. Each runs its GPU's
// warm-up and timed steps (acquire, compute, release, the collectives of its mode) and keeps its
// figures in its slot of gpu_threads; a failing GPU fails the run without waiting for the others.
// See node_runner.hpp.
#pragma once

#include "node_sync.hpp"
#include "node_weights.hpp"

#include <htp/collectives.hpp>
#include <htp/node.hpp>
#include <htp/swap_shard.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace htp::bench::node_run {

/// What the GPU threads of one run share: the run's inputs, each GPU's outputs (slot g written by
/// GPU g's thread only) and the first failure.
struct gpu_threads {
  gpu_threads(const bench_config& c, node_mode m, const node_options& opt, node& n, collectives& cl,
              swap_shard* s, const std::vector<std::unique_ptr<device>>& d,
              const node_weights& weights, bool only, bool sq, std::pair<long, long> f,
              std::size_t gpus)
      : cfg(c), mode(m), o(opt), nd(n), coll(cl), ss(s), devs(d), w(weights), timing_only(only),
        squeeze(sq), fail(f), total(c.warmup_steps + c.steps),
        act_bytes(static_cast<std::size_t>(c.tokens) * static_cast<std::size_t>(c.model.hidden) *
                  2),
        step_ms(gpus, std::vector<double>(static_cast<std::size_t>(total), 0)), stall(gpus, 0),
        paged(gpus, 0), fault_page_ms(gpus, 0), faults_ms(gpus, 0), hbm_peak(gpus, 0), bad(gpus, 0),
        degraded(gpus, 0), squeezed(gpus, 0), left(gpus, 0), coll_time(gpus), squeeze_sync(gpus),
        err(gpus), first_failed(gpus) {}
  const bench_config& cfg;
  const node_mode mode;
  const node_options& o;
  node& nd;
  collectives& coll;
  swap_shard* const ss;  // swap-and-shard only
  const std::vector<std::unique_ptr<device>>& devs;
  const node_weights& w;  // [gpu][layer][tensor]
  const bool timing_only, squeeze;
  const std::pair<long, long> fail;  // injected: (GPU, step)
  const int total;                   // warm-up and timed steps
  const std::size_t act_bytes;
  std::vector<std::vector<double>> step_ms;
  std::vector<double> stall, paged, fault_page_ms, faults_ms, hbm_peak;
  std::vector<std::uint64_t> bad, degraded;
  std::vector<std::size_t> squeezed, left;
  std::vector<stamps> coll_time;
  one_time_barrier squeeze_sync;
  clock_type::time_point timed_begin{}, timed_end{};
  std::mutex time_mu;
  std::vector<std::exception_ptr> err;
  std::mutex fail_mu;
  std::size_t
      first_failed;  // the GPU that failed first (its err is set once the threads end); N: none

  /// GPU g failed (`why`): nothing may wait for it any more. The first GPU to get here is the
  /// run's cause (the others' errors are its echoes). The collectives are aborted, so the other
  /// GPUs' pending collectives complete and their next calls throw; the barrier opens.
  void fail_run(std::size_t g, const char* why) noexcept;
};

/// The failure a test asked for: (GPU, step), or (-1, -1) for none. From the options, else from
/// $HTP_STREAM_BENCH_FAIL ("GPU:STEP").
std::pair<long, long> injected_failure(const node_options& o);

/// GPU g's thread, as an engine drives a node: its compute, stream and activations, its steps.
/// An error is kept in r.err[g] (the first GPU to fail in r.first_failed) and fails the run.
void run_gpu(gpu_threads& r, std::size_t g);

}  // namespace htp::bench::node_run
