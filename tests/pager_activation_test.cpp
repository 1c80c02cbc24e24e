// Activations in the pager (tensor_kind::activation, pager::release_last_use, pager::discard), on
// the sim backend: a fresh acquire copies nothing in, the kernels' bytes survive an eviction round
// trip, the last use (or a discard) frees HBM at once and dead content is never written back, a
// discard during a write-back leaves nothing live, the errors are typed and change nothing, and a
// training-like loop (forward writes activations, backward reads them once) keeps every checksum
// right and writes activations back only when the budget cannot hold them.
#include "pager_fixture.hpp"
#include "throws_naming.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace htp::test {
namespace {

class pager_activation_test : public sim_pager_test {
 protected:
  /// The checksum of the bytes fill_pattern(seed) writes into `bytes` bytes.
  static std::uint64_t pattern_sum(std::size_t bytes, std::uint64_t seed) {
    const auto b = payload(bytes, seed);
    return checksum(b.data(), b.size());
  }
  /// A forward kernel: acquires the activation, writes fill_pattern(seed) on the device, releases
  /// it dirty.
  void write(pager& p, tensor_handle a, std::uint64_t seed) {
    const device_span s = p.acquire(a, compute);
    dev->fill_pattern_async(s.data, s.bytes, seed, compute);
    p.release(a, compute, /*dirty=*/true);
  }
  /// A backward kernel: acquires the activation, checksums it on the device, releases its last
  /// use; returns the checksum.
  std::uint64_t read_last_use(pager& p, tensor_handle a) {
    const device_span s = p.acquire(a, compute);
    dev->checksum_async(s.data, s.bytes, slot.value, compute);
    p.release_last_use(a, compute);
    compute.synchronize();
    return *slot.value;
  }
};

TEST_F(pager_activation_test, a_fresh_acquire_moves_no_bytes_and_the_writes_survive_eviction) {
  pager p(*dev, small_pager_config(4));  // two 2-page tensors fill it
  const std::size_t bytes = 100'003;
  const auto a = p.register_tensor("a0", bytes, tensor_kind::activation);
  EXPECT_TRUE(p.info(a).dead);
  EXPECT_EQ(p.info(a).where, residency::host);
  write(p, a, 7);
  p.synchronize();
  auto m = p.metrics();
  EXPECT_EQ(m.page_in_bytes, 0u);  // nothing crossed the link for the fresh acquire
  EXPECT_EQ(m.page_ins, 0u);
  EXPECT_EQ(m.activation_fresh_acquires, 1u);
  EXPECT_EQ(m.faults, 0u);
  EXPECT_EQ(m.acquires, 1u);
  EXPECT_FALSE(p.info(a).dead);
  EXPECT_TRUE(p.info(a).dirty);

  // Clean tensors go first: one weight is held pinned, so the next one's fault can only make
  // room by writing the live activation back.
  const auto w0 = payload(bytes, 100);
  const auto w1 = payload(bytes, 101);
  const auto h0 = p.register_tensor("w0", bytes, tensor_kind::weight, w0.data());
  const auto h1 = p.register_tensor("w1", bytes, tensor_kind::weight, w1.data());
  const device_span held = p.acquire(h0, compute);
  dev->checksum_async(held.data, held.bytes, slot.value, compute);
  compute.synchronize();
  EXPECT_EQ(*slot.value, checksum(w0.data(), w0.size()));
  EXPECT_EQ(device_checksum(p, *dev, h1, compute, slot), checksum(w1.data(), w1.size()));
  p.release(h0, compute);
  p.synchronize();
  EXPECT_EQ(p.info(a).where, residency::host);
  m = p.metrics();
  EXPECT_EQ(m.activation_write_back_bytes, bytes);  // live: written back, once
  EXPECT_EQ(m.write_back_bytes, bytes);
  // Back in: a page-in of the written-back copy (a live activation is a mutable tensor).
  const std::uint64_t before = m.page_in_bytes;
  EXPECT_EQ(device_checksum(p, *dev, a, compute, slot), pattern_sum(bytes, 7));
  p.synchronize();
  EXPECT_EQ(p.metrics().page_in_bytes, before + bytes);
  EXPECT_EQ(p.metrics().activation_fresh_acquires, 1u);
  // copy_to_host reads the authoritative copy too.
  std::vector<unsigned char> host(bytes);
  p.copy_to_host(a, host.data());
  EXPECT_EQ(checksum(host.data(), host.size()), pattern_sum(bytes, 7));
}

TEST_F(pager_activation_test, release_last_use_frees_hbm_at_once_and_nothing_is_written_back) {
  auto c = small_pager_config(4);
  c.checked = true;  // invariants checked at every transition; freed HBM poisoned
  pager p(*dev, c);
  const std::size_t bytes = 100'003;
  const auto a = p.register_tensor("a0", bytes, tensor_kind::activation);
  write(p, a, 11);
  p.synchronize();
  EXPECT_GT(p.metrics().hbm.used_bytes, 0u);
  EXPECT_EQ(read_last_use(p, a), pattern_sum(bytes, 11));
  // Freed at the call (fenced by the event recorded on the stream), no synchronize needed.
  EXPECT_EQ(p.metrics().hbm.used_bytes, 0u);
  const tensor_info i = p.info(a);
  EXPECT_EQ(i.where, residency::host);
  EXPECT_TRUE(i.dead);
  EXPECT_FALSE(i.dirty);
  EXPECT_EQ(p.metrics().activation_dead_releases, 1u);
  // Pressure afterwards: weights cycle through HBM; the dead activation is never written back.
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 3; ++k) {
      const auto w = payload(bytes, 200 + k);
      const auto h = p.register_tensor("w", bytes, tensor_kind::weight, w.data());
      EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(w.data(), w.size()));
      p.unregister_tensor(h);
    }
  }
  p.synchronize();
  const auto m = p.metrics();
  EXPECT_EQ(m.write_back_bytes, 0u);
  EXPECT_EQ(m.activation_write_back_bytes, 0u);
  EXPECT_EQ(m.evictions, 0u);  // the dead activation held nothing to evict
  // Its next acquire is fresh again: no page-in.
  const std::uint64_t page_ins = m.page_in_bytes;
  write(p, a, 12);
  EXPECT_EQ(read_last_use(p, a), pattern_sum(bytes, 12));
  p.synchronize();
  EXPECT_EQ(p.metrics().page_in_bytes, page_ins);
  EXPECT_EQ(p.metrics().activation_fresh_acquires, 2u);
}

TEST_F(pager_activation_test, a_dead_activation_is_never_written_back) {
  pager p(*dev, small_pager_config(4));
  const std::size_t bytes = 70'001;
  const auto a = p.register_tensor("a0", bytes, tensor_kind::activation);
  // Live and dirty, then its last use: evicting it afterwards writes nothing.
  write(p, a, 3);
  EXPECT_EQ(read_last_use(p, a), pattern_sum(bytes, 3));
  p.evict(a);
  p.synchronize();
  EXPECT_EQ(p.metrics().write_back_bytes, 0u);
  // Acquired fresh and released without a write: still dead, resident; evicting it frees the
  // extent with no write-back and is no eviction.
  (void)p.acquire(a, compute);
  p.release(a, compute);
  EXPECT_TRUE(p.info(a).dead);
  EXPECT_EQ(p.info(a).where, residency::resident);
  p.evict(a);
  p.synchronize();
  const auto m = p.metrics();
  EXPECT_EQ(p.info(a).where, residency::host);
  EXPECT_EQ(m.write_back_bytes, 0u);
  EXPECT_EQ(m.evictions, 0u);
  EXPECT_EQ(m.hbm.used_bytes, 0u);
  EXPECT_EQ(m.page_in_bytes, 0u);
}

TEST_F(pager_activation_test, errors_are_typed_and_change_nothing) {
  pager p(*dev, small_pager_config(8));
  const auto w = p.register_tensor("w", 4096, tensor_kind::weight);
  const auto kv = p.register_tensor("kv", 4096, tensor_kind::mutable_state);
  const auto a = p.register_tensor("a", 4096, tensor_kind::activation);
  for (const auto h : {w, kv}) {
    (void)p.acquire(h, compute);
    EXPECT_TRUE(
        throws_naming([&] { p.release_last_use(h, compute); }, {"release_last_use", "activation"}));
    EXPECT_EQ(p.info(h).pins, 1);  // nothing changed: still pinned
    p.release(h, compute);
  }
  // Not acquired.
  EXPECT_TRUE(throws_naming([&] { p.release_last_use(a, compute); },
                            {"release_last_use('a')", "without a matching acquire"}));
  // Pinned twice: not the last holder.
  write(p, a, 5);
  (void)p.acquire(a, compute);
  (void)p.acquire(a, compute);
  EXPECT_TRUE(throws_naming([&] { p.release_last_use(a, compute); },
                            {"release_last_use('a')", "2 acquires", "release the others"}));
  tensor_info i = p.info(a);
  EXPECT_EQ(i.pins, 2);
  EXPECT_FALSE(i.dead);
  EXPECT_TRUE(i.dirty);
  EXPECT_EQ(i.where, residency::resident);
  EXPECT_EQ(p.metrics().activation_dead_releases, 0u);
  p.release(a, compute);
  p.release_last_use(a, compute);  // now the last holder
  EXPECT_TRUE(p.info(a).dead);
  EXPECT_EQ(p.info(a).pins, 0);
  // A stale handle.
  p.unregister_tensor(a);
  EXPECT_TRUE(throws_naming([&] { p.release_last_use(a, compute); }, {"stale"}));
  // Registration: an activation has no source, and is never device-resident.
  const std::vector<unsigned char> bytes(4096, 1);
  EXPECT_TRUE(throws_naming(
      [&] { (void)p.register_tensor("a2", bytes.size(), tensor_kind::activation, bytes.data()); },
      {"register_tensor('a2'", "source = nullptr"}));
  EXPECT_TRUE(
      throws_naming([&] { (void)p.register_resident("a3", bytes.size(), tensor_kind::activation); },
                    {"register_resident('a3'", "mutable_state"}));
  EXPECT_EQ(p.metrics().registered_tensors, 2u);
}

TEST_F(pager_activation_test, discard_frees_a_resident_activations_hbm_and_writes_nothing_back) {
  auto c = small_pager_config(4);
  c.checked = true;  // invariants checked at every transition; freed HBM poisoned
  pager p(*dev, c);
  const std::size_t bytes = 100'003;
  const auto a = p.register_tensor("a0", bytes, tensor_kind::activation);
  write(p, a, 31);
  p.synchronize();
  EXPECT_GT(p.metrics().hbm.used_bytes, 0u);
  p.discard(a);
  // Freed at the call (fenced by the release event), no synchronize needed.
  EXPECT_EQ(p.metrics().hbm.used_bytes, 0u);
  tensor_info i = p.info(a);
  EXPECT_EQ(i.where, residency::host);
  EXPECT_TRUE(i.dead);
  EXPECT_FALSE(i.dirty);
  EXPECT_EQ(p.metrics().activation_discards, 1u);
  EXPECT_EQ(p.metrics().activation_dead_releases, 0u);
  p.discard(a);  // dead already: nothing to discard, not counted
  EXPECT_EQ(p.metrics().activation_discards, 1u);
  // Pressure afterwards: weights cycle through HBM; the dead activation is never written back.
  for (int k = 0; k < 6; ++k) {
    const auto w = payload(bytes, 400 + k);
    const auto h = p.register_tensor("w", bytes, tensor_kind::weight, w.data());
    EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(w.data(), w.size()));
    p.unregister_tensor(h);
  }
  p.synchronize();
  auto m = p.metrics();
  EXPECT_EQ(m.write_back_bytes, 0u);
  EXPECT_EQ(m.evictions, 0u);
  // Its next acquire is fresh: no page-in; the new content is the kernels'.
  const std::uint64_t page_ins = m.page_in_bytes;
  write(p, a, 32);
  EXPECT_EQ(read_last_use(p, a), pattern_sum(bytes, 32));
  p.synchronize();
  m = p.metrics();
  EXPECT_EQ(m.page_in_bytes, page_ins);
  EXPECT_EQ(m.activation_fresh_acquires, 2u);
}

TEST_F(pager_activation_test, discard_of_an_evicted_activation_makes_its_next_acquire_fresh) {
  auto c = small_pager_config(4);
  c.checked = true;
  pager p(*dev, c);
  const std::size_t bytes = 100'003;
  const auto a = p.register_tensor("a0", bytes, tensor_kind::activation);
  write(p, a, 41);
  p.evict(a);  // live: written back to its host extent
  p.synchronize();
  EXPECT_EQ(p.info(a).where, residency::host);
  EXPECT_FALSE(p.info(a).dead);
  EXPECT_EQ(p.metrics().activation_write_back_bytes, bytes);
  p.discard(a);
  EXPECT_TRUE(p.info(a).dead);
  EXPECT_EQ(p.info(a).where, residency::host);
  EXPECT_EQ(p.metrics().activation_discards, 1u);
  // Fresh: nothing crosses the link for it.
  write(p, a, 42);
  p.synchronize();
  auto m = p.metrics();
  EXPECT_EQ(m.page_ins, 0u);
  EXPECT_EQ(m.page_in_bytes, 0u);
  EXPECT_EQ(m.activation_fresh_acquires, 2u);
  // The round trip of the new content still holds: written back, paged in, the same bytes.
  p.evict(a);
  p.synchronize();
  EXPECT_EQ(p.metrics().activation_write_back_bytes, 2 * bytes);
  EXPECT_EQ(read_last_use(p, a), pattern_sum(bytes, 42));
  p.synchronize();
  m = p.metrics();
  EXPECT_EQ(m.page_in_bytes, bytes);
  EXPECT_EQ(m.activation_dead_releases, 1u);
}

TEST_F(pager_activation_test, discard_is_refused_while_pinned_and_for_other_kinds) {
  pager p(*dev, small_pager_config(8));
  const auto w = p.register_tensor("w", 4096, tensor_kind::weight);
  const auto kv = p.register_tensor("kv", 4096, tensor_kind::mutable_state);
  const auto a = p.register_tensor("a", 4096, tensor_kind::activation);
  EXPECT_TRUE(throws_naming([&] { p.discard(w); }, {"discard('w')", "a weight", "activation"}));
  EXPECT_TRUE(throws_naming([&] { p.discard(kv); }, {"discard('kv')", "activation"}));
  // Pinned (a kernel writing it): refused, and it stays pinned, live and dirty afterwards.
  const device_span s = p.acquire(a, compute);
  dev->fill_pattern_async(s.data, s.bytes, 51, compute);
  EXPECT_TRUE(throws_naming([&] { p.discard(a); }, {"discard('a')", "acquired 1 time",
                                                    "release it first", "release_last_use"}));
  EXPECT_EQ(p.info(a).pins, 1);
  EXPECT_TRUE(p.info(a).dead);  // not yet written: no release(dirty) so far
  p.release(a, compute, /*dirty=*/true);
  (void)p.acquire(a, compute);
  EXPECT_TRUE(throws_naming([&] { p.discard(a); }, {"discard('a')", "acquired 1 time"}));
  tensor_info i = p.info(a);
  EXPECT_EQ(i.pins, 1);
  EXPECT_FALSE(i.dead);
  EXPECT_TRUE(i.dirty);
  EXPECT_EQ(i.where, residency::resident);
  p.release(a, compute);
  EXPECT_EQ(device_checksum(p, *dev, a, compute, slot), pattern_sum(4096, 51));
  EXPECT_EQ(p.metrics().activation_discards, 0u);
  // A stale handle.
  p.unregister_tensor(a);
  EXPECT_TRUE(throws_naming([&] { p.discard(a); }, {"stale"}));
}

// acquire(wait = true) of a fresh activation returns only once the kernels still using its new
// extent are done: a host writer (a sim caller's CPU tensors) writes it at once. Here the extent
// is the one a's last use freed, while a kernel reading a is held behind a gate.
TEST_F(pager_activation_test, a_fresh_acquire_with_wait_returns_after_its_extents_last_users) {
  pager p(*dev, small_pager_config(4));  // two 2-page tensors fill it
  const std::size_t bytes = 100'003;
  const auto a = p.register_tensor("a0", bytes, tensor_kind::activation);
  const auto b = p.register_tensor("a1", bytes, tensor_kind::activation);
  const auto w0 = payload(bytes, 400);
  const auto h0 = p.register_tensor("w0", bytes, tensor_kind::weight, w0.data());
  (void)p.acquire(h0, compute, /*wait=*/true);  // held: b's room can only be a's extent
  write(p, a, 41);
  p.synchronize();
  std::atomic<bool> kernel_done{false};
  std::future<bool> acquired;  // declared before the gate: the gate opens first
  gate g;
  (void)p.acquire(a, compute);
  g.hold(*dev, compute);  // "a kernel reading a", still running
  dev->launch_host_func([&kernel_done] { kernel_done = true; }, compute);
  p.release_last_use(a, compute);  // a's extent is free, fenced by this release
  stream other(*dev);
  acquired = std::async(std::launch::async, [&] {
    (void)p.acquire(b, other, /*wait=*/true);
    return kernel_done.load();  // the host may write b now: a's reader must be done
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (p.info(b).where == residency::host && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_NE(p.info(b).where, residency::host) << "b's fresh acquire took its room";
  g.open();
  ASSERT_EQ(acquired.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(acquired.get()) << "acquire(wait = true) returned while a's reader still ran";
  p.release(b, other, /*dirty=*/true);
  p.release(h0, compute);
  p.synchronize();
}

TEST_F(pager_activation_test, discard_during_a_write_back_leaves_nothing_live) {
  auto c = small_pager_config(4);  // two 2-page tensors fill it
  c.checked = true;
  pager p(*dev, c);
  const std::size_t bytes = 100'003;
  const auto a = p.register_tensor("a0", bytes, tensor_kind::activation);
  const auto w0 = payload(bytes, 300);
  const auto w1 = payload(bytes, 301);
  const auto h0 = p.register_tensor("w0", bytes, tensor_kind::weight, w0.data());
  const auto h1 = p.register_tensor("w1", bytes, tensor_kind::weight, w1.data());
  (void)p.acquire(h0, compute, /*wait=*/true);  // held: a is the only tensor w1 can displace
  checksum_slot other_slot(*dev);
  stream other(*dev);
  std::future<std::uint64_t> faulted;  // declared before the gate: the gate opens first
  gate g;
  // a's writer is held behind the gate, so its write-back (ordered after the release) stays in
  // flight until the gate opens.
  const device_span s = p.acquire(a, compute);
  g.hold(*dev, compute);
  dev->fill_pattern_async(s.data, s.bytes, 61, compute);
  p.release(a, compute, /*dirty=*/true);
  // w1's fault can only make room by writing a back, and waits for that write-back.
  faulted = std::async(std::launch::async,
                       [&] { return device_checksum(p, *dev, h1, other, other_slot); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (p.info(a).where != residency::writing_back && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_EQ(p.info(a).where, residency::writing_back);
  p.discard(a);
  tensor_info i = p.info(a);
  EXPECT_TRUE(i.dead);
  EXPECT_FALSE(i.dirty);
  EXPECT_TRUE(i.copy_in_flight);  // the write-back goes on; its completion keeps nothing
  EXPECT_EQ(p.metrics().activation_discards, 1u);
  g.open();
  ASSERT_EQ(faulted.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(faulted.get(), checksum(w1.data(), w1.size()));
  p.synchronize();
  i = p.info(a);
  EXPECT_TRUE(i.dead);
  EXPECT_EQ(i.where, residency::host);
  EXPECT_FALSE(i.copy_in_flight);
  p.release(h0, compute);
  // Dead, not live on the host: the next acquire is fresh (no page-in of the written-back bytes).
  const auto before = p.metrics();
  write(p, a, 62);
  EXPECT_EQ(read_last_use(p, a), pattern_sum(bytes, 62));
  p.synchronize();
  const auto m = p.metrics();
  EXPECT_EQ(m.page_in_bytes, before.page_in_bytes);
  EXPECT_EQ(m.activation_fresh_acquires, before.activation_fresh_acquires + 1);
}

/// One training step per call: forward W0..Wn-1 writing A0..An-1, backward Wn-1..W0 reading
/// An-1..A0 at their last use (release_last_use; with `discard_after_read`, a plain release and
/// then discard, as a holder that drops the saved tensor after reading it). Returns the bytes of
/// activations written back during the step.
struct training_loop {
  pager& p;
  device& dev;
  stream& compute;
  checksum_slot& slot;
  std::vector<tensor_handle> ws, as;
  std::vector<std::uint64_t> w_sums;
  std::size_t a_bytes = 0;
  bool discard_after_read = false;

  training_loop(pager& pg, device& d, stream& s, checksum_slot& sl, int layers, std::size_t w_bytes,
                std::size_t act_bytes)
      : p(pg), dev(d), compute(s), slot(sl), a_bytes(act_bytes) {
    for (int i = 0; i < layers; ++i) {
      const auto w = payload(w_bytes, 500 + i);
      ws.push_back(
          p.register_tensor("W" + std::to_string(i), w_bytes, tensor_kind::weight, w.data()));
      w_sums.push_back(checksum(w.data(), w.size()));
      as.push_back(p.register_tensor("A" + std::to_string(i), act_bytes, tensor_kind::activation));
    }
    std::vector<tensor_handle> order;
    for (int i = 0; i < layers; ++i) order.insert(order.end(), {ws[i], as[i]});
    for (int i = layers; i-- > 0;) order.insert(order.end(), {ws[i], as[i]});
    p.set_schedule(order, /*cyclic=*/true);
  }
  static std::uint64_t seed_of(int step, int layer) { return 9000 + 100 * step + layer; }
  std::uint64_t sum_now() {
    compute.synchronize();
    return *slot.value;
  }
  void forward(int step, int i) {
    const device_span w = p.acquire(ws[i], compute);
    const device_span a = p.acquire(as[i], compute);  // fresh: dead since the last backward
    dev.checksum_async(w.data, w.bytes, slot.value, compute);
    dev.fill_pattern_async(a.data, a.bytes, seed_of(step, i), compute);
    p.release(ws[i], compute);
    p.release(as[i], compute, /*dirty=*/true);
    EXPECT_EQ(sum_now(), w_sums[i]) << "W" << i << " in forward of step " << step;
  }
  void backward(int step, int i) {
    const device_span w = p.acquire(ws[i], compute);
    dev.checksum_async(w.data, w.bytes, slot.value, compute);
    p.release(ws[i], compute);
    EXPECT_EQ(sum_now(), w_sums[i]) << "W" << i << " in backward of step " << step;
    const device_span a = p.acquire(as[i], compute);
    dev.checksum_async(a.data, a.bytes, slot.value, compute);
    if (discard_after_read) {
      p.release(as[i], compute);
      p.discard(as[i]);
    } else {
      p.release_last_use(as[i], compute);
    }
    const auto expected = payload(a_bytes, seed_of(step, i));
    EXPECT_EQ(sum_now(), checksum(expected.data(), expected.size()))
        << "A" << i << " in backward of step " << step;
  }
  std::uint64_t step(int s) {
    p.synchronize();
    const std::uint64_t before = p.metrics().activation_write_back_bytes;
    const int n = static_cast<int>(ws.size());
    for (int i = 0; i < n; ++i) forward(s, i);
    for (int i = n; i-- > 0;) backward(s, i);
    p.synchronize();
    for (const auto a : as) {  // every activation dead, holding no HBM
      const tensor_info i = p.info(a);
      EXPECT_TRUE(i.dead) << i.name;
      EXPECT_EQ(i.where, residency::host) << i.name;
    }
    return p.metrics().activation_write_back_bytes - before;
  }
};

TEST_F(pager_activation_test, training_steps_write_activations_back_only_when_they_cannot_fit) {
  constexpr int layers = 4;
  constexpr std::size_t w_bytes = 100'003;  // 2 pages each: 8 in all
  constexpr std::size_t a_bytes = 60'000;   // 1 page each: 4 in all
  for (const bool checked : {false, true}) {
    SCOPED_TRACE(checked ? "checked" : "unchecked");
    {
      // 8 of the 12 pages: the activations (4) and two layers' weights fit.
      auto c = small_pager_config(8);
      c.checked = checked;
      pager p(*dev, c);
      training_loop t(p, *dev, compute, slot, layers, w_bytes, a_bytes);
      for (int s = 0; s < 4; ++s) EXPECT_EQ(t.step(s), 0u) << "step " << s;
      const auto m = p.metrics();
      EXPECT_EQ(m.activation_fresh_acquires, 4u * layers);
      EXPECT_EQ(m.activation_dead_releases, 4u * layers);
      EXPECT_EQ(m.write_back_bytes, 0u);
    }
    {
      // 5 pages: a weight and its activation fit, the four activations and a weight do not.
      auto c = small_pager_config(5);
      c.checked = checked;
      pager p(*dev, c);
      training_loop t(p, *dev, compute, slot, layers, w_bytes, a_bytes);
      for (int s = 0; s < 4; ++s) EXPECT_GT(t.step(s), 0u) << "step " << s;
      const auto m = p.metrics();
      EXPECT_EQ(m.activation_fresh_acquires, 4u * layers);
      EXPECT_EQ(m.write_back_bytes, m.activation_write_back_bytes);  // weights never
    }
  }
}

TEST_F(pager_activation_test, training_steps_that_discard_after_reading_keep_every_checksum) {
  constexpr int layers = 4;
  constexpr std::size_t w_bytes = 100'003;
  constexpr std::size_t a_bytes = 60'000;
  for (const std::size_t slabs : {std::size_t{8}, std::size_t{5}}) {
    SCOPED_TRACE(slabs);
    auto c = small_pager_config(slabs);
    c.checked = true;
    pager p(*dev, c);
    training_loop t(p, *dev, compute, slot, layers, w_bytes, a_bytes);
    t.discard_after_read = true;
    for (int s = 0; s < 4; ++s) {
      const std::uint64_t written = t.step(s);
      if (slabs == 8) {
        EXPECT_EQ(written, 0u) << "step " << s;  // room for every activation
      } else {
        EXPECT_GT(written, 0u) << "step " << s;  // evicted live: round trips
      }
    }
    const auto m = p.metrics();
    EXPECT_EQ(m.activation_fresh_acquires, 4u * layers);
    EXPECT_EQ(m.activation_discards, 4u * layers);
    EXPECT_EQ(m.activation_dead_releases, 0u);
    EXPECT_EQ(m.write_back_bytes, m.activation_write_back_bytes);
  }
}

}  // namespace
}  // namespace htp::test
