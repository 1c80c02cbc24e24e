// Verified page-ins (pager_config::verify_page_ins): a file-backed or compressed tensor whose file
// changes after registration fails its acquire with htp::corrupt_data naming the tensor and the
// file; the tensor stays on its source, every other tensor and the device keep working, and the
// same tensor acquires bit-exact once its bytes are restored. Files are changed with pwrite under
// the open descriptor, as another process would.
#include "pager_fixture.hpp"

#include <htp/codec.hpp>
#include <htp/tensor_file.hpp>
#include <htp/transfer_engine.hpp>

#include "common/synthetic_weights.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <functional>
#include <string>

namespace htp::test {
namespace {

/// A temporary file holding `parts` back to back, written and changed with pwrite; removed on
/// destruction.
struct temp_file {
  std::string path;
  std::vector<std::uint64_t> offsets;
  explicit temp_file(const std::vector<std::vector<std::uint8_t>>& parts) {
    char name[] = "/tmp/htp-verify-test-XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    path = name;
    std::uint64_t at = 0;
    for (const auto& p : parts) {
      offsets.push_back(at);
      write_at(fd, p.data(), p.size(), at);
      at += p.size();
    }
    close(fd);
  }
  ~temp_file() { std::remove(path.c_str()); }
  /// Writes `n` bytes at `offset` of the file (the open tensor_file sees them on its next read).
  void overwrite(const std::uint8_t* bytes, std::size_t n, std::uint64_t offset) const {
    const int fd = open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    write_at(fd, bytes, n, offset);
    close(fd);
  }
  /// Flips bit 3 of the byte at `offset`.
  void flip(std::uint64_t offset) const {
    const int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    std::uint8_t b = 0;
    ASSERT_EQ(pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
    b ^= 0x08;
    write_at(fd, &b, 1, offset);
    close(fd);
  }

 private:
  static void write_at(int fd, const std::uint8_t* p, std::size_t n, std::uint64_t offset) {
    ASSERT_EQ(pwrite(fd, p, n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  }
};

/// What `call` throws: "none", "corrupt_data: <message>", or "other: <message>".
std::string thrown(const std::function<void()>& call) {
  try {
    call();
    return "none";
  } catch (const corrupt_data& e) {
    return std::string("corrupt_data: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
}

/// Expects `call` to throw htp::corrupt_data whose message has each of `names`.
void expect_corrupt(const std::function<void()>& call, const std::vector<std::string>& names) {
  const std::string what = thrown(call);
  ASSERT_EQ(what.rfind("corrupt_data: ", 0), 0u) << what;
  for (const auto& n : names) EXPECT_NE(what.find(n), std::string::npos) << n << " in " << what;
}

using pager_verify = sim_pager_test;

TEST_F(pager_verify, a_changed_file_fails_the_acquire_and_nothing_else_until_it_is_restored) {
  // 16 KiB engine chunks: "a" is 4 chunks and a bit, "b" 3 and a bit.
  const std::vector<std::vector<std::uint8_t>> parts = {payload(70'001, 1), payload(50'000, 2)};
  temp_file tf(parts);
  auto file = tensor_file::open(tf.path);
  pager p(*dev, small_pager_config(4));
  const tensor_handle a = p.register_file_tensor("layer.3.w", parts[0].size(), file, 0);
  const tensor_handle b = p.register_file_tensor("layer.4.w", parts[1].size(), file, tf.offsets[1]);
  EXPECT_EQ(file->bytes_read(), parts[0].size() + parts[1].size()) << "read once, to checksum";
  tf.flip(tf.offsets[0] + (20 << 10));             // in chunk 1 of "a"
  for (int attempt = 0; attempt < 2; ++attempt) {  // fails the same way while the file is bad
    expect_corrupt([&] { (void)p.acquire(a, compute, /*wait=*/true); },
                   {"acquire('layer.3.w'", tf.path, "chunk 1 of request", "checksum"});
    EXPECT_EQ(p.info(a).where, residency::host) << "back on its file";
    EXPECT_EQ(p.metrics().hbm.used_bytes, 0u) << "its HBM freed";
  }
  EXPECT_EQ(p.metrics().corrupt_page_ins, 2u);
  EXPECT_EQ(p.metrics().failed_loads, 2u);
  EXPECT_EQ(device_checksum(p, *dev, b, compute, slot), checksum(parts[1].data(), parts[1].size()));
  EXPECT_NO_THROW(dev->synchronize_all());
  std::vector<std::uint8_t> read(parts[0].size());
  expect_corrupt([&] { p.copy_to_host(a, read.data()); },
                 {"copy_to_host('layer.3.w'", tf.path, "chunk 1 ", "registration"});
  tf.overwrite(parts[0].data() + (20 << 10), 1, 20 << 10);  // restored
  EXPECT_EQ(device_checksum(p, *dev, a, compute, slot), checksum(parts[0].data(), parts[0].size()));
  std::vector<std::uint8_t> back(parts[0].size());
  p.copy_to_host(a, back.data());
  EXPECT_EQ(back, parts[0]);
}

TEST_F(pager_verify, a_page_in_that_fails_after_acquire_returned_is_corrupt_data_at_release) {
  // Stream-ordered acquire (no wait), as an engine and htp.torch on cuda do: the acquire returns
  // before the check; the release that ends the kernels' use of the extent reports it, typed.
  const std::vector<std::vector<std::uint8_t>> parts = {payload(70'001, 4), payload(30'000, 5)};
  temp_file tf(parts);
  auto file = tensor_file::open(tf.path);
  pager p(*dev, small_pager_config(4));
  const tensor_handle a = p.register_file_tensor("layer.7.w", parts[0].size(), file, 0);
  const tensor_handle b = p.register_file_tensor("layer.8.w", parts[1].size(), file, tf.offsets[1]);
  tf.flip(tf.offsets[0] + (40 << 10));
  (void)p.acquire(a, compute);  // returns before the page-in is checked
  p.synchronize();              // the check has failed by now
  expect_corrupt([&] { p.release(a, compute); }, {"release('layer.7.w'", tf.path, "checksum"});
  EXPECT_EQ(p.info(a).pins, 0) << "the release took effect";
  EXPECT_EQ(p.info(a).where, residency::host);
  EXPECT_EQ(device_checksum(p, *dev, b, compute, slot), checksum(parts[1].data(), parts[1].size()));
  tf.overwrite(parts[0].data() + (40 << 10), 1, 40 << 10);  // restored: acquires bit-exact again
  EXPECT_EQ(device_checksum(p, *dev, a, compute, slot), checksum(parts[0].data(), parts[0].size()));
}

TEST_F(pager_verify, with_verification_off_the_file_is_trusted_and_not_read_at_registration) {
  const std::vector<std::vector<std::uint8_t>> parts = {payload(40'000, 3)};
  temp_file tf(parts);
  auto file = tensor_file::open(tf.path);
  pager_config c = small_pager_config(4);
  c.verify_page_ins = false;
  pager p(*dev, c);
  const tensor_handle a = p.register_file_tensor("w", parts[0].size(), file, 0);
  EXPECT_EQ(file->bytes_read(), 0u);
  tf.flip(100);
  std::vector<std::uint8_t> changed = parts[0];
  changed[100] ^= 0x08;
  EXPECT_EQ(device_checksum(p, *dev, a, compute, slot), checksum(changed.data(), changed.size()))
      << "the changed bytes arrive unchecked";
}

TEST_F(pager_verify, a_corrupted_prefetch_poisons_nothing_and_the_acquire_reports_it) {
  const std::vector<std::vector<std::uint8_t>> parts = {payload(60'000, 4), payload(30'000, 5)};
  temp_file tf(parts);
  auto file = tensor_file::open(tf.path);
  pager p(*dev, small_pager_config(4));
  const tensor_handle a = p.register_file_tensor("a", parts[0].size(), file, 0);
  const tensor_handle b = p.register_file_tensor("b", parts[1].size(), file, tf.offsets[1]);
  tf.flip(tf.offsets[0] + 5);  // chunk 0 of "a"
  // A prefetch that finished (and failed) before the acquire, then one the acquire may meet still
  // loading: either way the acquire reports the corruption, typed.
  p.prefetch(a);
  p.synchronize();
  EXPECT_EQ(p.info(a).where, residency::host);
  expect_corrupt([&] { (void)p.acquire(a, compute, true); }, {"acquire('a'", tf.path, "chunk 0"});
  p.set_schedule({a, b}, /*cyclic=*/true);  // prefetches "a" and "b" ahead of use
  expect_corrupt([&] { (void)p.acquire(a, compute, true); }, {"acquire('a'", tf.path});
  EXPECT_EQ(device_checksum(p, *dev, b, compute, slot), checksum(parts[1].data(), parts[1].size()));
  EXPECT_GT(p.metrics().failed_acquires, 0u);
  tf.overwrite(parts[0].data() + 5, 1, 5);
  p.set_schedule({}, false);
  p.synchronize();  // a prefetch of "a" still in flight from the changed file is accounted
  EXPECT_EQ(device_checksum(p, *dev, a, compute, slot), checksum(parts[0].data(), parts[0].size()));
  EXPECT_NO_THROW(dev->synchronize_all());
}

/// The chunk-frame sequence the pager keeps for `w` with small_pager_config's 16 KiB chunks.
std::vector<std::uint8_t> sequence_of(const std::vector<std::uint8_t>& w) {
  codec_options o;
  o.chunk_bytes = ((16 << 10) - 56) / 4 * 4;
  const auto frame = encode_weights(w.data(), w.size(), weight_format::bf16, o);
  return split_frame(parse_frame(frame.data(), frame.size()));
}

TEST_F(pager_verify, a_changed_companion_fails_the_decode_of_that_tensor_only) {
  const auto wa = synthetic::llama_mixture(30'000, weight_format::bf16, 6);  // 60 KB: 4 pieces
  const auto wb = synthetic::llama_mixture(20'000, weight_format::bf16, 7);
  const auto sa = sequence_of(wa);
  const auto sb = sequence_of(wb);
  temp_file tf({sa, sb});
  auto file = tensor_file::open(tf.path);
  pager p(*dev, small_pager_config(4));
  const tensor_handle a = p.register_compressed_file_tensor("experts.0", file, 0, sa.size());
  const tensor_handle b =
      p.register_compressed_file_tensor("experts.1", file, tf.offsets[1], sb.size());
  const std::size_t at = sa.size() / 2 + 3;  // coded bytes of a middle piece
  tf.flip(at);
  for (int attempt = 0; attempt < 2; ++attempt) {
    expect_corrupt([&] { (void)p.acquire(a, compute, true); },
                   {"acquire('experts.0'", tf.path, "piece", "checksum"});
    EXPECT_EQ(p.info(a).where, residency::host);
  }
  EXPECT_NO_THROW(dev->synchronize_all()) << "no sticky device error";
  EXPECT_EQ(device_checksum(p, *dev, b, compute, slot), checksum(wb.data(), wb.size()));
  tf.overwrite(sa.data() + at, 1, at);
  EXPECT_EQ(device_checksum(p, *dev, a, compute, slot), checksum(wa.data(), wa.size()));
  p.evict(a);
  EXPECT_EQ(device_checksum(p, *dev, a, compute, slot), checksum(wa.data(), wa.size()));
}

TEST_F(pager_verify, a_changed_host_copy_of_a_compressed_tensor_is_caught_too) {
  const auto w = synthetic::llama_mixture(25'000, weight_format::bf16, 8);
  auto seq = sequence_of(w);
  auto* lent = static_cast<std::uint8_t*>(dev->allocate(memory_kind::pinned_host, seq.size()));
  std::memcpy(lent, seq.data(), seq.size());
  {
    pager p(*dev, small_pager_config(4));
    p.add_host_region(lent, seq.size(), host_region_kind::pinned);
    const auto layout = std::make_shared<const coded_layout>(verify_chunk_frames(lent, seq.size()));
    const tensor_handle h = p.register_compressed_tensor_at("w", lent, layout);
    lent[seq.size() - 10] ^= 0x08;  // the last piece's coded bytes
    expect_corrupt([&] { (void)p.acquire(h, compute, true); }, {"acquire('w'", "host copy"});
    lent[seq.size() - 10] ^= 0x08;
    EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(w.data(), w.size()));
    p.unregister_tensor(h);
    p.remove_host_region(lent);
  }
  dev->deallocate(memory_kind::pinned_host, lent, seq.size());
}

TEST_F(pager_verify, the_engine_checks_given_chunk_checksums_and_refuses_a_wrong_count) {
  const std::vector<std::vector<std::uint8_t>> parts = {payload(40 << 10, 9)};
  temp_file tf(parts);
  auto file = tensor_file::open(tf.path);
  void* hbm = dev->allocate(memory_kind::device, 40 << 10);
  {
    transfer_engine eng(*dev, small_engine_config(hbm, 40 << 10));
    auto sums = std::make_shared<std::vector<std::uint64_t>>();
    for (std::size_t at = 0; at < parts[0].size(); at += 16 << 10)
      sums->push_back(checksum(parts[0].data() + at, std::min<std::size_t>(16 << 10, 40960 - at)));
    const auto good =
        eng.submit_from_file(hbm, file, 0, 40 << 10, transfer_priority::fault, {}, sums);
    EXPECT_NO_THROW(eng.wait(good));
    (*sums)[2] ^= 1;  // the last chunk's
    const auto bad =
        eng.submit_from_file(hbm, file, 0, 40 << 10, transfer_priority::fault, {}, sums);
    expect_corrupt([&] { eng.wait(bad); }, {"chunk 2 of request", tf.path, "offset 32768"});
    EXPECT_EQ(eng.status(bad), transfer_status::failed);
    sums->pop_back();
    EXPECT_THROW(
        (void)eng.submit_from_file(hbm, file, 0, 40 << 10, transfer_priority::fault, {}, sums),
        invalid_argument);
  }
  dev->deallocate(memory_kind::device, hbm, 40 << 10);
}

}  // namespace
}  // namespace htp::test
