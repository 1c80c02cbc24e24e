// The node on N sim devices in one process: one host tier for all GPUs, replicated weights paged
// into any GPU from one host copy, shards only into their own GPU, local mutable tensors written
// back into the shared tier, configured shared links, and errors that name the rule.
#include <htp/checksum.hpp>
#include <htp/detail/topology.hpp>
#include <htp/error.hpp>
#include <htp/node.hpp>
#include <htp/sim_device.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace htp::test {
namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

struct sim_node {
  std::vector<std::unique_ptr<device>> devs;
  std::unique_ptr<node> n;
  explicit sim_node(std::size_t gpus, node_config c = config(), std::vector<int> numa = {}) {
    std::vector<device*> ptrs;
    for (std::size_t g = 0; g < gpus; ++g) {
      sim_config s;
      if (!numa.empty()) s.numa_node = numa[g];
      s.device_memory_bytes = 32 * MiB;
      s.pinned_memory_bytes = 64 * MiB;
      s.ordinal = static_cast<int>(g);
      devs.push_back(make_sim_device(s));
      ptrs.push_back(devs.back().get());
    }
    n = std::make_unique<node>(ptrs, c);
  }
  static node_config config() {
    node_config c;
    c.host_budget_bytes = 16 * MiB;
    c.host_slab_bytes = MiB;
    c.gpu.hbm_budget_bytes = 2 * MiB;
    c.gpu.slab_bytes = MiB;
    c.gpu.chunk_bytes = 256 * KiB;
    c.gpu.h2d.link_bytes_per_second = 4'000'000'000;  // skip calibration
    c.gpu.d2h.link_bytes_per_second = 4'000'000'000;
    return c;
  }
};

/// The test node's config with GPUs 0 and 1 behind one 2 GB/s H2D link, "switch0".
node_config switch0_config() {
  node_config c = sim_node::config();
  node_link_group grp;
  grp.name = "switch0";
  grp.gpus = {0, 1};
  grp.h2d_bytes_per_second = 2'000'000'000;
  c.shared_links = {grp};
  return c;
}

std::vector<unsigned char> pattern(std::size_t bytes, unsigned seed) {
  std::vector<unsigned char> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    v[i] = static_cast<unsigned char>((i * 131 + seed * 17) >> 3);
  return v;
}

/// The bytes GPU g sees for handle h (acquire, copy the device span out, release).
std::vector<unsigned char> read_on(node& n, std::size_t g, tensor_handle h, device& dev) {
  stream s(dev);
  const device_span sp = n.gpu(g).acquire(h, s, /*wait=*/true);
  std::vector<unsigned char> out(sp.bytes);
  std::memcpy(out.data(), sp.data, sp.bytes);  // sim device memory is host memory
  n.gpu(g).release(h, s);
  s.synchronize();
  return out;
}

TEST(node, compressed_shards_take_their_wire_bytes_in_the_host_tier_and_page_in_bit_exact) {
  sim_node sn(2);
  node& n = *sn.n;
  // bf16 weights of one binade's spread: they compress (exponents cluster), unlike a pattern.
  std::vector<std::vector<unsigned char>> shards;
  for (std::size_t g = 0; g < 2; ++g) {
    std::vector<unsigned char> w(600 * KiB + 2 * g);
    for (std::size_t i = 0; i + 1 < w.size(); i += 2) {
      w[i] = static_cast<unsigned char>(i * 2654435761u >> 7);
      w[i + 1] = static_cast<unsigned char>(0x3c + (i / 2) % 2);
    }
    shards.push_back(std::move(w));
  }
  const node_tensor t =
      n.register_sharded_compressed("w", {shards[0].size(), shards[1].size()}, weight_format::bf16,
                                    {shards[0].data(), shards[1].data()});
  const node_metrics m = n.metrics();
  EXPECT_LT(m.host_used_bytes, shards[0].size() + shards[1].size());
  for (std::size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(n.gpu(g).metrics().compressed_tensors, 1u);
    EXPECT_EQ(n.gpu(g).info(n.on(t, g)).bytes, shards[g].size());
    for (int round = 0; round < 2; ++round) {
      EXPECT_EQ(read_on(n, g, n.on(t, g), *sn.devs[g]), shards[g]) << "GPU " << g;
      n.gpu(g).evict(n.on(t, g));
    }
  }
  n.unregister(t);
  EXPECT_EQ(n.metrics().host_used_bytes, 0u);
}

TEST(node, a_compressed_replicated_weight_keeps_one_wire_copy_that_every_gpu_decodes) {
  sim_node sn(2);
  node& n = *sn.n;
  std::vector<unsigned char> w(700 * KiB + 6);
  for (std::size_t i = 0; i + 1 < w.size(); i += 2) {
    w[i] = static_cast<unsigned char>(i * 2654435761u >> 9);
    w[i + 1] = static_cast<unsigned char>(0x3c + (i / 2) % 3);
  }
  const node_tensor t =
      n.register_replicated_compressed("w", w.size(), weight_format::bf16, w.data());
  const node_metrics m = n.metrics();
  EXPECT_LT(m.host_used_bytes, w.size()) << "one copy, smaller than the weight";
  EXPECT_EQ(m.replicated_bytes, m.host_used_bytes);
  for (std::size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(n.gpu(g).metrics().compressed_tensors, 1u);
    for (int round = 0; round < 2; ++round) {
      EXPECT_EQ(read_on(n, g, n.on(t, g), *sn.devs[g]), w) << "GPU " << g;
      n.gpu(g).evict(n.on(t, g));
    }
  }
  EXPECT_THROW((void)n.register_replicated_compressed("z", 0, weight_format::bf16),
               invalid_argument);
  n.unregister(t);
  EXPECT_EQ(n.metrics().host_used_bytes, 0u);
}

TEST(node, gpus_on_two_numa_nodes_get_a_host_tier_each_and_their_shards_live_in_their_own) {
  sim_node sn(4, sim_node::config(), {0, 0, 1, 1});
  node& n = *sn.n;
  const node_metrics before = n.metrics();
  ASSERT_EQ(before.host_tiers.size(), 2u);
  EXPECT_EQ(before.host_tiers[0].numa_node, 0);
  EXPECT_EQ(before.host_tiers[1].numa_node, 1);
  EXPECT_EQ(before.host_tiers[0].gpus, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(before.host_tiers[1].gpus, (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(before.host_capacity_bytes,
            before.host_tiers[0].capacity_bytes + before.host_tiers[1].capacity_bytes);
  for (const auto& t : before.host_tiers) {
    // Applied, or the clean fallback that says why (a machine without that node).
    EXPECT_TRUE(t.placement == "node " + std::to_string(t.numa_node) ||
                t.placement.rfind("not placed: ", 0) == 0)
        << t.placement;
  }
  std::vector<std::vector<unsigned char>> shards;
  std::vector<const void*> srcs;
  for (unsigned g = 0; g < 4; ++g) {
    shards.push_back(pattern(100 * KiB + g * KiB, g));
    srcs.push_back(shards.back().data());
  }
  const node_tensor t = n.register_sharded(
      "w", {shards[0].size(), shards[1].size(), shards[2].size(), shards[3].size()},
      tensor_kind::weight, srcs);
  const node_metrics after = n.metrics();
  EXPECT_EQ(after.host_tiers[0].used_bytes, shards[0].size() + shards[1].size());
  EXPECT_EQ(after.host_tiers[1].used_bytes, shards[2].size() + shards[3].size());
  if (after.host_tiers[0].placement == "node 0") {
    EXPECT_EQ(detail::numa_node_of_address(n.host_copy(t, 0).ptr), 0)
        << "the page is not on GPU 0's node";
  }
  for (std::size_t g = 0; g < 4; ++g)
    EXPECT_EQ(read_on(n, g, n.on(t, g), *sn.devs[g]), shards[g]) << "GPU " << g;
  const node_tensor r = n.register_replicated("shared", 10 * KiB);  // GPU 0's node
  EXPECT_EQ(n.metrics().host_tiers[0].used_bytes, after.host_tiers[0].used_bytes + 10 * KiB);
  n.unregister(t);
  n.unregister(r);
  EXPECT_EQ(n.metrics().host_tiers[0].used_bytes + n.metrics().host_tiers[1].used_bytes, 0u);
}

TEST(node, one_host_tier_without_numa_placement_or_with_one_known_node) {
  node_config off = sim_node::config();
  off.numa_placement = false;
  sim_node a(2, off, {0, 1});
  ASSERT_EQ(a.n->metrics().host_tiers.size(), 1u);
  EXPECT_EQ(a.n->metrics().host_tiers[0].numa_node, -1);
  EXPECT_EQ(a.n->metrics().host_tiers[0].gpus, (std::vector<std::size_t>{0, 1}));
  sim_node b(2, sim_node::config(), {-1, -1});
  ASSERT_EQ(b.n->metrics().host_tiers.size(), 1u);
  EXPECT_NE(b.n->metrics().host_tiers[0].placement.find("no NUMA preference"), std::string::npos);
}

TEST(node, a_replicated_weight_has_one_host_copy_and_pages_into_every_gpu) {
  sim_node sn(3);
  node& n = *sn.n;
  const auto w = pattern(600 * KiB, 1);
  const node_tensor t = n.register_replicated("w", w.size(), w.data());
  EXPECT_EQ(n.layout(t), node_layout::replicated);
  const node_metrics m = n.metrics();
  EXPECT_EQ(m.host_used_bytes, w.size()) << "one host copy, not one per GPU";
  EXPECT_EQ(m.replicated_bytes, w.size());
  EXPECT_EQ(m.per_gpu.size(), 3u);
  for (std::size_t g = 0; g < 3; ++g) {
    EXPECT_EQ(checksum(read_on(n, g, n.on(t, g), *sn.devs[g]).data(), w.size()),
              checksum(w.data(), w.size()))
        << "GPU " << g;
  }
  for (std::size_t g = 0; g < 3; ++g) EXPECT_EQ(n.gpu(g).metrics().faults, 1u);
  n.unregister(t);
  EXPECT_EQ(n.metrics().host_used_bytes, 0u);
  EXPECT_THROW(n.on(t, 0), invalid_argument);
}

TEST(node, any_gpu_serves_a_shard_degraded_from_the_shared_host_tier) {
  // The host tier is pinned through GPU 0's device and portable: GPU 1 maps it when its HBM is
  // full of pinned tensors (the ladder's last rung), and reads the shard's own bytes there.
  node_config c = sim_node::config();
  c.gpu.on_oom = oom_policy::allow_degraded;
  sim_node sn(2, c);
  node& n = *sn.n;
  const auto big = pattern(1536 * KiB, 4);
  const node_tensor hold = n.register_replicated("hold", big.size(), big.data());
  const auto s0 = pattern(700 * KiB, 5), s1 = pattern(900 * KiB, 6);
  const node_tensor w =
      n.register_sharded("w", {s0.size(), s1.size()}, tensor_kind::weight, {s0.data(), s1.data()});
  stream s(*sn.devs[1]);
  n.gpu(1).acquire(n.on(hold, 1), s, /*wait=*/true);  // pinned: 1.5 of the 2 MiB budget
  const device_span sp = n.gpu(1).acquire(n.on(w, 1), s, /*wait=*/true);
  EXPECT_TRUE(sp.degraded);
  ASSERT_EQ(sp.bytes, s1.size());
  EXPECT_EQ(std::memcmp(sp.data, s1.data(), s1.size()), 0)
      << "GPU 1 read other bytes than its shard";
  n.gpu(1).release(n.on(w, 1), s);
  n.gpu(1).release(n.on(hold, 1), s);
  s.synchronize();
  EXPECT_EQ(n.gpu(1).metrics().degraded_acquires, 1u);
  n.unregister(w);
  n.unregister(hold);
}

TEST(node, shards_page_only_into_their_own_gpu) {
  sim_node sn(2);
  node& n = *sn.n;
  const auto s0 = pattern(300 * KiB, 2), s1 = pattern(200 * KiB, 3);
  const node_tensor t =
      n.register_sharded("wq", {s0.size(), s1.size()}, tensor_kind::weight, {s0.data(), s1.data()});
  EXPECT_EQ(n.metrics().host_used_bytes, s0.size() + s1.size());
  EXPECT_EQ(read_on(n, 0, n.on(t, 0), *sn.devs[0]), s0);
  EXPECT_EQ(read_on(n, 1, n.on(t, 1), *sn.devs[1]), s1);
  EXPECT_EQ(n.gpu(0).info(n.on(t, 0)).bytes, s0.size());
  try {
    (void)n.on(n.register_local(1, "kv", 64 * KiB, tensor_kind::mutable_state), 0);
    FAIL() << "a local tensor of GPU 1 was found on GPU 0";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("its own GPU"), std::string::npos) << e.what();
  }
  EXPECT_THROW(n.register_sharded("bad", {s0.size()}, tensor_kind::weight), invalid_argument);
  EXPECT_THROW(n.register_sharded("bad", {s0.size(), 0}, tensor_kind::weight), invalid_argument);
}

TEST(node, a_local_mutable_tensor_is_written_back_into_the_shared_tier) {
  sim_node sn(2);
  node& n = *sn.n;
  const node_tensor kv = n.register_local(1, "kv", 128 * KiB, tensor_kind::mutable_state);
  const tensor_handle h = n.on(kv, 1);
  stream s(*sn.devs[1]);
  const device_span sp = n.gpu(1).acquire(h, s, true);
  const auto data = pattern(sp.bytes, 9);
  std::memcpy(sp.data, data.data(), sp.bytes);  // "the kernel" writes it
  n.gpu(1).release(h, s, /*dirty=*/true);
  s.synchronize();
  n.gpu(1).evict(h);  // written back to the node's host memory
  EXPECT_EQ(n.gpu(1).metrics().write_backs, 1u);
  std::vector<unsigned char> back(sp.bytes);
  n.gpu(1).copy_to_host(h, back.data());
  EXPECT_EQ(back, data);
  EXPECT_EQ(read_on(n, 1, h, *sn.devs[1]), data) << "paged in again from the shared tier";
}

TEST(node, configured_shared_links_feed_each_gpus_engine_and_bad_groups_are_named) {
  node_config c = switch0_config();
  sim_node sn(3, c);
  node& n = *sn.n;
  ASSERT_EQ(n.shared_links().size(), 1u) << "H2D only: no D2H cap was configured";
  const auto w = pattern(512 * KiB, 4);
  const node_tensor t = n.register_replicated("w", w.size(), w.data());
  for (std::size_t g = 0; g < 3; ++g) (void)read_on(n, g, n.on(t, g), *sn.devs[g]);
  const node_metrics m = n.metrics();
  ASSERT_EQ(m.links.size(), 1u);
  EXPECT_EQ(m.links[0].h2d_rate_bytes_per_second, 2'000'000'000u);
  EXPECT_EQ(m.links[0].h2d_bytes, 2 * w.size())
      << "GPUs 0 and 1 crossed the shared link; GPU 2 did not";

  auto expect_bad = [&](node_config bad, const char* what) {
    try {
      sim_node x(2, bad);
      FAIL() << "accepted; expected a complaint about " << what;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const node_link_group grp = c.shared_links.front();
  node_config twice = sim_node::config();
  twice.shared_links = {grp, grp};
  expect_bad(twice, "repeats a name");
  node_config unknown = sim_node::config();
  unknown.shared_links = {grp};
  unknown.shared_links[0].gpus = {0, 5};
  expect_bad(unknown, "names GPU 5");
  node_config own_host = sim_node::config();
  own_host.gpu.host_budget_bytes = MiB;
  expect_bad(own_host, "host_budget_bytes");
}

// GPUs 0 and 1 under switch0 (an H2D cap) inside numa0 (one cap for both directions), GPU 2 in
// numa0 alone, GPU 3 in no group: each link counts exactly the bytes of the GPUs below it, and a
// write-back crosses numa0's combined cap too.
TEST(node, reset_metrics_starts_every_gpus_counters_and_the_link_bytes_afresh) {
  node_config c = switch0_config();
  sim_node sn(2, c);
  node& n = *sn.n;
  const auto w = pattern(512 * KiB, 5);
  const node_tensor t = n.register_replicated("w", w.size(), w.data());
  for (std::size_t g = 0; g < 2; ++g) (void)read_on(n, g, n.on(t, g), *sn.devs[g]);
  ASSERT_EQ(n.metrics().links.at(0).h2d_bytes, 2 * w.size());
  n.reset_metrics();
  node_metrics m = n.metrics();
  EXPECT_EQ(m.links.at(0).h2d_bytes, 0u);
  for (const auto& g : m.per_gpu) EXPECT_EQ(g.faults, 0u);
  EXPECT_EQ(m.host_used_bytes, w.size()) << "states survive a reset";
  (void)read_on(n, 0, n.on(t, 0), *sn.devs[0]);  // resident on GPU 0 still: a hit, no bytes
  m = n.metrics();
  EXPECT_EQ(m.per_gpu[0].hits, 1u);
  EXPECT_EQ(m.links.at(0).h2d_bytes, 0u);
}

TEST(node, nested_link_groups_chain_a_switch_under_its_numa_node) {
  node_config c = sim_node::config();
  node_link_group sw, numa;
  sw.name = "switch0";
  sw.gpus = {0, 1};
  sw.h2d_bytes_per_second = 3'000'000'000;
  numa.name = "numa0";
  numa.gpus = {0, 1, 2};
  numa.combined_bytes_per_second = 8'000'000'000;
  c.shared_links = {numa, sw};  // any order: the tree comes from the GPU sets
  sim_node sn(4, c);
  node& n = *sn.n;
  ASSERT_EQ(n.shared_links().size(), 2u);
  const auto w = pattern(512 * KiB, 5);
  const node_tensor t = n.register_replicated("w", w.size(), w.data());
  for (std::size_t g = 0; g < 4; ++g)
    EXPECT_EQ(read_on(n, g, n.on(t, g), *sn.devs[g]), w) << "GPU " << g;

  const node_tensor kv = n.register_local(2, "kv", 256 * KiB, tensor_kind::mutable_state);
  const tensor_handle h = n.on(kv, 2);
  stream s(*sn.devs[2]);
  const device_span sp = n.gpu(2).acquire(h, s, true);
  std::memset(sp.data, 7, sp.bytes);
  n.gpu(2).release(h, s, /*dirty=*/true);
  s.synchronize();
  n.gpu(2).evict(h);  // a write-back: D2H through numa0

  const node_metrics m = n.metrics();
  ASSERT_EQ(m.links.size(), 2u);
  const node_link_metrics& lnuma = m.links[0].name == "numa0" ? m.links[0] : m.links[1];
  const node_link_metrics& lsw = m.links[0].name == "switch0" ? m.links[0] : m.links[1];
  EXPECT_EQ(lsw.parent, "numa0");
  EXPECT_EQ(lnuma.parent, "");
  EXPECT_EQ(lsw.h2d_rate_bytes_per_second, 3'000'000'000u);
  EXPECT_EQ(lnuma.combined_rate_bytes_per_second, 8'000'000'000u);
  EXPECT_EQ(lsw.h2d_bytes, 2 * w.size()) << "GPUs 0 and 1";
  const std::uint64_t kv_in = sp.bytes;  // the acquire paged in zeros, the eviction wrote back
  EXPECT_EQ(lnuma.combined_bytes, 3 * w.size() + kv_in + sp.bytes)
      << "GPUs 0-2, both directions; not GPU 3";
  EXPECT_EQ(lnuma.h2d_bytes, 0u) << "numa0 has no directional cap";
}

TEST(node, link_groups_that_overlap_without_nesting_or_put_memory_under_pcie_are_refused) {
  auto expect_bad = [&](std::vector<node_link_group> groups, const char* what) {
    node_config c = sim_node::config();
    c.shared_links = std::move(groups);
    try {
      sim_node x(3, c);
      FAIL() << "accepted; expected a complaint about " << what;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  node_link_group a, b;
  a.name = "a";
  a.gpus = {0, 1};
  a.h2d_bytes_per_second = 1'000'000'000;
  b.name = "b";
  b.gpus = {1, 2};
  b.h2d_bytes_per_second = 1'000'000'000;
  expect_bad({a, b}, "groups must nest");
  node_link_group twice = a;
  twice.gpus = {0, 0, 1};
  expect_bad({twice}, "names a GPU twice");
  node_link_group inner_memory = a, outer_pcie = a;
  inner_memory.h2d_bytes_per_second = 0;
  inner_memory.combined_bytes_per_second = 1'000'000'000;
  outer_pcie.name = "pcie";
  outer_pcie.gpus = {0, 1, 2};
  expect_bad({inner_memory, outer_pcie}, "never below");
}

// On sim the topology comes from the device properties: GPUs on NUMA nodes {0, 0, 1, 1} give two
// NUMA groups with the configured memory cap, each GPU's engine drawing from its own node's.
TEST(node, discovered_numa_groups_cap_each_nodes_gpus_together) {
  node_config c = sim_node::config();
  c.numa_bytes_per_second = 6'000'000'000;
  sim_node sn(4, c, {0, 0, 1, 1});
  node& n = *sn.n;
  const auto w = pattern(256 * KiB, 3);
  const node_tensor t = n.register_replicated("w", w.size(), w.data());
  for (std::size_t g = 0; g < 3; ++g) (void)read_on(n, g, n.on(t, g), *sn.devs[g]);
  const node_metrics m = n.metrics();
  ASSERT_EQ(m.links.size(), 2u);
  EXPECT_EQ(m.links[0].name, "numa0");
  EXPECT_EQ(m.links[0].gpus, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(m.links[0].combined_rate_bytes_per_second, 6'000'000'000u);
  EXPECT_EQ(m.links[0].combined_bytes, 2 * w.size());
  EXPECT_EQ(m.links[1].name, "numa1");
  EXPECT_EQ(m.links[1].combined_bytes, w.size()) << "GPU 2 only; GPU 3 read nothing";

  node_config uncapped = sim_node::config();
  sim_node su(2, uncapped, {0, 1});
  const node_metrics mu = su.n->metrics();
  ASSERT_EQ(mu.links.size(), 2u) << "listed even without a memory cap";
  EXPECT_EQ(mu.links[0].combined_rate_bytes_per_second, 0u);
  EXPECT_TRUE(su.n->shared_links().empty()) << "nothing to draw from without a cap";
}

TEST(node, a_failed_registration_leaves_nothing_behind) {
  sim_node sn(2);
  node& n = *sn.n;
  // Too large for a GPU's HBM: the pagers refuse it after the host copy was made; it is freed.
  EXPECT_THROW(n.register_replicated("huge", 10 * MiB), invalid_argument);
  EXPECT_EQ(n.metrics().host_used_bytes, 0u);
  EXPECT_EQ(n.metrics().tensors, 0u);
  // Fill the 16 MiB host tier with 2 MiB weights; the one that does not fit changes nothing.
  std::vector<node_tensor> ts;
  for (;;) {
    try {
      ts.push_back(n.register_replicated("w" + std::to_string(ts.size()), 2 * MiB));
    } catch (const out_of_memory&) {
      break;
    }
    ASSERT_LT(ts.size(), 16u);
  }
  EXPECT_EQ(ts.size(), 8u);
  EXPECT_EQ(n.metrics().tensors, 8u);
  EXPECT_EQ(n.metrics().host_used_bytes, 16 * MiB);
  n.unregister(ts.back());
  EXPECT_TRUE(static_cast<bool>(n.register_replicated("again", 2 * MiB))) << "the space came back";
}

}  // namespace
}  // namespace htp::test
