// htp-stream-bench --gpus N. See node_runner.hpp.
#include "node_runner.hpp"

#include "common/bench_device.hpp"
#include "shared/htp_layout.hpp"

#include <htp/checksum.hpp>
#include <htp/collectives.hpp>
#include <htp/detail/check.hpp>
#include <htp/node.hpp>
#include <htp/swap_shard.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace htp::bench {

const char* to_string(node_mode m) noexcept {
  switch (m) {
    case node_mode::data_parallel: return "data-parallel";
    case node_mode::tensor_parallel: return "tensor-parallel";
    case node_mode::swap_and_shard: return "swap-and-shard";
  }
  return "?";
}

namespace {

using clock_type = std::chrono::steady_clock;

/// One weight as GPU g reads it: its handle (or its offset in a swap-and-shard layer) and checks.
struct gpu_weight {
  tensor_handle h;
  std::size_t offset = 0, bytes = 0;
  std::uint64_t rows = 0, cols = 0, sum = 0, head = 0, tail = 0;
};

/// Its checksums when `data` is given; none (nothing to verify) for a timing-only run's null data.
gpu_weight checked(const unsigned char* data, std::size_t bytes, std::uint64_t rows,
                   std::uint64_t cols) {
  if (data == nullptr) return {tensor_handle{}, 0, bytes, rows, cols, 0, 0, 0};
  const weight_sums ws = sums_of(data, bytes);
  return {tensor_handle{}, 0, bytes, rows, cols, ws.sum, ws.head, ws.tail};
}

/// Host functions on a stream stamping the stream thread's clock: device-side durations on sim.
struct stamps {
  std::mutex mu;
  std::vector<double> ms;
  clock_type::time_point begin;
  void mark_begin(device& d, stream_ref s) {
    d.launch_host_func([this] { begin = clock_type::now(); }, s);
  }
  void mark_end(device& d, stream_ref s) {
    d.launch_host_func(
        [this] {
          const double x =
              std::chrono::duration<double, std::milli>(clock_type::now() - begin).count();
          std::lock_guard lock(mu);
          ms.push_back(x);
        },
        s);
  }
};

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

/// All of `n` threads wait here until the last arrives (C++17 has no std::barrier). One use.
/// Abortable: once one thread has failed, the others never arrive, so abort() lets every waiter
/// (and every later arrival) go with an error instead.
class one_time_barrier {
 public:
  explicit one_time_barrier(std::size_t n) : left_(n) {}
  /// Blocks until all n threads have arrived. @throws htp::logic_error once aborted.
  void arrive_and_wait() {
    std::unique_lock lock(mu_);
    if (!aborted_ && --left_ == 0) {
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return left_ == 0 || aborted_; });
    if (left_ != 0)
      throw logic_error("another GPU failed before every GPU reached the barrier (see its error)");
  }
  /// Releases the waiters and later arrivals, which throw. Thread-safe, idempotent.
  void abort() noexcept {
    std::lock_guard lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t left_;
  bool aborted_ = false;
};

/// The failure a test asked for: (GPU, step), or (-1, -1) for none. From the options, else from
/// $HTP_STREAM_BENCH_FAIL ("GPU:STEP").
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

/// The node's N devices: the first N cuda GPUs, or N sim devices each with the single-GPU run's
/// modelled link. @throws htp::invalid_argument for more cuda GPUs than are visible.
std::vector<std::unique_ptr<device>> make_devices(const bench_config& cfg, const node_options& o,
                                                  bool timing_only) {
  const std::size_t N = o.gpus;
  if (o.kind == backend::cuda) {
    const int visible = cuda_device_count();
    HTP_EXPECTS(N <= static_cast<std::size_t>(visible), invalid_argument, "--gpus ", N, ": ",
                visible, " CUDA GPU(s) visible; give at most ", visible,
                " (or run the node on sim with --backend sim)");
  }
  device_options d;
  d.backend = o.kind == backend::cuda ? "cuda" : "sim";
  d.sim_memory_bytes = cfg.hbm_budget_bytes + (std::size_t{1} << 30);
  d.sim_link_gbps = o.sim_link_gbps;
  d.sim_latency_us = o.sim_latency_us;
  d.sim_timing_only = timing_only;
  std::vector<std::unique_ptr<device>> devs;
  for (std::size_t g = 0; g < N; ++g) {
    d.ordinal = static_cast<int>(g);
    devs.push_back(make_bench_device(d));
  }
  return devs;
}

/// Registers cfg's layers with the node as `mode` lays them out, with the single-GPU run's
/// patterns (none when timing-only): replicated, column-sharded (resident where !paged_layer[l]),
/// or, for swap-and-shard, packed per layer into swap_layer_bytes / swap_layers for swap_shard.
/// Returns each GPU's view of every weight, [gpu][layer][tensor].
std::vector<std::vector<std::vector<gpu_weight>>> register_weights(
    const bench_config& cfg, node_mode mode, node& nd, bool timing_only,
    const std::vector<bool>& paged_layer, std::vector<std::size_t>& swap_layer_bytes,
    std::vector<std::vector<unsigned char>>& swap_layers) {
  const std::size_t N = nd.gpu_count();
  const auto shapes = layer_tensors(cfg.model);
  const std::size_t elem = bytes_per_element(cfg.type);
  std::vector<std::vector<std::vector<gpu_weight>>> w(N);
  std::vector<unsigned char> buf;
  for (int l = 0; l < cfg.layers; ++l) {
    for (std::size_t g = 0; g < N; ++g) w[g].emplace_back();
    std::vector<unsigned char> packed;
    std::size_t packed_bytes = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const auto& t = shapes[i];
      const std::size_t bytes = t.rows * t.cols * elem;
      if (!timing_only) {  // timing-only: no bytes, no patterns (nothing is verified)
        buf.resize(bytes);
        fill_pattern(buf.data(), bytes,
                     cfg.seed * 1'000'003 + static_cast<std::uint64_t>(l) * 4096 + i);
      }
      const unsigned char* data = timing_only ? nullptr : buf.data();
      const std::string name = "L" + std::to_string(l) + "." + t.name;
      if (mode == node_mode::data_parallel) {
        const node_tensor nt = nd.register_replicated(name, bytes, data);
        for (std::size_t g = 0; g < N; ++g) {
          gpu_weight gw = checked(data, bytes, t.rows, t.cols);
          gw.h = nd.on(nt, g);
          w[g].back().push_back(gw);
        }
      } else if (mode == node_mode::tensor_parallel) {
        // Column shards (a vector, rows x 1, splits its bytes): shard g is the g-th 1/N of bytes.
        std::vector<std::size_t> sb(N);
        std::vector<const void*> src(N);
        std::size_t at = 0;
        for (std::size_t g = 0; g < N; ++g) {
          sb[g] = bytes / N + (g < bytes % N ? 1 : 0);
          src[g] = data ? data + at : nullptr;
          at += sb[g];
        }
        // Resident layers: each GPU's shard in its own HBM for the run, no host copy.
        const bool keep = !paged_layer[static_cast<std::size_t>(l)];
        node_tensor nt;
        const weight_format f = cfg.type == dtype::fp16 ? weight_format::fp16 : weight_format::bf16;
        if (!keep && cfg.compress)  // --compress: the paged shards are stored compressed
          nt = nd.register_sharded_compressed(name, sb, f, data ? src : std::vector<const void*>{});
        else if (!keep)
          nt = nd.register_sharded(name, sb, tensor_kind::weight,
                                   data ? src : std::vector<const void*>{});
        at = 0;
        for (std::size_t g = 0; g < N; ++g) {
          gpu_weight gw = checked(data ? data + at : nullptr, sb[g], t.rows,
                                  std::max<std::uint64_t>(1, t.cols / N));
          gw.h = keep ? nd.gpu(g).register_resident(name, sb[g], tensor_kind::weight, src[g])
                      : nd.on(nt, g);
          w[g].back().push_back(gw);
          at += sb[g];
        }
      } else {
        gpu_weight gw = checked(data, bytes, t.rows, t.cols);
        gw.offset = packed_bytes;
        packed_bytes += bytes;
        if (data) packed.insert(packed.end(), buf.begin(), buf.end());
        for (std::size_t g = 0; g < N; ++g) w[g].back().push_back(gw);
      }
    }
    if (mode == node_mode::swap_and_shard) {
      swap_layer_bytes.push_back(packed_bytes);
      swap_layers.push_back(std::move(packed));
    }
  }
  return w;
}

/// What the GPU threads of one run share: the run's inputs, each GPU's outputs (slot g written by
/// GPU g's thread only) and the first failure.
struct gpu_threads {
  gpu_threads(const bench_config& c, node_mode m, const node_options& opt, node& n, collectives& cl,
              swap_shard* s, const std::vector<std::unique_ptr<device>>& d,
              const std::vector<std::vector<std::vector<gpu_weight>>>& weights, bool only, bool sq,
              std::pair<long, long> f, std::size_t gpus)
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
  const std::vector<std::vector<std::vector<gpu_weight>>>& w;  // [gpu][layer][tensor]
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
  void fail_run(std::size_t g, const char* why) noexcept {
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
};

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

/// Device memory freed at scope exit (after the streams using it were drained).
struct device_buffer {
  device& dev;
  std::size_t bytes;
  void* ptr;
  device_buffer(device& d, std::size_t n)
      : dev(d), bytes(n), ptr(d.allocate(memory_kind::device, n)) {}
  ~device_buffer() { dev.deallocate(memory_kind::device, ptr, bytes); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

/// GPU g's thread, as an engine drives a node: its compute, stream and activations, its steps.
/// An error is kept in r.err[g] (the first GPU to fail in r.first_failed) and fails the run.
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

/// The run's result from the GPUs' outputs: per-step times (the slowest GPU), rates, metrics.
node_result results_of(gpu_threads& run, int resident_layers, std::size_t per_sync) {
  const bench_config& cfg = run.cfg;
  const node_options& o = run.o;
  const node_mode mode = run.mode;
  const bool squeeze = run.squeeze, timing_only = run.timing_only;
  const std::size_t N = run.devs.size();
  const int total = run.total;
  auto& step_ms = run.step_ms;
  auto& stall = run.stall;
  auto& fault_page_ms = run.fault_page_ms;
  auto& faults_ms = run.faults_ms;
  auto& coll_time = run.coll_time;
  node& nd = run.nd;
  swap_shard* ss = run.ss;
  node_result r;
  r.mode = squeeze ? std::string(to_string(mode)) + ", HBM short" : std::string(to_string(mode));
  r.gpus = N;
  if (squeeze) {
    r.squeeze_leave_bytes = *std::max_element(run.left.begin(), run.left.end());
    r.squeeze_block_bytes = *std::min_element(run.squeezed.begin(), run.squeezed.end());
    for (std::uint64_t d : run.degraded)
      r.degraded_per_step +=
          static_cast<double>(d) / static_cast<double>(N * static_cast<std::size_t>(cfg.steps));
  }
  // Time dilation undone: measured times shrink by the scale, rates per unit time grow by it.
  const double ts = o.kind == backend::sim ? o.time_scale : 1.0;
  r.time_scale = ts;
  for (std::size_t g = 0; g < N; ++g) {
    for (double& x : step_ms[g]) x /= ts;
    stall[g] /= ts;
    fault_page_ms[g] /= ts;
    faults_ms[g] *= ts;
    for (double& x : coll_time[g].ms) x /= ts;
  }
  for (int s = cfg.warmup_steps; s < total; ++s) {
    double worst = 0;
    for (std::size_t g = 0; g < N; ++g)
      worst = std::max(worst, step_ms[g][static_cast<std::size_t>(s)]);
    r.step_ms.push_back(worst);
  }
  r.step = summarize(r.step_ms);
  r.meets_budget = r.step.p99 <= static_cast<double>(cfg.latency_budget.count());
  double bytes = 0, st = 0, coll_ms = 0, coll_n = 0;
  for (std::size_t g = 0; g < N; ++g) {
    bytes += run.paged[g];
    st += stall[g];
    r.mismatches += run.bad[g];
    for (double x : coll_time[g].ms) coll_ms += x;
    coll_n += static_cast<double>(coll_time[g].ms.size());
  }
  r.bytes_per_step_per_gpu = bytes / static_cast<double>(N);
  r.timing_only = timing_only;
  r.resident_layers = resident_layers;
  for (std::size_t g = 0; g < N; ++g) {
    r.fault_ms_per_64mib_page += fault_page_ms[g] / static_cast<double>(N);
    r.faults_per_ms += faults_ms[g] / static_cast<double>(N);
    r.hbm_peak_pct = std::max(r.hbm_peak_pct, run.hbm_peak[g]);
  }
  r.stall_ms_per_step = st / static_cast<double>(N);
  r.collective_ms_per_layer =
      mode == node_mode::tensor_parallel ? (coll_n > 0 ? coll_ms / coll_n : 0)
      : mode == node_mode::swap_and_shard
          ? r.stall_ms_per_step / static_cast<double>(std::max(1, cfg.layers))
          : 0;
  if (ss) {
    const swap_shard_metrics sm = ss->metrics();
    r.layers_per_sync = per_sync;
    r.barriers_per_layer = sm.layers_acquired > 0 ? static_cast<double>(sm.compute_waits) /
                                                        static_cast<double>(sm.layers_acquired)
                                                  : 0;
    r.layer_source = sm.layers_from_host > 0 ? "host" : "peers";
    r.interconnect_gbps = static_cast<double>(sm.interconnect_bytes_per_second) / 1e9;
    r.interconnect_measured = sm.interconnect_measured;
  }
  const double secs = std::chrono::duration<double>(run.timed_end - run.timed_begin).count();
  const double host_rate =
      secs > 0 ? bytes * static_cast<double>(cfg.steps) / secs : 0;  // dilated, B/s
  r.host_gbps = host_rate * ts / 1e9;
  const node_metrics m = nd.metrics();
  if (!m.links.empty() && m.links[0].h2d_rate_bytes_per_second > 0 && secs > 0) {
    r.shared_link_use = host_rate / static_cast<double>(m.links[0].h2d_rate_bytes_per_second);
  }
  r.host_tier_bytes = m.host_used_bytes;
  r.host_budget_bytes = m.host_capacity_bytes;
  if (cfg.link_peak_bytes_per_second > 0) {
    r.link_use_pct = 100.0 * host_rate / static_cast<double>(N) /
                     static_cast<double>(cfg.link_peak_bytes_per_second);
  }
  return r;
}

/// How one mode lays the model out before anything is made: the layers kept resident, which
/// layers are paged, swap-and-shard's layers per synchronisation and the host tier it needs.
struct node_plan {
  int resident_layers = 0;
  std::vector<bool> paged_layer;
  std::size_t per_sync = 0;   // swap-and-shard: layers per synchronisation
  std::size_t host_need = 0;  // host tier bytes the paged weights need
  std::string skip;           // non-empty: the mode cannot run, and why
};

/// The plan of `mode` for cfg and o: resident layers (tensor-parallel --resident), swap-and-shard's
/// staging (two buffers of two layers, or of one when HBM is too short for that) and the host tier;
/// plan.skip says why the mode cannot run when it cannot.
node_plan plan_node_run(const bench_config& cfg, node_mode mode, const node_options& o) {
  const std::size_t N = o.gpus;
  const auto shapes = layer_tensors(cfg.model);
  const std::size_t elem = bytes_per_element(cfg.type);
  std::uint64_t layer_bytes = 0;
  for (const auto& t : shapes) layer_bytes += t.rows * t.cols * elem;
  node_plan plan;
  // Tensor-parallel --resident: whole layers' shards stay in HBM, next to a window of three
  // paged layers (the one computing and two prefetched) and slack for rounding; the paged layers
  // spread evenly among them (shared/htp_layout.hpp, which the planner's htp model shares).
  plan.resident_layers =
      mode == node_mode::tensor_parallel && o.resident
          ? bench::resident_layers(cfg.hbm_budget_bytes, layer_bytes / N, shapes.size(),
                                   cfg.page_bytes, cfg.slab_bytes, cfg.layers)
          : 0;
  plan.paged_layer = paged_layers(cfg.layers, plan.resident_layers);
  const std::size_t paged_bytes = static_cast<std::size_t>(layer_bytes) *
                                  static_cast<std::size_t>(cfg.layers - plan.resident_layers);

  // Swap-and-shard's staging: two buffers of two layers (one synchronisation per two layers), or of
  // one layer when HBM is too short for that, next to one shard being paged in.
  if (mode == node_mode::swap_and_shard) {
    const std::size_t lb = static_cast<std::size_t>(layer_bytes);
    const auto need = [&](std::size_t k) { return 2 * k * lb + lb / N + 2 * cfg.slab_bytes; };
    for (std::size_t k : {std::size_t{2}, std::size_t{1}}) {
      if (cfg.hbm_budget_bytes >= need(k)) {
        plan.per_sync = k;
        break;
      }
    }
    if (plan.per_sync == 0) {
      plan.skip = "needs " + std::to_string(need(1) >> 20) +
                  " MiB of HBM per GPU (two staging layers, a shard and two slabs), has " +
                  std::to_string(cfg.hbm_budget_bytes >> 20) + " MiB";
      return plan;
    }
  }
  // The weights once (swap-and-shard's staging buffers are HBM only), plus room for padding.
  // Compressed tensor-parallel shards take their wire bytes (modelled ratio; at most the bytes).
  const double ratio = cfg.compress && mode == node_mode::tensor_parallel
                           ? std::min(1.0, cfg.modelled_compression_ratio + 0.01)
                           : 1.0;
  plan.host_need = (static_cast<std::size_t>(static_cast<double>(paged_bytes) * ratio) +
                    N * (std::size_t{256} << 20)) /
                       cfg.slab_bytes * cfg.slab_bytes +
                   4 * cfg.slab_bytes;
  if (o.host_budget_bytes > 0 && plan.host_need > o.host_budget_bytes) {
    plan.skip = "its host copies need " + std::to_string(plan.host_need / 1000000000) +
                " GB of host tier, more than the " +
                std::to_string(o.host_budget_bytes / 1000000000) + " GB given" +
                (mode == node_mode::tensor_parallel && !o.resident ? " (try --resident)" : "");
  }
  return plan;
}

/// The node's configuration: the host tier (given, or what the plan needs), each GPU's pager with
/// cfg's budget, sizes and link, two layers of lookahead, degraded service when HBM is squeezed,
/// and the shared upstream link when asked for.
node_config node_config_of(const bench_config& cfg, const node_options& o, const node_plan& plan,
                           bool squeeze) {
  const std::size_t N = o.gpus;
  node_config nc;
  nc.host_budget_bytes = o.host_budget_bytes > 0
                             ? o.host_budget_bytes / cfg.slab_bytes * cfg.slab_bytes
                             : plan.host_need;
  nc.host_slab_bytes = cfg.slab_bytes;
  nc.host_page_bytes = cfg.page_bytes;
  nc.gpu.hbm_budget_bytes = cfg.hbm_budget_bytes;
  nc.gpu.slab_bytes = cfg.slab_bytes;
  nc.gpu.page_bytes = cfg.page_bytes;
  nc.gpu.chunk_bytes = cfg.chunk_bytes;
  nc.gpu.modelled_compression_ratio = cfg.modelled_compression_ratio;
  nc.gpu.h2d.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  nc.gpu.d2h.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  // Two layers ahead (a layer is several tensors, some tiny: a count of 2 would cover a bias and a
  // norm).
  nc.gpu.prefetch_lookahead = static_cast<unsigned>(2 * layer_tensors(cfg.model).size());
  if (cfg.rate_bytes_per_second) nc.gpu.h2d.rate_bytes_per_second = *cfg.rate_bytes_per_second;
  if (squeeze) nc.gpu.on_oom = oom_policy::allow_degraded;
  if (o.shared_link_gbps > 0) {
    node_link_group grp;
    grp.name = "shared-h2d";
    for (std::size_t g = 0; g < N; ++g) grp.gpus.push_back(g);
    grp.h2d_bytes_per_second = static_cast<std::uint64_t>(o.shared_link_gbps * 1e9);
    nc.shared_links = {grp};
  }
  return nc;
}

/// The modelled interconnect per GPU, GB/s: as given, else 450/55 of the link (NVLink 4 over PCIe).
double interconnect_gbps_of(const node_options& o) {
  return o.interconnect_gbps > 0 ? o.interconnect_gbps : o.sim_link_gbps * 450.0 / 55.0;
}

/// The node's collectives: sim's at the modelled interconnect; on cuda NCCL's, or one-rank copies
/// for a single GPU without NCCL.
std::unique_ptr<collectives> make_node_collectives(const node_options& o,
                                                   const std::vector<device*>& ptrs) {
  if (o.kind == backend::sim)
    return make_sim_collectives(ptrs, static_cast<std::uint64_t>(interconnect_gbps_of(o) * 1e9));
  if (ptrs.size() == 1 && !nccl_available()) return make_one_rank_collectives(*ptrs[0]);
  return make_nccl_collectives(ptrs);
}

/// How the GPUs find their weights. Swap-and-shard: the swap_shard over the packed layers (which it
/// copies), returned. Otherwise each GPU's schedule: its paged tensors only, in layer order
/// (device-resident ones are always hits, and left in the schedule they would use up the
/// lookahead, so the next paged layer would load only when reached); returns null.
std::unique_ptr<swap_shard> arrange_weights(
    node_mode mode, const node_options& o, const node_plan& plan, node& nd, collectives& coll,
    const std::vector<std::vector<std::vector<gpu_weight>>>& w,
    const std::vector<std::size_t>& swap_layer_bytes,
    const std::vector<std::vector<unsigned char>>& swap_layers) {
  if (mode == node_mode::swap_and_shard) {
    std::vector<const void*> src;
    for (const auto& v : swap_layers) src.push_back(v.empty() ? nullptr : v.data());
    swap_shard_config sc;
    // sim: the modelled interconnect; cuda: measured by swap_shard's probe all-gather.
    sc.interconnect_bytes_per_second =
        o.kind == backend::sim ? static_cast<std::uint64_t>(interconnect_gbps_of(o) * 1e9) : 0;
    sc.layers_per_sync = plan.per_sync;
    return std::make_unique<swap_shard>(nd, coll, swap_layer_bytes, src, sc);
  }
  for (std::size_t g = 0; g < w.size(); ++g) {
    std::vector<tensor_handle> order;
    for (std::size_t l = 0; l < w[g].size(); ++l) {
      if (!plan.paged_layer[l]) continue;
      for (const auto& gw : w[g][l]) order.push_back(gw.h);
    }
    nd.gpu(g).set_schedule(order, /*cyclic=*/true);
  }
  return nullptr;
}

}  // namespace

node_result run_node_mode(const bench_config& cfg, node_mode mode, const node_options& o) {
  HTP_EXPECTS(o.gpus >= 1, invalid_argument, "--gpus ", o.gpus, ": at least one GPU");
  const std::size_t N = o.gpus;
  const bool timing_only = o.timing_only && o.kind == backend::sim;
  const node_plan plan = plan_node_run(cfg, mode, o);
  if (!plan.skip.empty()) {
    node_result r;
    r.mode = to_string(mode);
    r.gpus = N;
    r.skipped = true;
    r.skip_reason = plan.skip;
    return r;
  }
  // N devices, each with the single-GPU run's modelled link (sim) or the first N GPUs (cuda); one
  // node over them.
  std::vector<std::unique_ptr<device>> devs = make_devices(cfg, o, timing_only);
  std::vector<device*> ptrs;
  for (const auto& d : devs) ptrs.push_back(d.get());
  const bool squeeze = o.squeeze_leave_bytes > 0 && mode == node_mode::tensor_parallel;
  node nd(ptrs, node_config_of(cfg, o, plan, squeeze));
  std::unique_ptr<collectives> coll = make_node_collectives(o, ptrs);

  // The weights, with the single-GPU run's patterns (same seeds), so the bytes checked are the
  // bytes the single-GPU policies read.
  std::vector<std::size_t> swap_layer_bytes;
  std::vector<std::vector<unsigned char>> swap_layers;
  const auto w =
      register_weights(cfg, mode, nd, timing_only, plan.paged_layer, swap_layer_bytes, swap_layers);
  std::unique_ptr<swap_shard> ss =
      arrange_weights(mode, o, plan, nd, *coll, w, swap_layer_bytes, swap_layers);
  swap_layers.clear();

  // One thread per GPU, as an engine drives a node; each step's time is its slowest GPU's.
  gpu_threads run{
      cfg, mode, o, nd, *coll, ss.get(), devs, w, timing_only, squeeze, injected_failure(o), N};
  std::vector<std::thread> threads;
  for (std::size_t g = 0; g < N; ++g) threads.emplace_back([&run, g] { run_gpu(run, g); });
  for (auto& t : threads) t.join();
  if (run.first_failed < N)
    std::rethrow_exception(run.err[run.first_failed]);  // the cause, not its echoes

  node_result r = results_of(run, plan.resident_layers, plan.per_sync);
  ss.reset();  // before the node: its slots and layers live in the node
  return r;
}

}  // namespace htp::bench
