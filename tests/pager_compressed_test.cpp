// Compressed weights: stored as a chunk-frame sequence in the host tier or a companion file,
// copied piece by piece into the engine's HBM staging ring and decoded into the tensor's extent.
// "Nothing lost": device checksums match the source after every decode round trip; the bytes the
// link carried are the sequence's bytes, counted by the pager and by the engine alike.
#include "pager_fixture.hpp"

#include <htp/codec.hpp>
#include <htp/tensor_file.hpp>
#include <htp/transfer_engine.hpp>

#include "common/synthetic_weights.hpp"

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>

namespace htp::test {
namespace {

/// The codec chunk the pager uses for small_pager_config's 16 KiB engine chunks.
constexpr std::size_t codec_chunk = ((16 << 10) - 56) / 4 * 4;

/// The chunk-frame sequence the pager stores for `w`.
std::vector<std::uint8_t> sequence_of(const std::vector<std::uint8_t>& w, weight_format f) {
  codec_options o;
  o.chunk_bytes = codec_chunk;
  const auto frame = encode_weights(w.data(), w.size(), f, o);
  return split_frame(parse_frame(frame.data(), frame.size()));
}

/// Llama-like bf16 weights of `bytes` bytes (an odd count keeps a raw tail byte).
std::vector<std::uint8_t> weights(std::size_t bytes, std::uint64_t seed) {
  auto w = synthetic::llama_mixture((bytes + 1) / 2, weight_format::bf16, seed);
  w.resize(bytes);
  return w;
}

struct temp_file {
  std::string path;
  explicit temp_file(const std::vector<std::uint8_t>& bytes) {
    char name[] = "/tmp/htp-compressed-test-XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path = name;
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  ~temp_file() { std::remove(path.c_str()); }
};

using pager_compressed = sim_pager_test;

TEST_F(pager_compressed, weights_round_trip_bit_exact_through_evictions_and_the_wire_is_counted) {
  // One piece, an odd length with a tail byte, and several pieces; 4 slabs of HBM cannot hold all.
  const std::vector<std::size_t> sizes = {8 << 10, 70'001, 130 << 10};
  std::vector<std::vector<std::uint8_t>> w;
  std::size_t logical = 0;
  std::size_t wire = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    w.push_back(weights(sizes[i], 10 + i));
    logical += sizes[i];
    wire += sequence_of(w.back(), weight_format::bf16).size();
  }
  pager p(*dev, small_pager_config(4));
  std::vector<tensor_handle> h;
  for (std::size_t i = 0; i < w.size(); ++i) {
    h.push_back(p.register_tensor("w" + std::to_string(i), w[i].size(), tensor_kind::weight,
                                  w[i].data(), weight_format::bf16));
  }
  p.reset_metrics();
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(device_checksum(p, *dev, h[i], compute, slot), checksum(w[i].data(), w[i].size()))
          << "round " << round << ", tensor " << i;
    }
  }
  p.synchronize();
  const pager_metrics m = p.metrics();
  EXPECT_EQ(m.compressed_tensors, 3u);
  EXPECT_EQ(m.compressed_bytes, logical);
  EXPECT_EQ(m.compressed_wire_bytes, wire);
  EXPECT_LT(m.compressed_wire_bytes, m.compressed_bytes);
  EXPECT_GE(m.page_ins, 6u) << "HBM holds at most two of them: evictions and page-ins each round";
  EXPECT_GT(m.evictions, 0u);
  // What the link carried: each page-in's wire bytes, the same in the pager and the engine.
  EXPECT_EQ(m.transfers.decode.wire_bytes, m.page_in_wire_bytes);
  EXPECT_EQ(m.transfers.decode.logical_bytes, m.page_in_bytes);
  EXPECT_EQ(m.transfers.h2d.bytes, m.page_in_wire_bytes);
  EXPECT_LT(m.page_in_wire_bytes, m.page_in_bytes);
  EXPECT_GT(m.transfers.decode.pieces, 0u);
  for (std::size_t i = 0; i < w.size(); ++i) {
    std::vector<std::uint8_t> back(w[i].size());
    p.copy_to_host(h[i], back.data());
    EXPECT_EQ(back, w[i]) << "copy_to_host decodes on the CPU, tensor " << i;
    EXPECT_EQ(p.info(h[i]).bytes, w[i].size());
  }
}

TEST_F(pager_compressed, incompressible_weights_are_stored_as_they_are) {
  const auto w = synthetic::uniform_bits(40 << 10, 3);
  pager p(*dev, small_pager_config(4));
  const tensor_handle h =
      p.register_tensor("noise", w.size(), tensor_kind::weight, w.data(), weight_format::bf16);
  EXPECT_EQ(p.metrics().compressed_tensors, 0u);
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(w.data(), w.size()));
}

TEST_F(pager_compressed, mutable_tensors_and_tensors_too_large_for_hbm_are_refused) {
  pager_config c = small_pager_config(2);
  c.on_oom = oom_policy::allow_degraded;
  pager p(*dev, c);
  const auto w = weights(8 << 10, 4);
  try {
    (void)p.register_tensor("kv", w.size(), tensor_kind::mutable_state, w.data(),
                            weight_format::bf16);
    ADD_FAILURE() << "a mutable tensor was compressed";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("only weights can be stored compressed"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      (void)p.register_tensor("huge", 3 * slab, tensor_kind::weight, nullptr, weight_format::bf16),
      invalid_argument)
      << "it could only ever be served degraded, which a compressed tensor cannot be";
  EXPECT_EQ(p.metrics().registered_tensors, 0u);
}

TEST_F(pager_compressed, degraded_mode_cannot_serve_a_compressed_tensor_so_acquire_throws) {
  pager_config c = small_pager_config(2);
  c.on_oom = oom_policy::allow_degraded;
  pager p(*dev, c);
  const tensor_handle big = p.register_tensor("pinned", 2 * slab, tensor_kind::weight);
  (void)p.acquire(big, compute, true);  // HBM is full of a pinned tensor
  const auto w = weights(8 << 10, 5);
  const tensor_handle h =
      p.register_tensor("w", w.size(), tensor_kind::weight, w.data(), weight_format::bf16);
  EXPECT_THROW((void)p.acquire(h, compute, true), out_of_memory);
  p.release(big, compute);
  compute.synchronize();
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(w.data(), w.size()))
      << "room again: decoded from the host tier";
}

TEST_F(pager_compressed, a_companion_file_round_trips_and_a_corrupt_one_is_refused) {
  const auto a = weights(50'003, 6);
  const auto b = weights(40 << 10, 7);
  auto sa = sequence_of(a, weight_format::bf16);
  const auto sb = sequence_of(b, weight_format::bf16);
  std::vector<std::uint8_t> bytes = sa;
  bytes.insert(bytes.end(), sb.begin(), sb.end());
  bytes[sa.size() + sb.size() / 2] ^= 0x10;  // a flipped bit in b's coded bytes
  temp_file tf(bytes);
  auto file = tensor_file::open(tf.path);
  pager p(*dev, small_pager_config(4));
  const tensor_handle ha = p.register_compressed_file_tensor("a", file, 0, sa.size());
  EXPECT_THROW((void)p.register_compressed_file_tensor("b", file, sa.size(), sb.size()),
               corrupt_data);
  EXPECT_EQ(p.metrics().registered_tensors, 1u) << "nothing left behind";
  EXPECT_EQ(p.info(ha).bytes, a.size());
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(device_checksum(p, *dev, ha, compute, slot), checksum(a.data(), a.size()));
    p.evict(ha);
  }
  std::vector<std::uint8_t> back(a.size());
  p.copy_to_host(ha, back.data());
  EXPECT_EQ(back, a);
  p.synchronize();
  EXPECT_EQ(p.metrics().transfers.decode.wire_bytes, 2 * sa.size());
}

TEST(pager_compressed_timing, a_timing_only_device_models_the_wire_size_and_the_decode_time) {
  sim_config sc;
  sc.timing_only = true;
  sc.device_memory_bytes = std::size_t{1} << 30;
  sc.pinned_memory_bytes = std::size_t{1} << 30;
  sc.decode_bytes_per_second = 1'000'000'000;  // 1 GB/s: 64 MiB decode in 67 ms
  auto dev = make_sim_device(sc);
  pager_config c;
  c.hbm_budget_bytes = std::size_t{256} << 20;
  c.host_budget_bytes = std::size_t{256} << 20;
  c.h2d.link_bytes_per_second = 100'000'000'000;
  c.h2d.unlimited = true;
  c.d2h = c.h2d;
  c.modelled_compression_ratio = 0.5;
  pager p(*dev, c);
  const std::size_t bytes = std::size_t{64} << 20;
  const tensor_handle h =
      p.register_tensor("w", bytes, tensor_kind::weight, nullptr, weight_format::bf16);
  stream compute(*dev);
  (void)p.acquire(h, compute, true);
  p.release(h, compute);
  p.synchronize();
  const pager_metrics m = p.metrics();
  const std::size_t chunk = c.chunk_bytes - 56;
  const std::size_t pieces = (bytes + chunk - 1) / chunk;
  EXPECT_EQ(m.compressed_wire_bytes, bytes / 2 + pieces * 56 + (bytes % chunk) % 2);
  EXPECT_EQ(m.page_in_wire_bytes, m.compressed_wire_bytes);
  EXPECT_EQ(m.transfers.decode.pieces, pieces);
  EXPECT_EQ(m.transfers.decode.logical_bytes, bytes);
  // 64 MiB at 1 GB/s of modelled decode: 67.1 ms, summed over the pieces.
  EXPECT_NEAR(static_cast<double>(m.transfers.decode.decode_ns), 67.1e6, 2e6);
}

TEST(pager_compressed_timing, the_copy_of_the_next_piece_overlaps_the_decode_of_this_one) {
  // Link at 1 GB/s, decode at 2 GB/s: 64 MiB of weights at ratio 0.5 take 33.6 ms on the link and
  // 33.6 ms to decode. In series that is 67.1 ms; pipelined, 33.6 ms plus one piece's 1 ms.
  sim_config sc;
  sc.timing_only = true;
  sc.device_memory_bytes = std::size_t{1} << 30;
  sc.pinned_memory_bytes = std::size_t{1} << 30;
  sc.h2d_bytes_per_second = 1'000'000'000;
  sc.decode_bytes_per_second = 2'000'000'000;
  auto dev = make_sim_device(sc);
  pager_config c;
  c.hbm_budget_bytes = std::size_t{256} << 20;
  c.host_budget_bytes = std::size_t{256} << 20;
  c.h2d.link_bytes_per_second = 1'000'000'000;
  c.h2d.unlimited = true;
  c.d2h = c.h2d;
  c.modelled_compression_ratio = 0.5;
  pager p(*dev, c);
  const tensor_handle h = p.register_tensor("w", std::size_t{64} << 20, tensor_kind::weight,
                                            nullptr, weight_format::bf16);
  stream compute(*dev);
  (void)p.acquire(h, compute, true);
  p.release(h, compute);
  p.synchronize();
  const latency_summary fault = p.metrics().transfers.classes[0].latency;
  ASSERT_EQ(fault.count, 1u);
  EXPECT_GT(static_cast<double>(fault.max_ns), 33e6);
  EXPECT_LT(static_cast<double>(fault.max_ns), 50e6) << "copies and decodes ran in series";
}

/// Engine level: a fault decode overtakes queued prefetch decodes after at most the chunks in
/// flight, as a copy does.
TEST_F(pager_compressed, a_fault_decode_overtakes_queued_prefetch_decodes) {
  constexpr std::size_t chunk = 16 << 10;
  const auto w = weights(40 << 10, 8);  // 3 pieces
  const auto seq = sequence_of(w, weight_format::bf16);
  auto layout = std::make_shared<const coded_layout>(verify_chunk_frames(seq.data(), seq.size()));
  ASSERT_EQ(layout->pieces.size(), 3u);
  const std::size_t n = 6;
  char* hbm = static_cast<char*>(dev->allocate(memory_kind::device, (n + 1) * w.size()));
  char* host = static_cast<char*>(dev->allocate(memory_kind::pinned_host, seq.size()));
  std::memcpy(host, seq.data(), seq.size());
  std::mutex mu;
  std::vector<transfer_chunk_info> order;
  transfer_config tc;
  tc.chunk_bytes = chunk;
  tc.h2d.link_bytes_per_second = 10'000'000'000;
  tc.h2d.unlimited = true;
  tc.d2h = tc.h2d;
  tc.device_memory = {{hbm, (n + 1) * w.size()}};
  tc.host_memory = {{host, seq.size()}};
  tc.on_chunk_issued = [&](const transfer_chunk_info& i) {
    std::lock_guard l(mu);
    order.push_back(i);
  };
  {
    transfer_engine eng(*dev, tc);
    eng.prepare_decode();
    gate g;
    g.hold(*dev, eng.prefetch_stream());
    std::vector<transfer_ticket> pre;
    for (std::size_t i = 0; i < n; ++i)
      pre.push_back(
          eng.submit_decode(hbm + i * w.size(), host, layout, transfer_priority::prefetch));
    const auto fault =
        eng.submit_decode(hbm + n * w.size(), host, layout, transfer_priority::fault);
    g.open();
    eng.wait(fault);
    eng.drain();
    for (std::size_t i = 0; i <= n; ++i)
      EXPECT_EQ(checksum(hbm + i * w.size(), w.size()), checksum(w.data(), w.size())) << i;
    const auto m =
        eng.metrics();  // (before taking `mu`: on_chunk_issued runs under the engine's lock)
    EXPECT_EQ(m.decode.wire_bytes, (n + 1) * seq.size());
    EXPECT_EQ(m.decode.logical_bytes, (n + 1) * w.size());
    EXPECT_EQ(m.h2d.bytes, m.decode.wire_bytes);
    std::lock_guard l(mu);
    ASSERT_EQ(order.size(), (n + 1) * 3);
    std::size_t first_fault = order.size();
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (order[i].request_id == fault.id && first_fault == order.size()) first_fault = i;
    }
    EXPECT_LE(first_fault, tc.max_in_flight_chunks) << "behind at most the chunks in flight";
    for (std::size_t i = first_fault; i < first_fault + 3; ++i)
      EXPECT_EQ(order[i].request_id, fault.id) << "the fault's pieces go together";
  }
  dev->deallocate(memory_kind::device, hbm, (n + 1) * w.size());
  dev->deallocate(memory_kind::pinned_host, host, seq.size());
}

/// Engine level: a queued decode request is cancelled like a copy (nothing written, streams that
/// wait on it released), and a raised one overtakes the prefetches queued before it.
TEST_F(pager_compressed, a_queued_decode_is_cancelled_or_raised_like_a_copy) {
  const auto w = weights(40 << 10, 9);
  const auto seq = sequence_of(w, weight_format::bf16);
  auto layout = std::make_shared<const coded_layout>(verify_chunk_frames(seq.data(), seq.size()));
  char* hbm = static_cast<char*>(dev->allocate(memory_kind::device, 4 * w.size()));
  char* host = static_cast<char*>(dev->allocate(memory_kind::pinned_host, seq.size()));
  std::memcpy(host, seq.data(), seq.size());
  std::memset(hbm, 0, 4 * w.size());
  transfer_config tc;
  tc.chunk_bytes = 16 << 10;
  tc.max_in_flight_chunks = 1;
  tc.h2d.link_bytes_per_second = 10'000'000'000;
  tc.h2d.unlimited = true;
  tc.d2h = tc.h2d;
  tc.device_memory = {{hbm, 4 * w.size()}};
  tc.host_memory = {{host, seq.size()}};
  std::mutex mu;
  std::vector<std::uint64_t> order;  // request id of each piece, as issued
  tc.on_chunk_issued = [&](const transfer_chunk_info& i) {
    std::lock_guard l(mu);
    order.push_back(i.request_id);
  };
  {
    transfer_engine eng(*dev, tc);
    gate g;
    g.hold(*dev, eng.prefetch_stream());
    const auto first = eng.submit_decode(hbm, host, layout, transfer_priority::prefetch);
    const auto second =
        eng.submit_decode(hbm + w.size(), host, layout, transfer_priority::prefetch);
    const auto cancelled =
        eng.submit_decode(hbm + 2 * w.size(), host, layout, transfer_priority::prefetch);
    const auto raised =
        eng.submit_decode(hbm + 3 * w.size(), host, layout, transfer_priority::prefetch);
    EXPECT_TRUE(eng.cancel(cancelled));
    EXPECT_EQ(eng.status(cancelled), transfer_status::cancelled);
    EXPECT_TRUE(eng.raise_priority(raised, transfer_priority::fault));
    stream waiter(*dev);
    eng.wait_on(cancelled, waiter);  // released at once: nothing to wait for
    waiter.synchronize();
    g.open();
    eng.drain();
    {
      std::lock_guard l(mu);
      const auto at = [&](transfer_ticket t) {
        return std::find(order.begin(), order.end(), t.id) - order.begin();
      };
      EXPECT_LT(at(raised), at(second)) << "the raised decode went ahead of an older prefetch";
      EXPECT_EQ(order.size(), 9u) << "three requests of three pieces; the cancelled one: none";
    }
    for (std::size_t i : {0u, 1u, 3u})
      EXPECT_EQ(checksum(hbm + i * w.size(), w.size()), checksum(w.data(), w.size())) << i;
    const std::vector<char> zeros(w.size(), 0);
    EXPECT_EQ(std::memcmp(hbm + 2 * w.size(), zeros.data(), w.size()), 0) << "cancelled: untouched";
    EXPECT_EQ(eng.status(first), transfer_status::complete);
    EXPECT_EQ(eng.metrics().decode.logical_bytes, 3 * w.size());
  }
  dev->deallocate(memory_kind::device, hbm, 4 * w.size());
  dev->deallocate(memory_kind::pinned_host, host, seq.size());
}

}  // namespace
}  // namespace htp::test
