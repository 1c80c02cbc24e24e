// File-backed tensors: weights with no host copy, read from their file on each page-in through
// the transfer engine's bounce buffers. Checked byte for byte (device checksums against the
// file's payloads) across evictions, with errors named and nothing left behind.
#include "pager_fixture.hpp"

#include <htp/tensor_file.hpp>
#include <htp/transfer_engine.hpp>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <string>

namespace htp::test {
namespace {

/// A temporary file holding `parts` back to back; removed on destruction.
struct temp_file {
  std::string path;
  std::vector<std::uint64_t> offsets;
  explicit temp_file(const std::vector<std::vector<unsigned char>>& parts) {
    char name[] = "/tmp/htp-file-test-XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path = name;
    std::ofstream out(path, std::ios::binary);
    std::uint64_t at = 0;
    for (const auto& p : parts) {
      offsets.push_back(at);
      out.write(reinterpret_cast<const char*>(p.data()), static_cast<std::streamsize>(p.size()));
      at += p.size();
    }
  }
  ~temp_file() { std::remove(path.c_str()); }
};

using pager_file = sim_pager_test;

TEST_F(pager_file, weights_read_from_their_file_survive_evictions_and_take_no_host_memory) {
  // Sizes across chunk (16 KiB) and page boundaries; 4 slabs of HBM cannot hold all three.
  const std::vector<std::vector<unsigned char>> parts = {payload(100 << 10, 1), payload(70'001, 2),
                                                         payload(130 << 10, 3)};
  temp_file tf(parts);
  auto file = tensor_file::open(tf.path);
  pager p(*dev, small_pager_config(4));
  std::vector<tensor_handle> h;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    h.push_back(
        p.register_file_tensor("w" + std::to_string(i), parts[i].size(), file, tf.offsets[i]));
  }
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < parts.size(); ++i) {
      EXPECT_EQ(device_checksum(p, *dev, h[i], compute, slot),
                checksum(parts[i].data(), parts[i].size()))
          << "round " << round << ", tensor " << i;
    }
  }
  const pager_metrics m = p.metrics();
  EXPECT_EQ(m.file_backed_tensors, 3u);
  EXPECT_EQ(m.file_backed_bytes, parts[0].size() + parts[1].size() + parts[2].size());
  EXPECT_GT(m.evictions, 0u);
  EXPECT_EQ(m.write_backs, 0u) << "weights are dropped, never written back";
  EXPECT_EQ(m.host.used_bytes, 0u) << "no host copy";
  // Every page-in read the file, and registration once more (verify_page_ins' checksums).
  EXPECT_EQ(file->bytes_read(), m.page_in_bytes + m.file_backed_bytes)
      << "every page-in read the file, nothing more";
  std::vector<unsigned char> back(parts[1].size());
  p.copy_to_host(h[1], back.data());
  EXPECT_EQ(back, parts[1]);
  for (tensor_handle t : h) p.unregister_tensor(t);
  EXPECT_EQ(p.metrics().file_backed_tensors, 0u);
}

TEST_F(pager_file, a_failed_read_fails_the_page_in_with_the_reason_and_a_later_one_succeeds) {
  const std::vector<std::vector<unsigned char>> parts = {payload(64 << 10, 7)};
  temp_file tf(parts);
  auto file = tensor_file::open(tf.path);
  pager p(*dev, small_pager_config(4));
  const tensor_handle h = p.register_file_tensor("w", parts[0].size(), file, 0);
  ASSERT_EQ(truncate(tf.path.c_str(), 1000), 0);  // the file shrinks under the open descriptor
  try {
    (void)p.acquire(h, compute, /*wait=*/true);
    FAIL() << "acquire succeeded on a truncated file";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find("reading the file failed"), std::string::npos) << e.what();
    EXPECT_EQ(e.path(), tf.path);
  }
  EXPECT_EQ(p.info(h).where, residency::host);
  {
    std::ofstream out(tf.path, std::ios::binary | std::ios::trunc);  // restored
    out.write(reinterpret_cast<const char*>(parts[0].data()),
              static_cast<std::streamsize>(parts[0].size()));
  }
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(parts[0].data(), parts[0].size()));
}

TEST_F(pager_file, a_truncated_file_is_the_same_io_error_from_acquire_and_from_copy_to_host) {
  const std::vector<std::vector<unsigned char>> parts = {payload(64 << 10, 9)};
  temp_file tf(parts);
  auto file = tensor_file::open(tf.path);
  pager p(*dev, small_pager_config(4));
  const tensor_handle h = p.register_file_tensor("w", parts[0].size(), file, 0);
  ASSERT_EQ(truncate(tf.path.c_str(), 1000), 0);
  // The type each call throws; "none" if it returned, "other" for anything not io_error.
  const auto thrown = [&](const auto& call) -> std::string {
    try {
      call();
      return "none";
    } catch (const io_error& e) {
      EXPECT_EQ(e.path(), tf.path) << e.what();
      EXPECT_NE(std::string(e.what()).find("ended early"), std::string::npos) << e.what();
      return "io_error";
    } catch (const std::exception& e) {
      return std::string("other: ") + e.what();
    }
  };
  EXPECT_EQ(thrown([&] { (void)p.acquire(h, compute, /*wait=*/true); }), "io_error");
  std::vector<unsigned char> back(parts[0].size());
  EXPECT_EQ(thrown([&] { p.copy_to_host(h, back.data()); }), "io_error");
  // Nothing held or lost: the tensor is back on its file, and reads it once the file is whole.
  EXPECT_EQ(p.info(h).where, residency::host);
  EXPECT_EQ(p.metrics().hbm.used_bytes, 0u);
  {
    std::ofstream out(tf.path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(parts[0].data()),
              static_cast<std::streamsize>(parts[0].size()));
  }
  p.copy_to_host(h, back.data());
  EXPECT_EQ(back, parts[0]);
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(parts[0].data(), parts[0].size()));
}

TEST_F(pager_file, bad_file_tensors_are_refused_naming_the_problem) {
  const std::vector<std::vector<unsigned char>> parts = {payload(8 << 10, 1)};
  temp_file tf(parts);
  auto file = tensor_file::open(tf.path);
  pager p(*dev, small_pager_config(2));
  auto expect_bad = [&](auto call, const char* what) {
    try {
      call();
      FAIL() << "accepted; expected a complaint about " << what;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_bad([&] { p.register_file_tensor("n", 10, nullptr, 0); }, "null file");
  expect_bad([&] { p.register_file_tensor("past", 8 << 10, file, 1); }, "past the end");
  expect_bad(
      [&] {
        p.register_file_tensor("big", 1 << 20, tensor_file::modelled("m", 1 << 20, 1'000'000), 0);
      },
      "larger than the largest HBM extent");
  expect_bad([&] { (void)tensor_file::open("/nonexistent/htp-weights.bin"); },
             "/nonexistent/htp-weights.bin");
  expect_bad(
      [&] {
        p.register_file_tensor("m", 8 << 10, tensor_file::modelled("m", 8 << 10, 1'000'000'000), 0);
      },
      "modelled file");
  const tensor_handle h = p.register_file_tensor("w", 8 << 10, file, 0);
  (void)p.acquire(h, compute, true);
  expect_bad([&] { p.release(h, compute, /*dirty=*/true); }, "read-only");
  p.release(h, compute);
  sim_config tc;
  tc.timing_only = true;
  auto timing = make_sim_device(tc);
  pager tp(*timing, small_pager_config(2));
  expect_bad([&] { tp.register_file_tensor("real", 8 << 10, file, 0); }, "timing-only");
  EXPECT_EQ(p.metrics().registered_tensors, 1u) << "nothing left behind by the refusals";
}

TEST_F(pager_file, degraded_mode_cannot_serve_a_file_tensor_so_its_acquire_throws_out_of_memory) {
  pager_config c = small_pager_config(2);
  c.on_oom = oom_policy::allow_degraded;
  pager p(*dev, c);
  const tensor_handle big = p.register_tensor("pinned", 2 * slab, tensor_kind::weight);
  (void)p.acquire(big, compute, true);  // HBM is full of a pinned tensor
  const std::vector<std::vector<unsigned char>> parts = {payload(8 << 10, 5)};
  temp_file tf(parts);
  const tensor_handle f = p.register_file_tensor("w", 8 << 10, tensor_file::open(tf.path), 0);
  EXPECT_THROW((void)p.acquire(f, compute, true), out_of_memory);
  p.release(big, compute);
  compute.synchronize();
  EXPECT_EQ(device_checksum(p, *dev, f, compute, slot), checksum(parts[0].data(), parts[0].size()))
      << "room again: read from the file";
}

TEST_F(pager_file, the_engine_reports_a_failed_read_as_an_io_error_naming_the_file) {
  const std::vector<std::vector<unsigned char>> parts = {payload(64 << 10, 11)};
  temp_file tf(parts);
  auto file = tensor_file::open(tf.path);
  void* hbm = dev->allocate(memory_kind::device, 64 << 10);
  {
    transfer_engine eng(*dev, small_engine_config(hbm, 64 << 10));
    ASSERT_EQ(truncate(tf.path.c_str(), 20 << 10), 0);  // chunk 1 ends early
    const auto t = eng.submit_from_file(hbm, file, 0, 64 << 10, transfer_priority::fault);
    try {
      eng.wait(t);
      ADD_FAILURE() << "a read past the end succeeded";
    } catch (const io_error& e) {
      EXPECT_EQ(e.path(), tf.path);
      EXPECT_NE(std::string(e.what()).find("chunk 1 of request"), std::string::npos) << e.what();
    }
    EXPECT_EQ(eng.status(t), transfer_status::failed);
  }
  dev->deallocate(memory_kind::device, hbm, 64 << 10);
}

}  // namespace
}  // namespace htp::test
