// Swap-and-shard on N sim devices: every GPU sees every layer's exact bytes, step after step, from
// peers (all-gather of the shards) or from host RAM, with the staging buffers double-buffered, one
// synchronisation per group of layers, and the calls checked for order.
#include "deadline.hpp"

#include <htp/checksum.hpp>
#include <htp/collectives.hpp>
#include <htp/error.hpp>
#include <htp/node.hpp>
#include <htp/sim_device.hpp>
#include <htp/swap_shard.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <thread>
#include <utility>
#include <vector>

namespace htp::test {
namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

struct rig {
  std::vector<std::unique_ptr<device>> devs;
  std::vector<device*> ptrs;
  std::unique_ptr<node> n;
  std::unique_ptr<collectives> coll;
  rig(std::size_t gpus, std::size_t hbm) {
    for (std::size_t g = 0; g < gpus; ++g) {
      sim_config s;
      s.device_memory_bytes = 32 * MiB;
      s.ordinal = static_cast<int>(g);
      devs.push_back(make_sim_device(s));
      ptrs.push_back(devs.back().get());
    }
    node_config c;
    c.host_budget_bytes = 16 * MiB;
    c.host_slab_bytes = MiB;
    c.gpu.hbm_budget_bytes = hbm;
    c.gpu.slab_bytes = MiB;
    c.gpu.chunk_bytes = 128 * KiB;
    c.gpu.h2d.link_bytes_per_second = 4'000'000'000;  // skip calibration
    c.gpu.d2h.link_bytes_per_second = 4'000'000'000;
    n = std::make_unique<node>(ptrs, c);
    coll = make_sim_collectives(ptrs);
  }
};

std::vector<std::vector<unsigned char>> make_layers(std::size_t count, std::size_t bytes) {
  std::vector<std::vector<unsigned char>> v(count);
  for (std::size_t l = 0; l < count; ++l) {
    v[l].resize(bytes - 1000 * l);  // unequal sizes: shards are padded to the largest
    for (std::size_t i = 0; i < v[l].size(); ++i)
      v[l][i] = static_cast<unsigned char>((i * 7 + l * 131) >> 2);
  }
  return v;
}

/// The layers' sizes and byte pointers, as swap_shard takes them.
std::pair<std::vector<std::size_t>, std::vector<const void*>> sizes_and_sources(
    const std::vector<std::vector<unsigned char>>& layers) {
  std::pair<std::vector<std::size_t>, std::vector<const void*>> out;
  for (const auto& l : layers) {
    out.first.push_back(l.size());
    out.second.push_back(l.data());
  }
  return out;
}

/// Runs `steps` passes over the layers on every GPU (one thread per GPU) and checks each layer's
/// bytes as the GPU's compute stream sees them.
void run_steps(rig& r, swap_shard& ss, const std::vector<std::vector<unsigned char>>& layers,
               int steps) {
  std::vector<std::thread> ts;
  std::vector<int> bad(r.devs.size(), 0);
  for (std::size_t g = 0; g < r.devs.size(); ++g) {
    ts.emplace_back([&, g] {
      stream compute(*r.devs[g]);
      for (int step = 0; step < steps; ++step) {
        for (std::size_t l = 0; l < layers.size(); ++l) {
          const device_span sp = ss.acquire(g, l, compute);
          std::uint64_t sum = 0;
          r.devs[g]->checksum_async(sp.data, sp.bytes, &sum,
                                    compute);  // "the kernel" reads the layer
          compute.synchronize();
          if (sp.bytes != layers[l].size() || sum != checksum(layers[l].data(), layers[l].size()))
            ++bad[g];
          ss.release(g, l, compute);
        }
      }
      compute.synchronize();
    });
  }
  for (auto& t : ts) t.join();
  for (std::size_t g = 0; g < bad.size(); ++g)
    EXPECT_EQ(bad[g], 0) << "GPU " << g << " read wrong layer bytes";
}

TEST(swap_shard, every_gpu_reads_every_layer_gathered_from_the_shards_of_its_peers) {
  rig r(3, 4 * MiB);
  const auto layers = make_layers(5, 600 * KiB);
  const auto [sizes, srcs] = sizes_and_sources(layers);
  swap_shard ss(*r.n, *r.coll, sizes, srcs);
  EXPECT_EQ(ss.layers(), 5u);
  for (std::size_t l = 0; l < 5; ++l) EXPECT_EQ(ss.source(l), layer_source::peers);
  run_steps(r, ss, layers, 3);
  const swap_shard_metrics m = ss.metrics();
  EXPECT_GE(m.peer_gathers, 3u * 5u * 3u) << "a gather per layer per GPU per step";
  EXPECT_EQ(m.host_loads, 0u);
  // Each GPU holds a third of each layer (200 KiB shards), paged in once and kept (they fit); the
  // staging buffers are device-resident: no layer ever crossed its host link whole.
  for (std::size_t g = 0; g < 3; ++g) {
    const pager_metrics pm = r.n->gpu(g).metrics();
    EXPECT_EQ(pm.page_in_bytes, 5u * 200 * KiB) << "GPU " << g;
    EXPECT_EQ(pm.device_resident_tensors, 2u) << "GPU " << g << ": two staging buffers";
    EXPECT_EQ(pm.device_resident_bytes, 2u * 2u * 3u * 200 * KiB)
        << "GPU " << g << ": two layers each";
  }
  // Host RAM holds the layers once, as shards, and nothing for staging.
  EXPECT_EQ(r.n->metrics().host_used_bytes, 5u * 3u * 200 * KiB);
  // 15 layers per GPU, in groups of two: 8 synchronisations per GPU (the last group has one layer).
  EXPECT_EQ(m.layers_acquired, 3u * 15u);
  EXPECT_EQ(m.compute_waits, 3u * 8u);
}

// A training step visits the layers forward then backward; the gathers follow that order two
// layers ahead in both directions, and every visit reads its own layer's bytes.
TEST(swap_shard, a_forward_backward_order_gathers_ahead_in_both_directions) {
  rig r(2, 4 * MiB);
  const auto layers = make_layers(5, 300 * KiB);
  const auto [sizes, srcs] = sizes_and_sources(layers);
  swap_shard_config cfg;
  cfg.order = forward_backward_order(5);
  EXPECT_EQ(cfg.order, (std::vector<std::size_t>{0, 1, 2, 3, 4, 4, 3, 2, 1, 0}));
  swap_shard ss(*r.n, *r.coll, sizes, srcs, cfg);
  std::vector<std::thread> ts;
  std::vector<int> bad(2, 0);
  for (std::size_t g = 0; g < 2; ++g) {
    ts.emplace_back([&, g] {
      stream compute(*r.devs[g]);
      for (int step = 0; step < 2; ++step) {
        for (std::size_t l : cfg.order) {
          const device_span sp = ss.acquire(g, l, compute);
          std::uint64_t sum = 0;
          r.devs[g]->checksum_async(sp.data, sp.bytes, &sum, compute);
          compute.synchronize();
          if (sp.bytes != layers[l].size() || sum != checksum(layers[l].data(), layers[l].size()))
            ++bad[g];
          ss.release(g, l, compute);
        }
        EXPECT_THROW(ss.acquire(g, 1, compute), invalid_argument)
            << "after the backward comes the next forward: layer 0";
      }
      compute.synchronize();
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad, (std::vector<int>{0, 0})) << "a visit read another layer's bytes";
  const swap_shard_metrics m = ss.metrics();
  EXPECT_EQ(m.layers_acquired, 2u * 20u);
  EXPECT_EQ(m.compute_waits, 2u * 10u) << "one wait per two visits, in both directions";
  swap_shard_config bad_order;
  bad_order.order = {0, 5};
  EXPECT_THROW(swap_shard(*r.n, *r.coll, sizes, srcs, bad_order), invalid_argument);
}

TEST(swap_shard, one_layer_per_sync_synchronises_every_layer_and_reads_the_same_bytes) {
  rig r(2, 4 * MiB);
  const auto layers = make_layers(4, 300 * KiB);
  const auto [sizes, srcs] = sizes_and_sources(layers);
  swap_shard_config cfg;
  cfg.layers_per_sync = 1;
  swap_shard ss(*r.n, *r.coll, sizes, srcs, cfg);
  run_steps(r, ss, layers, 2);
  const swap_shard_metrics m = ss.metrics();
  EXPECT_EQ(m.layers_acquired, 2u * 8u);
  EXPECT_EQ(m.compute_waits, 2u * 8u);
  EXPECT_EQ(r.n->gpu(0).metrics().device_resident_bytes, 2u * 2u * 150 * KiB);
}

TEST(swap_shard, a_slow_interconnect_and_too_little_hbm_read_layers_from_host_ram) {
  rig r(2, 2 * MiB);  // 2 MiB of HBM per GPU cannot hold 8 layers' shards next to the slots
  const auto layers = make_layers(8, 400 * KiB);
  const auto [sizes, srcs] = sizes_and_sources(layers);
  swap_shard_config cfg;
  cfg.interconnect_bytes_per_second = 1'000'000'000;  // slower than the 4 GB/s host link
  cfg.host_bytes_per_second = 4'000'000'000;
  swap_shard ss(*r.n, *r.coll, sizes, srcs, cfg);
  for (std::size_t l = 0; l < 8; ++l) EXPECT_EQ(ss.source(l), layer_source::host);
  run_steps(r, ss, layers, 2);
  const swap_shard_metrics m = ss.metrics();
  EXPECT_GT(m.host_loads, 0u);
  EXPECT_EQ(m.peer_gathers, 0u);
  EXPECT_EQ(m.layers_from_host, 8u);
}

// Unconfigured, the interconnect is measured: a probe all-gather over sim collectives that model
// 100 MB/s cannot come out faster than that (the model sleeps at least its time), so with layers
// that do not fit HBM the plan reads them from the 4 GB/s host link; every byte still arrives.
TEST(swap_shard, a_measured_slow_interconnect_sends_layers_over_the_host_link) {
  rig r(2, 2 * MiB);
  auto slow = make_sim_collectives(r.ptrs, 100'000'000);
  const auto layers = make_layers(8, 400 * KiB);
  const auto [sizes, srcs] = sizes_and_sources(layers);
  swap_shard_config cfg;
  cfg.probe_bytes = 64 * KiB;
  cfg.host_bytes_per_second = 4'000'000'000;
  swap_shard ss(*r.n, *slow, sizes, srcs, cfg);
  const swap_shard_metrics m = ss.metrics();
  EXPECT_TRUE(m.interconnect_measured);
  EXPECT_GT(m.interconnect_bytes_per_second, 0u);
  EXPECT_LE(m.interconnect_bytes_per_second, 100'000'000u) << "faster than the modelled link";
  EXPECT_EQ(m.host_bytes_per_second, 4'000'000'000u);
  EXPECT_EQ(m.layers_from_host, 8u);
  run_steps(r, ss, layers, 1);
}

// What needs no rates: shards that all fit stay in HBM and are gathered from peers (nothing
// measured), and one GPU reads from host RAM (a one-rank gather would only add a copy).
TEST(swap_shard, shards_that_fit_gather_from_peers_and_one_gpu_reads_from_host_without_measuring) {
  {
    rig r(2, 8 * MiB);
    const auto layers = make_layers(4, 200 * KiB);
    const auto [sizes, srcs] = sizes_and_sources(layers);
    swap_shard ss(*r.n, *r.coll, sizes, srcs);
    EXPECT_EQ(ss.metrics().layers_from_peers, 4u);
    EXPECT_FALSE(ss.metrics().interconnect_measured);
    EXPECT_EQ(ss.metrics().interconnect_bytes_per_second, 0u);
  }
  rig one(1, 2 * MiB);
  const auto layers = make_layers(8, 400 * KiB);
  const auto [sizes, srcs] = sizes_and_sources(layers);
  auto solo = make_one_rank_collectives(*one.devs[0]);
  swap_shard ss(*one.n, *solo, sizes, srcs);
  EXPECT_EQ(ss.metrics().layers_from_host, 8u);
  EXPECT_FALSE(ss.metrics().interconnect_measured);
  run_steps(one, ss, layers, 1);
}

TEST(swap_shard, layers_out_of_order_and_bad_setups_are_refused) {
  rig r(2, 4 * MiB);
  swap_shard ss(*r.n, *r.coll, {100 * KiB, 100 * KiB});
  stream s(*r.devs[0]);
  EXPECT_THROW(ss.acquire(0, 1, s), invalid_argument) << "layer 0 comes first";
  (void)ss.acquire(0, 0, s);
  EXPECT_THROW(ss.acquire(0, 1, s), invalid_argument) << "layer 0 is not released";
  EXPECT_THROW(ss.release(0, 1, s), invalid_argument);
  ss.release(0, 0, s);
  stream other(*r.devs[0]);
  EXPECT_THROW(ss.acquire(0, 1, other), invalid_argument)
      << "layer 1 is in layer 0's group: same stream";
  (void)ss.acquire(0, 1, s);
  ss.release(0, 1, s);
  EXPECT_THROW(ss.acquire(2, 0, s), invalid_argument);
  auto three = make_sim_collectives({r.devs[0].get(), r.devs[1].get(), r.devs[1].get()});
  EXPECT_THROW(swap_shard(*r.n, *three, {KiB}), invalid_argument) << "3 ranks for 2 GPUs";
  swap_shard_config zero;
  zero.ahead = 0;
  EXPECT_THROW(swap_shard(*r.n, *r.coll, {KiB}, {}, zero), invalid_argument);
  zero.ahead = 2;
  zero.layers_per_sync = 0;
  EXPECT_THROW(swap_shard(*r.n, *r.coll, {KiB}, {}, zero), invalid_argument);
  // GPU 1 makes the same acquires as GPU 0: the gathers they start must match, rank by rank.
  stream s1(*r.devs[1]);
  for (std::size_t l = 0; l < 2; ++l) {
    (void)ss.acquire(1, l, s1);
    ss.release(1, l, s1);
  }
  s1.synchronize();
}

/// A host-path swap_shard whose engines have (almost) stopped issuing: 16 layers of 200 KiB on 2
/// GPUs (100 KiB shards, one chunk each) do not fit 2 MiB of HBM next to the staging buffers, and
/// the slow interconnect sends them over the host link, now capped at 1 byte/s. The buckets'
/// burst lets two loads per GPU through; the others stay queued, never issued.
struct parked_rig {
  rig r{2, 2 * MiB};
  std::vector<std::vector<unsigned char>> layers = make_layers(16, 200 * KiB);
  std::unique_ptr<swap_shard> ss;
  std::vector<std::unique_ptr<stream>> compute;
  parked_rig() {
    const auto [sizes, srcs] = sizes_and_sources(layers);
    swap_shard_config cfg;
    cfg.interconnect_bytes_per_second = 1'000'000'000;  // slower than the 4 GB/s host link
    cfg.host_bytes_per_second = 4'000'000'000;
    ss = std::make_unique<swap_shard>(*r.n, *r.coll, sizes, srcs, cfg);
    for (std::size_t g = 0; g < 2; ++g) {
      r.n->gpu(g).engine().set_rate(copy_direction::host_to_device, 1);
      compute.push_back(std::make_unique<stream>(*r.devs[g]));
    }
  }
  /// Host loads cancelled on GPU g's engine so far.
  std::uint64_t cancelled(std::size_t g) {
    return r.n->gpu(g)
        .engine()
        .metrics()
        .classes[static_cast<std::size_t>(transfer_priority::prefetch)]
        .cancelled;
  }
};

// Acquiring layer 0 issues groups 0 and 1 (look-ahead): the gather streams wait on loads the
// engines' dispatchers have yet to issue, and each compute stream waits on its gather stream.
// Destroying the object must not wait for those loads (at 1 byte/s, never): it cancels them,
// which releases the gather streams and, through them, the compute streams.
TEST(swap_shard, destruction_releases_gathers_parked_on_loads_the_engine_has_not_issued) {
  parked_rig p;
  for (std::size_t l = 0; l < 16; ++l) ASSERT_EQ(p.ss->source(l), layer_source::host);
  for (std::size_t g = 0; g < 2; ++g) {
    (void)p.ss->acquire(g, 0, *p.compute[g]);
    p.ss->release(g, 0, *p.compute[g]);
  }
  EXPECT_EQ(p.cancelled(0) + p.cancelled(1), 0u);
  returns_or_die([&] { p.ss.reset(); }, "~swap_shard");
  returns_or_die(
      [&] {
        for (auto& c : p.compute) c->synchronize();
      },
      "the compute streams' wait for the gathers");
  for (std::size_t g = 0; g < 2; ++g)
    EXPECT_GT(p.cancelled(g), 0u) << "GPU " << g << ": loads were parked";
}

// stop(g) does the same for one GPU while the object lives (before its thread frees memory):
// GPU 0 stops, its compute stream is released, and it acquires nothing more; GPU 1 goes on.
TEST(swap_shard, stop_cancels_one_gpus_look_ahead_loads_and_ends_its_acquires) {
  parked_rig p;
  for (std::size_t g = 0; g < 2; ++g) {
    (void)p.ss->acquire(g, 0, *p.compute[g]);
    p.ss->release(g, 0, *p.compute[g]);
  }
  returns_or_die([&] { p.ss->stop(0); }, "swap_shard::stop(0)");
  returns_or_die([&] { p.compute[0]->synchronize(); }, "GPU 0's compute stream");
  EXPECT_GT(p.cancelled(0), 0u);
  EXPECT_EQ(p.cancelled(1), 0u) << "GPU 1's loads are its own";
  EXPECT_THROW((void)p.ss->acquire(0, 1, *p.compute[0]), logic_error);
  returns_or_die([&] { p.ss->stop(0); }, "a second stop(0)");  // idempotent
  EXPECT_THROW(p.ss->stop(2), invalid_argument);
  returns_or_die([&] { p.ss.reset(); }, "~swap_shard");
}

// GPU 0 acquires a layer (its peer all-gathers are enqueued), GPU 1 never does (its thread
// failed, say): those gathers have no match, so the destructor aborts the collectives rather than
// wait for them, and every stream drains.
TEST(swap_shard, destruction_with_gathers_no_other_gpu_matches_aborts_the_collectives) {
  rig r(2, 4 * MiB);
  const auto layers = make_layers(4, 300 * KiB);
  const auto [sizes, srcs] = sizes_and_sources(layers);
  auto ss = std::make_unique<swap_shard>(*r.n, *r.coll, sizes, srcs);
  ASSERT_EQ(ss->source(0), layer_source::peers);
  stream compute(*r.devs[0]);
  (void)ss->acquire(0, 0, compute);
  ss->release(0, 0, compute);
  returns_or_die([&] { ss.reset(); }, "~swap_shard with unmatched gathers");
  EXPECT_TRUE(r.coll->aborted());
  returns_or_die([&] { compute.synchronize(); }, "GPU 0's compute stream");
}

}  // namespace
}  // namespace htp::test
