// The pager end to end on each backend: one typed suite, instantiated for sim (runs in CI) and
// cuda (skips without a GPU; scripts/gpu-check.sh runs it on one, where a skip is a failure).
// Every byte a kernel reads is checked on the device, and every tensor's bytes after the run.
#include "device_fixture.hpp"
#include "pager_fixture.hpp"

#include <htp/checksum.hpp>
#include <htp/tensor_file.hpp>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <vector>

namespace htp::test {
namespace {

template <typename B>
using pager_backend = device_test<B>;
TYPED_TEST_SUITE(pager_backend, backends, backend_names);

// A cyclic sweep of weights of unequal sizes through an HBM budget a third of their size (Belady,
// prefetch, evictions fenced by release events), with KV-like mutable tensors written on the
// device and released dirty (write-backs), a compaction, and every byte checked.
TYPED_TEST(pager_backend, a_sweep_larger_than_hbm_keeps_every_byte) {
  device& d = *this->dev;
  auto c = small_pager_config(12, 256);
  pager p(d, c);
  stream compute(d);
  checksum_slot slot(d);
  std::vector<tensor_handle> weights;
  std::vector<std::uint64_t> sums;
  std::size_t total = 0;
  for (int i = 0; i < 12; ++i) {
    const std::size_t bytes = (1 + i % 4) * slab + 4096 * static_cast<std::size_t>(i);
    const auto data = payload(bytes, 100 + static_cast<std::uint64_t>(i));
    weights.push_back(
        p.register_tensor("w" + std::to_string(i), bytes, tensor_kind::weight, data.data()));
    sums.push_back(checksum(data.data(), bytes));
    total += bytes;
  }
  ASSERT_GT(total, 2 * c.hbm_budget_bytes);
  std::vector<tensor_handle> kv;
  for (int i = 0; i < 4; ++i)
    kv.push_back(p.register_tensor("kv" + std::to_string(i), slab, tensor_kind::mutable_state));
  p.set_schedule(weights, /*cyclic=*/true);
  std::uint64_t mismatches = 0;
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < weights.size(); ++i) {
      const device_span s = p.acquire(weights[i], compute);
      d.checksum_async(s.data, s.bytes, slot.value, compute);
      p.release(weights[i], compute);
      compute.synchronize();
      if (*slot.value != sums[i]) ++mismatches;
      if (i % 3 == 0) {  // a KV block written by a "kernel" on the device
        const auto& h = kv[(i / 3) % kv.size()];
        const device_span k = p.acquire(h, compute);
        d.fill_pattern_async(k.data, k.bytes, 1000 + static_cast<std::uint64_t>(step * 100 + i),
                             compute);
        p.release(h, compute, /*dirty=*/true);
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << "a kernel read bytes that were not its tensor's";
  p.compact();
  p.synchronize();
  // The authoritative copies, wherever they are, hold exactly what was written last.
  std::vector<unsigned char> back;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    back.resize(p.info(weights[i]).bytes);
    p.copy_to_host(weights[i], back.data());
    EXPECT_EQ(checksum(back.data(), back.size()), sums[i]) << "weight " << i;
  }
  for (std::size_t b = 0; b < kv.size(); ++b) {
    // The last step that wrote block b: step 2, i = 3 * b' with (i / 3) % 4 == b.
    int last_i = -1;
    for (int i = 0; i < 12; i += 3) {
      if ((i / 3) % 4 == static_cast<int>(b)) last_i = i;
    }
    ASSERT_GE(last_i, 0);
    std::vector<unsigned char> expect(slab);
    fill_pattern(expect.data(), expect.size(), 1000 + static_cast<std::uint64_t>(200 + last_i));
    back.resize(slab);
    p.copy_to_host(kv[b], back.data());
    EXPECT_EQ(checksum(back.data(), back.size()), checksum(expect.data(), expect.size()))
        << "kv " << b;
  }
  const auto m = p.metrics();
  EXPECT_GT(m.evictions, 0u);
  EXPECT_GT(m.page_ins, weights.size());
  EXPECT_EQ(m.failed_loads, 0u);
}

// File-backed weights (no host copy): read through the engine's pinned bounce buffers on every
// page-in, in chunks, and checked on the device across evictions.
// A graph cannot replay what a dynamic acquire decides on the host: acquire and release on a
// capturing stream are refused with a typed error naming the static plan, before anything changes
// (the capture is not invalidated; the tensor stays unpinned).
TYPED_TEST(pager_backend, acquire_on_a_capturing_stream_is_refused_and_names_the_static_plan) {
  device& d = *this->dev;
  pager p(d, small_pager_config(4, 256));
  const auto data = payload(slab, 7);
  const tensor_handle w = p.register_tensor("w", slab, tensor_kind::weight, data.data());
  stream compute(d);
  d.begin_capture(compute);
  try {
    p.acquire(w, compute);
    ADD_FAILURE() << "acquire on a capturing stream was accepted";
  } catch (const logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("static"), std::string::npos) << e.what();
  }
  EXPECT_THROW(p.release(w, compute), logic_error);
  graph g(d, d.end_capture(compute));                          // still a valid (empty) capture
  const device_span s = p.acquire(w, compute, /*wait=*/true);  // and the pager unchanged
  EXPECT_EQ(s.bytes, slab);
  p.release(w, compute);
  compute.synchronize();
}

TYPED_TEST(pager_backend, file_backed_weights_page_in_from_their_file) {
  device& d = *this->dev;
  char name[] = "/tmp/htp-backend-file-XXXXXX";
  const int fd = mkstemp(name);
  ASSERT_GE(fd, 0);
  close(fd);
  std::vector<std::vector<unsigned char>> parts;
  {
    std::ofstream out(name, std::ios::binary);
    for (int i = 0; i < 6; ++i) {
      parts.push_back(payload(slab + 4096 * static_cast<std::size_t>(i) + 7,
                              300 + static_cast<std::uint64_t>(i)));
      out.write(reinterpret_cast<const char*>(parts.back().data()),
                static_cast<std::streamsize>(parts.back().size()));
    }
  }
  auto file = tensor_file::open(name);
  std::remove(name);  // the open descriptor keeps it readable
  pager p(d, small_pager_config(4, 16));
  stream compute(d);
  checksum_slot slot(d);
  std::vector<tensor_handle> h;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    h.push_back(p.register_file_tensor("f" + std::to_string(i), parts[i].size(), file, at));
    at += parts[i].size();
  }
  std::uint64_t mismatches = 0;
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < h.size(); ++i) {
      if (device_checksum(p, d, h[i], compute, slot) != checksum(parts[i].data(), parts[i].size()))
        ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0u);
  const auto m = p.metrics();
  EXPECT_GT(m.evictions, 0u);
  EXPECT_EQ(m.host.used_bytes, 0u);
  // Every page-in read the file, and registration read each tensor once for its checksums
  // (pager_config::verify_page_ins, on by default).
  EXPECT_EQ(file->bytes_read(), m.page_in_bytes + m.file_backed_bytes);
}

}  // namespace
}  // namespace htp::test
