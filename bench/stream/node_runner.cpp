// htp-stream-bench --gpus N. See node_runner.hpp.
#include "node_runner.hpp"

#include "model/htp_layout.hpp"

#include <htp/checksum.hpp>
#include <htp/collectives.hpp>
#include <htp/detail/check.hpp>
#include <htp/node.hpp>
#include <htp/sim_device.hpp>
#include <htp/swap_shard.hpp>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <condition_variable>
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
gpu_weight checked(const unsigned char* data, std::size_t bytes, std::uint64_t rows, std::uint64_t cols) {
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
    d.launch_host_func([this] {
      const double x = std::chrono::duration<double, std::milli>(clock_type::now() - begin).count();
      std::lock_guard lock(mu);
      ms.push_back(x);
    }, s);
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
class one_time_barrier {
 public:
  explicit one_time_barrier(std::size_t n) : left_(n) {}
  void arrive_and_wait() {
    std::unique_lock lock(mu_);
    if (--left_ == 0) {
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return left_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t left_;
};

}  // namespace

node_result run_node_mode(const bench_config& cfg, node_mode mode, const node_options& o) {
  HTP_EXPECTS(o.gpus >= 1, invalid_argument, "--gpus ", o.gpus, ": at least one GPU");
  const std::size_t N = o.gpus;
  const auto shapes = layer_tensors(cfg.model);
  const std::size_t elem = bytes_per_element(cfg.type);
  std::uint64_t layer_bytes = 0;
  for (const auto& t : shapes) layer_bytes += t.rows * t.cols * elem;
  const bool timing_only = o.timing_only && o.kind == backend::sim;
  const auto skipped = [&](std::string why) {
    node_result r;
    r.mode = to_string(mode);
    r.gpus = N;
    r.skipped = true;
    r.skip_reason = std::move(why);
    return r;
  };
  // Tensor-parallel --resident: whole layers' shards stay in HBM, next to a window of three
  // paged layers (the one computing and two prefetched) and slack for rounding; the paged layers
  // spread evenly among them (model/htp_layout.hpp, which the planner's htp model shares).
  const int resident_layers = mode == node_mode::tensor_parallel && o.resident
                                  ? bench::resident_layers(cfg.hbm_budget_bytes, layer_bytes / N, shapes.size(),
                                                           cfg.page_bytes, cfg.slab_bytes, cfg.layers)
                                  : 0;
  const std::vector<bool> paged_layer = paged_layers(cfg.layers, resident_layers);
  const std::size_t paged_bytes =
      static_cast<std::size_t>(layer_bytes) * static_cast<std::size_t>(cfg.layers - resident_layers);

  // Swap-and-shard's staging: two buffers of two layers (one synchronisation per two layers), or of
  // one layer when HBM is too short for that, next to one shard being paged in.
  std::size_t per_sync = 0;
  if (mode == node_mode::swap_and_shard) {
    const std::size_t lb = static_cast<std::size_t>(layer_bytes);
    const auto need = [&](std::size_t k) { return 2 * k * lb + lb / N + 2 * cfg.slab_bytes; };
    for (std::size_t k : {std::size_t{2}, std::size_t{1}}) {
      if (cfg.hbm_budget_bytes >= need(k)) {
        per_sync = k;
        break;
      }
    }
    if (per_sync == 0) {
      return skipped("needs " + std::to_string(need(1) >> 20) +
                     " MiB of HBM per GPU (two staging layers, a shard and two slabs), has " +
                     std::to_string(cfg.hbm_budget_bytes >> 20) + " MiB");
    }
  }
  // N devices, each with the single-GPU run's modelled link (sim) or the first N GPUs (cuda); one
  // node over them.
  // The weights once (swap-and-shard's staging buffers are HBM only), plus room for padding.
  const std::size_t host_need = (paged_bytes + N * (std::size_t{256} << 20)) / cfg.slab_bytes * cfg.slab_bytes +
                                4 * cfg.slab_bytes;
  if (o.host_budget_bytes > 0 && host_need > o.host_budget_bytes) {
    return skipped("its host copies need " + std::to_string(host_need / 1000000000) + " GB of host tier, more than the " +
                   std::to_string(o.host_budget_bytes / 1000000000) + " GB given" +
                   (mode == node_mode::tensor_parallel && !o.resident ? " (try --resident)" : ""));
  }
  std::vector<std::unique_ptr<device>> devs;
  std::vector<device*> ptrs;
  if (o.kind == backend::cuda) {
    const int visible = cuda_device_count();
    HTP_EXPECTS(N <= static_cast<std::size_t>(visible), invalid_argument, "--gpus ", N, ": ", visible,
                " CUDA GPU(s) visible; give at most ", visible, " (or run the node on sim with --backend sim)");
    for (std::size_t g = 0; g < N; ++g) {
      devs.push_back(make_device(backend::cuda, static_cast<int>(g)));
      ptrs.push_back(devs.back().get());
    }
  } else {
    for (std::size_t g = 0; g < N; ++g) {
      sim_config sc;
      sc.device_memory_bytes = cfg.hbm_budget_bytes + (std::size_t{1} << 30);
      sc.pinned_memory_bytes = 0;
      sc.h2d_bytes_per_second = static_cast<std::uint64_t>(o.sim_link_gbps * 1e9);
      sc.d2h_bytes_per_second = sc.h2d_bytes_per_second;
      sc.copy_latency_ns = static_cast<std::uint64_t>(o.sim_latency_us * 1e3);
      sc.poison_byte = -1;
      sc.timing_only = timing_only;
      sc.ordinal = static_cast<int>(g);
      devs.push_back(make_sim_device(sc));
      ptrs.push_back(devs.back().get());
    }
  }
  const bool squeeze = o.squeeze_leave_bytes > 0 && mode == node_mode::tensor_parallel;
  node_config nc;
  nc.host_budget_bytes = o.host_budget_bytes > 0 ? o.host_budget_bytes / cfg.slab_bytes * cfg.slab_bytes : host_need;
  nc.host_slab_bytes = cfg.slab_bytes;
  nc.host_page_bytes = cfg.page_bytes;
  nc.gpu.hbm_budget_bytes = cfg.hbm_budget_bytes;
  nc.gpu.slab_bytes = cfg.slab_bytes;
  nc.gpu.page_bytes = cfg.page_bytes;
  nc.gpu.chunk_bytes = cfg.chunk_bytes;
  nc.gpu.h2d.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  nc.gpu.d2h.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  // Two layers ahead (a layer is several tensors, some tiny: a count of 2 would cover a bias and a norm).
  nc.gpu.prefetch_lookahead = static_cast<unsigned>(2 * shapes.size());
  if (cfg.rate_bytes_per_second) nc.gpu.h2d.rate_bytes_per_second = *cfg.rate_bytes_per_second;
  if (squeeze) nc.gpu.on_oom = oom_policy::allow_degraded;
  if (o.shared_link_gbps > 0) {
    node_link_group grp;
    grp.name = "shared-h2d";
    for (std::size_t g = 0; g < N; ++g) grp.gpus.push_back(g);
    grp.h2d_bytes_per_second = static_cast<std::uint64_t>(o.shared_link_gbps * 1e9);
    nc.shared_links = {grp};
  }
  node nd(ptrs, nc);
  const double ic_gbps = o.interconnect_gbps > 0 ? o.interconnect_gbps : o.sim_link_gbps * 450.0 / 55.0;
  std::unique_ptr<collectives> coll;
  if (o.kind == backend::sim) {
    coll = make_sim_collectives(ptrs, static_cast<std::uint64_t>(ic_gbps * 1e9));
  } else if (N == 1 && !nccl_available()) {
    coll = make_one_rank_collectives(*ptrs[0]);
  } else {
    coll = make_nccl_collectives(ptrs);
  }

  // The weights, with the single-GPU run's patterns (same seeds), so the bytes checked are the
  // bytes the single-GPU policies read.
  std::vector<std::vector<std::vector<gpu_weight>>> w(N);  // [gpu][layer][tensor]
  std::unique_ptr<swap_shard> ss;
  std::vector<unsigned char> buf;
  std::vector<std::size_t> swap_layer_bytes;
  std::vector<std::vector<unsigned char>> swap_layers;
  for (int l = 0; l < cfg.layers; ++l) {
    for (std::size_t g = 0; g < N; ++g) w[g].emplace_back();
    std::vector<unsigned char> packed;
    std::size_t packed_bytes = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const auto& t = shapes[i];
      const std::size_t bytes = t.rows * t.cols * elem;
      if (!timing_only) {  // timing-only: no bytes, no patterns (nothing is verified)
        buf.resize(bytes);
        fill_pattern(buf.data(), bytes, cfg.seed * 1'000'003 + static_cast<std::uint64_t>(l) * 4096 + i);
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
        if (!keep) nt = nd.register_sharded(name, sb, tensor_kind::weight, data ? src : std::vector<const void*>{});
        at = 0;
        for (std::size_t g = 0; g < N; ++g) {
          gpu_weight gw = checked(data ? data + at : nullptr, sb[g], t.rows, std::max<std::uint64_t>(1, t.cols / N));
          gw.h = keep ? nd.gpu(g).register_resident(name, sb[g], tensor_kind::weight, src[g]) : nd.on(nt, g);
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
  if (mode == node_mode::swap_and_shard) {
    std::vector<const void*> src;
    for (const auto& v : swap_layers) src.push_back(v.empty() ? nullptr : v.data());
    swap_shard_config sc;
    // sim: the modelled interconnect; cuda: measured by swap_shard's probe all-gather.
    sc.interconnect_bytes_per_second = o.kind == backend::sim ? static_cast<std::uint64_t>(ic_gbps * 1e9) : 0;
    sc.layers_per_sync = per_sync;
    ss = std::make_unique<swap_shard>(nd, *coll, swap_layer_bytes, src, sc);
    swap_layers.clear();
  } else {
    for (std::size_t g = 0; g < N; ++g) {
      // The paged tensors only: device-resident ones are always hits, and left in the schedule
      // they would use up the lookahead, so the next paged layer would load only when reached.
      std::vector<tensor_handle> order;
      for (std::size_t l = 0; l < w[g].size(); ++l) {
        if (!paged_layer[l]) continue;
        for (const auto& gw : w[g][l]) order.push_back(gw.h);
      }
      nd.gpu(g).set_schedule(order, /*cyclic=*/true);
    }
  }

  // One thread per GPU, as an engine drives a node; each step's time is its slowest GPU's.
  const int total = cfg.warmup_steps + cfg.steps;
  const std::size_t act_bytes = static_cast<std::size_t>(cfg.tokens) * static_cast<std::size_t>(cfg.model.hidden) * 2;
  std::vector<std::vector<double>> step_ms(N, std::vector<double>(static_cast<std::size_t>(total), 0));
  std::vector<double> stall(N, 0), paged(N, 0), fault_page_ms(N, 0), faults_ms(N, 0), hbm_peak(N, 0);
  std::vector<std::uint64_t> bad(N, 0), degraded(N, 0);
  std::vector<std::size_t> squeezed(N, 0), left(N, 0);
  one_time_barrier squeeze_sync(N);
  std::vector<stamps> coll_time(N);
  std::vector<std::exception_ptr> err(N);
  clock_type::time_point timed_begin{}, timed_end{};
  std::mutex time_mu;
  std::vector<std::thread> threads;
  for (std::size_t g = 0; g < N; ++g) {
    threads.emplace_back([&, g] {
      try {
        device& dev = *devs[g];
        pager& p = nd.gpu(g);
        std::unique_ptr<layer_compute> compute;
        if (o.kind == backend::cuda) {
          compute = make_cuda_compute(dev, cfg.type, cfg.tokens, cfg.model);
        } else {
          compute = make_sim_compute(dev, "modelled", o.compute_gbps, o.sim_link_gbps);
        }
        stream cs(dev);
        void* act = dev.allocate(memory_kind::device, std::max<std::size_t>(act_bytes, 256));
        tensor_handle squeeze_block;
        for (int step = 0; step < total; ++step) {
          if (step == cfg.warmup_steps && squeeze) {
            // HBM forced short: a device-resident block takes all but squeeze_leave_bytes of what
            // the resident layers left (it evicts paged tensors as a fault would). The largest
            // block that fits is found by bisection (register_resident refuses what does not fit),
            // so rounding and bins are the pager's own.
            const std::size_t room = largest_block(p, cfg.hbm_budget_bytes);
            const std::size_t block = room > o.squeeze_leave_bytes ? room - o.squeeze_leave_bytes : 0;
            if (block > 0) squeeze_block = p.register_resident("hbm-pressure", block, tensor_kind::mutable_state);
            squeezed[g] = block;
            left[g] = largest_block(p, cfg.hbm_budget_bytes);  // measured: what paged tensors get
            // Every GPU squeezed before any times a step (a step is its slowest GPU's).
            squeeze_sync.arrive_and_wait();
          }
          if (step == cfg.warmup_steps) {
            compute->take_stall_ms();
            compute->take_mismatches();
            p.reset_metrics();  // page-ins, fault waits, occupancy and rates of the timed steps only
            std::lock_guard lock(time_mu);
            if (timed_begin == clock_type::time_point{}) timed_begin = clock_type::now();
          }
          const auto t0 = clock_type::now();
          for (std::size_t l = 0; l < w[g].size(); ++l) {
            if (ss) {
              compute->begin_stall(cs);
              const device_span layer = ss->acquire(g, l, cs);
              compute->end_stall(cs);
              std::vector<weight_view> views;
              for (const auto& gw : w[g][l]) {
                const device_span sp{static_cast<char*>(layer.data) + gw.offset, gw.bytes, false};
                views.push_back({sp, gw.rows, gw.cols, gw.sum, gw.head, gw.tail, !timing_only});
              }
              compute->run_layer(views, cfg.tokens, cs);
              ss->release(g, l, cs);
            } else {
              for (const auto& gw : w[g][l]) {
                compute->begin_stall(cs);
                const device_span sp = p.acquire(gw.h, cs);
                compute->end_stall(cs);
                compute->run_layer({{sp, gw.rows, gw.cols, gw.sum, gw.head, gw.tail, !timing_only}}, cfg.tokens, cs);
                p.release(gw.h, cs);
              }
              if (mode == node_mode::tensor_parallel && N > 1) {
                // The layer's partial activations summed over the GPUs, as tensor parallelism does.
                if (step >= cfg.warmup_steps) coll_time[g].mark_begin(dev, cs);
                coll->all_reduce_sum(g, act, act, act_bytes / 2, element_type::bfloat16, cs);
                if (step >= cfg.warmup_steps) coll_time[g].mark_end(dev, cs);
              }
            }
          }
          cs.synchronize();
          step_ms[g][static_cast<std::size_t>(step)] =
              std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
        }
        stall[g] = compute->take_stall_ms() / static_cast<double>(cfg.steps);
        const pager_metrics pm = p.metrics();  // of the timed steps (reset after the warm-up)
        fault_page_ms[g] = pm.fault_wait.ms_per_64mib_page;
        faults_ms[g] = pm.elapsed_ms > 0 ? static_cast<double>(pm.faults + pm.late_prefetches) / pm.elapsed_ms : 0;
        hbm_peak[g] = pm.hbm.peak_pct;
        paged[g] = static_cast<double>(pm.page_in_bytes) / static_cast<double>(cfg.steps);
        degraded[g] = pm.degraded_acquires;
        bad[g] = compute->take_mismatches();
        dev.deallocate(memory_kind::device, act, std::max<std::size_t>(act_bytes, 256));
        std::lock_guard lock(time_mu);
        timed_end = std::max(timed_end, clock_type::now());
      } catch (...) {
        err[g] = std::current_exception();
        try {
          std::rethrow_exception(err[g]);
        } catch (const std::exception& e) {  // said now: the other GPUs may wait for this one
          std::fprintf(stderr, "htp-stream-bench: GPU %zu failed: %s\n", g, e.what());
        } catch (...) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : err) {
    if (e) std::rethrow_exception(e);
  }

  node_result r;
  r.mode = squeeze ? std::string(to_string(mode)) + ", HBM short" : std::string(to_string(mode));
  r.gpus = N;
  if (squeeze) {
    r.squeeze_leave_bytes = *std::max_element(left.begin(), left.end());
    r.squeeze_block_bytes = *std::min_element(squeezed.begin(), squeezed.end());
    for (std::uint64_t d : degraded) r.degraded_per_step += static_cast<double>(d) / static_cast<double>(N * static_cast<std::size_t>(cfg.steps));
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
    for (std::size_t g = 0; g < N; ++g) worst = std::max(worst, step_ms[g][static_cast<std::size_t>(s)]);
    r.step_ms.push_back(worst);
  }
  r.step = summarize(r.step_ms);
  r.meets_budget = r.step.p99 <= static_cast<double>(cfg.latency_budget.count());
  double bytes = 0, st = 0, coll_ms = 0, coll_n = 0;
  for (std::size_t g = 0; g < N; ++g) {
    bytes += paged[g];
    st += stall[g];
    r.mismatches += bad[g];
    for (double x : coll_time[g].ms) coll_ms += x;
    coll_n += static_cast<double>(coll_time[g].ms.size());
  }
  r.bytes_per_step_per_gpu = bytes / static_cast<double>(N);
  r.timing_only = timing_only;
  r.resident_layers = resident_layers;
  for (std::size_t g = 0; g < N; ++g) {
    r.fault_ms_per_64mib_page += fault_page_ms[g] / static_cast<double>(N);
    r.faults_per_ms += faults_ms[g] / static_cast<double>(N);
    r.hbm_peak_pct = std::max(r.hbm_peak_pct, hbm_peak[g]);
  }
  r.stall_ms_per_step = st / static_cast<double>(N);
  r.collective_ms_per_layer = mode == node_mode::tensor_parallel ? (coll_n > 0 ? coll_ms / coll_n : 0)
                              : mode == node_mode::swap_and_shard
                                  ? r.stall_ms_per_step / static_cast<double>(std::max(1, cfg.layers))
                                  : 0;
  if (ss) {
    const swap_shard_metrics sm = ss->metrics();
    r.layers_per_sync = per_sync;
    r.barriers_per_layer = sm.layers_acquired > 0 ? static_cast<double>(sm.compute_waits) / static_cast<double>(sm.layers_acquired) : 0;
    r.layer_source = sm.layers_from_host > 0 ? "host" : "peers";
    r.interconnect_gbps = static_cast<double>(sm.interconnect_bytes_per_second) / 1e9;
    r.interconnect_measured = sm.interconnect_measured;
  }
  const double secs = std::chrono::duration<double>(timed_end - timed_begin).count();
  const double host_rate = secs > 0 ? bytes * static_cast<double>(cfg.steps) / secs : 0;  // dilated, B/s
  r.host_gbps = host_rate * ts / 1e9;
  const node_metrics m = nd.metrics();
  if (!m.links.empty() && m.links[0].h2d_rate_bytes_per_second > 0 && secs > 0) {
    r.shared_link_use = host_rate / static_cast<double>(m.links[0].h2d_rate_bytes_per_second);
  }
  r.host_tier_bytes = m.host_used_bytes;
  r.host_budget_bytes = m.host_capacity_bytes;
  if (cfg.link_peak_bytes_per_second > 0) {
    r.link_use_pct = 100.0 * host_rate / static_cast<double>(N) / static_cast<double>(cfg.link_peak_bytes_per_second);
  }
  ss.reset();  // before the node: its slots and layers live in the node
  return r;
}

}  // namespace htp::bench
