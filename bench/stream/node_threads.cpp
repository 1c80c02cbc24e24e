// htp-stream-bench --gpus N: each GPU's thread. See node_threads.hpp.
#include "node_threads.hpp"

#include "common/bench_device.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace htp::bench::node_run {

void gpu_threads::fail_run(std::size_t g, const char* why) noexcept {
  {
    std::lock_guard lock(fail_mu);
    if (first_failed == err.size()) first_failed = g;
  }
  try {
    coll.abort(detail::concat("GPU ", g, " failed: ", why));
  } catch (...) {  // out of memory for the message
    coll.abort("a GPU thread failed");
  }
  squeeze_sync.abort();
}

std::pair<long, long> injected_failure(const node_options& o) {
  if (o.fail_gpu >= 0 || o.fail_at_step >= 0) return {o.fail_gpu, o.fail_at_step};
  const char* env = std::getenv("HTP_STREAM_BENCH_FAIL");
  if (env == nullptr || *env == '\0') return {-1, -1};
  char* end = nullptr;
  const long gpu = std::strtol(env, &end, 10);
  HTP_EXPECTS(end != env && *end == ':', invalid_argument, "HTP_STREAM_BENCH_FAIL=", env,
              ": give GPU:STEP, e.g. 1:1 (GPU 1 fails at step 1)");
  const char* rest = end + 1;
  const long step = std::strtol(rest, &end, 10);
  HTP_EXPECTS(end != rest && *end == '\0' && gpu >= 0 && step >= 0, invalid_argument,
              "HTP_STREAM_BENCH_FAIL=", env, ": give GPU:STEP, two numbers >= 0, e.g. 1:1");
  return {gpu, step};
}

namespace {

/// The largest device-resident block `p` can take now, to 1 MiB, by bisection over
/// register_resident (which evicts paged tensors as a fault would and refuses what cannot fit).
std::size_t largest_block(pager& p, std::size_t budget) {
  const std::size_t mib = std::size_t{1} << 20;
  const auto fits = [&](std::size_t n) {
    try {
      p.unregister_tensor(p.register_resident("hbm-probe", n * mib, tensor_kind::mutable_state));
      return true;
    } catch (const out_of_memory&) {
      return false;
    } catch (const invalid_argument&) {  // larger than any HBM extent
      return false;
    }
  };
  std::size_t lo = 0, hi = budget / mib + 1;  // in MiB: lo fits, hi does not
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo * mib;
}

/// HBM forced short (before GPU g's first timed step): a device-resident block takes all but
/// squeeze_leave_bytes of what the resident layers left (it evicts paged tensors as a fault would).
/// The largest block that fits is found by bisection (register_resident refuses what does not
/// fit), so rounding and bins are the pager's own. Then every GPU waits for the others, so all are
/// squeezed before any times a step (a step is its slowest GPU's).
void squeeze_gpu(gpu_threads& r, std::size_t g) {
  pager& p = r.nd.gpu(g);
  const std::size_t room = largest_block(p, r.cfg.hbm_budget_bytes);
  const std::size_t block = room > r.o.squeeze_leave_bytes ? room - r.o.squeeze_leave_bytes : 0;
  if (block > 0) (void)p.register_resident("hbm-pressure", block, tensor_kind::mutable_state);
  r.squeezed[g] = block;
  r.left[g] = largest_block(p, r.cfg.hbm_budget_bytes);  // measured: what paged tensors get
  r.squeeze_sync.arrive_and_wait();
}

/// One step of GPU g: every layer acquired, computed and released on `cs` (and all-reduced in
/// tensor-parallel mode). Returns once the step's work is queued.
void run_step(gpu_threads& r, std::size_t g, int step, layer_compute& compute, stream& cs,
              void* act) {
  device& dev = *r.devs[g];
  pager& p = r.nd.gpu(g);
  const std::size_t N = r.devs.size();
  const auto& wg = r.w[g];
  for (std::size_t l = 0; l < wg.size(); ++l) {
    if (static_cast<long>(g) == r.fail.first && step == r.fail.second &&
        l == std::min<std::size_t>(1, wg.size() - 1)) {
      throw logic_error(detail::concat("injected failure (for tests): GPU ", g, " at step ", step,
                                       ", layer ", l));
    }
    if (r.ss) {
      compute.begin_stall(cs);
      const device_span layer = r.ss->acquire(g, l, cs);
      compute.end_stall(cs);
      std::vector<weight_view> views;
      for (const auto& gw : wg[l]) {
        const device_span sp{static_cast<char*>(layer.data) + gw.offset, gw.bytes, false};
        views.push_back({sp, gw.rows, gw.cols, gw.sum, gw.head, gw.tail, !r.timing_only});
      }
      compute.run_layer(views, r.cfg.tokens, cs);
      r.ss->release(g, l, cs);
      continue;
    }
    for (const auto& gw : wg[l]) {
      compute.begin_stall(cs);
      const device_span sp = p.acquire(gw.h, cs);
      compute.end_stall(cs);
      compute.run_layer({{sp, gw.rows, gw.cols, gw.sum, gw.head, gw.tail, !r.timing_only}},
                        r.cfg.tokens, cs);
      p.release(gw.h, cs);
    }
    if (r.mode == node_mode::tensor_parallel && N > 1) {
      // The layer's partial activations summed over the GPUs, as tensor parallelism does.
      if (step >= r.cfg.warmup_steps) r.coll_time[g].mark_begin(dev, cs);
      r.coll.all_reduce_sum(g, act, act, r.act_bytes / 2, element_type::bfloat16, cs);
      if (step >= r.cfg.warmup_steps) r.coll_time[g].mark_end(dev, cs);
    }
  }
}

/// GPU g's steps on its compute stream, then its metrics. On a failure, before anything of GPU g is
/// freed: the run is failed (fail_run), GPU g's swap-and-shard gathers stopped and its compute
/// stream drained, so no stream of GPU g waits for a host thread while memory goes back.
void run_gpu_steps(gpu_threads& r, std::size_t g, layer_compute& compute, stream& cs, void* act) {
  pager& p = r.nd.gpu(g);
  const auto quiesce = [&](const char* why) noexcept {
    r.fail_run(g, why);
    try {
      if (r.ss) r.ss->stop(g);
      cs.synchronize();
    } catch (...) {  // the first error is the one reported
    }
  };
  try {
    for (int step = 0; step < r.total; ++step) {
      if (step == r.cfg.warmup_steps && r.squeeze) squeeze_gpu(r, g);
      if (step == r.cfg.warmup_steps) {
        compute.take_stall_ms();
        compute.take_mismatches();
        p.reset_metrics();  // page-ins, fault waits, occupancy and rates of the timed steps only
        std::lock_guard lock(r.time_mu);
        if (r.timed_begin == clock_type::time_point{}) r.timed_begin = clock_type::now();
      }
      const auto t0 = clock_type::now();
      run_step(r, g, step, compute, cs, act);
      cs.synchronize();
      r.step_ms[g][static_cast<std::size_t>(step)] =
          std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    }
    r.stall[g] = compute.take_stall_ms() / static_cast<double>(r.cfg.steps);
    const pager_metrics pm = p.metrics();  // of the timed steps (reset after the warm-up)
    r.fault_page_ms[g] = pm.fault_wait.ms_per_64mib_page;
    r.faults_ms[g] =
        pm.elapsed_ms > 0 ? static_cast<double>(pm.faults + pm.late_prefetches) / pm.elapsed_ms : 0;
    r.hbm_peak[g] = pm.hbm.peak_pct;
    r.paged[g] = static_cast<double>(pm.page_in_bytes) / static_cast<double>(r.cfg.steps);
    r.degraded[g] = pm.degraded_acquires;
    r.bad[g] = compute.take_mismatches();
    {
      std::lock_guard lock(r.time_mu);
      r.timed_end = std::max(r.timed_end, clock_type::now());
    }
  } catch (const std::exception& e) {
    quiesce(e.what());
    throw;
  } catch (...) {
    quiesce("unknown error");
    throw;
  }
  // The look-ahead gathers still wait for loads the engine has yet to issue: stopped before the
  // frees that follow (the activations, the compute's buffers and handle) synchronise the device.
  if (r.ss) r.ss->stop(g);
}

}  // namespace

void run_gpu(gpu_threads& r, std::size_t g) {
  try {
    device& dev = *r.devs[g];
    std::unique_ptr<layer_compute> compute;
    if (r.o.kind == backend::cuda) {
      compute = make_cuda_compute(dev, r.cfg.type, r.cfg.tokens, r.cfg.model);
    } else {
      compute = make_sim_compute(dev, "modelled", r.o.compute_gbps, r.o.sim_link_gbps);
    }
    stream cs(dev);
    const device_buffer act(dev, std::max<std::size_t>(r.act_bytes, 256));
    run_gpu_steps(r, g, *compute, cs, act.ptr);
  } catch (...) {
    r.err[g] = std::current_exception();
    std::string what = "unknown error";
    try {
      std::rethrow_exception(r.err[g]);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    r.fail_run(g, what.c_str());  // again for failures outside the steps (a no-op after the first)
    std::fprintf(stderr, "htp-stream-bench: GPU %zu failed: %s\n", g, what.c_str());  // said now
  }
}

}  // namespace htp::bench::node_run
