// The device conformance suite, part two: stream capture and graph replay (device.hpp, "capture
// and replay") and verify_checksum_async, asserted of every backend.
#include "deadline.hpp"
#include "device_fixture.hpp"

#include <htp/checksum.hpp>
#include <htp/error.hpp>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <vector>

namespace htp::test {
namespace {

template <typename B>
using device_capture = device_test<B>;
TYPED_TEST_SUITE(device_capture, backends, backend_names);

/// The two verify counters, read by the host once the stream has passed them.
struct counts {
  std::uint32_t checked, mismatched;
  friend bool operator==(counts a, counts b) {
    return a.checked == b.checked && a.mismatched == b.mismatched;
  }
};
std::ostream& operator<<(std::ostream& os, counts c) {
  return os << "{" << c.checked << ", " << c.mismatched << "}";
}
counts read(const buffer& counters) {
  const auto* w = static_cast<const std::uint32_t*>(counters.ptr);
  return {__atomic_load_n(&w[0], __ATOMIC_ACQUIRE), __atomic_load_n(&w[1], __ATOMIC_ACQUIRE)};
}

bool mentions(const std::string& what, const std::string& word) {
  std::string a = what, b = word;
  for (auto* s : {&a, &b})
    for (auto& c : *s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return a.find(b) != std::string::npos;
}

/// Ends a capture whose outcome a test does not assert (a graph, or htp::logic_error when the
/// backend invalidated it); either way no stream is capturing after.
void end_either_way(device& d, stream_ref s) {
  try {
    graph g(d, d.end_capture(s));
  } catch (const logic_error&) {
  }
}

// The step the pager replays: the origin forks a copy stream, which moves payloads from pinned
// host memory to the device; the origin joins it and verifies each payload. Captured once,
// replayed 100 times back to back with no host call between launches.
TYPED_TEST(device_capture, fork_join_step_replays_100_times_without_host_work) {
  auto& d = *this->dev;
  stream s(d), copy(d);
  event forked(d), joined(d);
  const std::vector<std::size_t> sizes = {std::size_t{64} << 10, 4099, std::size_t{1} << 20};
  std::size_t total = 0;
  for (auto n : sizes) total += n;
  buffer host(d, memory_kind::pinned_host, total), dmem(d, memory_kind::device, total);
  buffer counters(d, memory_kind::pinned_host, 2 * sizeof(std::uint32_t));
  std::memset(counters.ptr, 0, counters.bytes);
  std::vector<std::uint64_t> expected;
  std::size_t off = 0;
  for (std::size_t i = 0; i < sizes.size(); off += sizes[i], ++i) {
    fill_pattern(host.at(off), sizes[i], 100 + i);
    expected.push_back(checksum(host.at(off), sizes[i]));
  }
  auto* words = static_cast<std::uint32_t*>(counters.ptr);

  d.begin_capture(s);
  EXPECT_TRUE(d.is_capturing(s));
  EXPECT_FALSE(d.is_capturing(copy));
  d.record(forked, s);
  d.wait(forked, copy);  // the copy stream joins the capture
  EXPECT_TRUE(d.is_capturing(copy));
  off = 0;
  for (std::size_t i = 0; i < sizes.size(); off += sizes[i], ++i)
    d.copy_async(dmem.at(off), host.at(off), sizes[i], copy_direction::host_to_device, copy);
  d.record(joined, copy);
  d.wait(joined, s);  // joined back
  off = 0;
  for (std::size_t i = 0; i < sizes.size(); off += sizes[i], ++i)
    d.verify_checksum_async(dmem.at(off), sizes[i], expected[i], words, s);
  graph g = graph::end_capture(d, s);
  ASSERT_TRUE(g);
  EXPECT_FALSE(d.is_capturing(s));
  EXPECT_FALSE(d.is_capturing(copy));
  s.synchronize();
  EXPECT_EQ(read(counters), (counts{0, 0})) << "captured work ran during the capture";

  constexpr std::uint32_t replays = 100;
  for (std::uint32_t r = 0; r < replays; ++r) g.launch(s);
  s.synchronize();
  const auto k = static_cast<std::uint32_t>(sizes.size());
  EXPECT_EQ(read(counters), (counts{replays * k, 0}));

  // Negative control: the host bytes of the first payload change; every replay now counts it.
  fill_pattern(host.at(0), sizes[0], 999);
  for (std::uint32_t r = 0; r < 10; ++r) g.launch(s);
  s.synchronize();
  EXPECT_EQ(read(counters), (counts{(replays + 10) * k, 10}));
}

TYPED_TEST(device_capture, unjoined_capture_is_refused_and_leaves_both_streams_usable) {
  auto& d = *this->dev;
  stream s(d), copy(d);
  event forked(d);
  const std::size_t n = 8192;
  buffer host(d, memory_kind::pinned_host, n), dmem(d, memory_kind::device, n);
  buffer result(d, memory_kind::pinned_host, sizeof(std::uint64_t));
  fill_pattern(host.ptr, n, 5);
  d.begin_capture(s);
  d.record(forked, s);
  d.wait(forked, copy);
  d.copy_async(dmem.ptr, host.ptr, n, copy_direction::host_to_device, copy);  // never joined
  try {
    d.end_capture(s);
    FAIL() << "an unjoined capture was instantiated";
  } catch (const logic_error& e) {
    EXPECT_TRUE(mentions(e.what(), "unjoined")) << e.what();
  }
  EXPECT_FALSE(d.is_capturing(s));
  EXPECT_FALSE(d.is_capturing(copy));
  // Both streams run work again, and a new capture on the origin works.
  d.copy_async(dmem.ptr, host.ptr, n, copy_direction::host_to_device, copy);
  copy.synchronize();
  d.checksum_async(dmem.ptr, n, static_cast<std::uint64_t*>(result.ptr), s);
  s.synchronize();
  EXPECT_EQ(*static_cast<std::uint64_t*>(result.ptr), checksum(host.ptr, n));
  d.begin_capture(s);
  d.fill_pattern_async(dmem.ptr, n, 6, s);
  graph g = graph::end_capture(d, s);
  g.launch(s);
  d.checksum_async(dmem.ptr, n, static_cast<std::uint64_t*>(result.ptr), s);
  s.synchronize();
  std::vector<unsigned char> want(n);
  fill_pattern(want.data(), n, 6);
  EXPECT_EQ(*static_cast<std::uint64_t*>(result.ptr), checksum(want.data(), n));
}

TYPED_TEST(device_capture, nested_begin_capture_is_refused) {
  auto& d = *this->dev;
  stream s(d), other(d);
  event forked(d);
  d.begin_capture(s);
  EXPECT_THROW(d.begin_capture(s), logic_error);
  d.record(forked, s);
  d.wait(forked, other);
  EXPECT_THROW(d.begin_capture(other), logic_error);  // a joined stream is capturing too
  end_either_way(d, s);
  EXPECT_FALSE(d.is_capturing(s));
  EXPECT_FALSE(d.is_capturing(other));
  s.synchronize();
  other.synchronize();
}

TYPED_TEST(device_capture, synchronize_of_a_capturing_stream_is_refused_and_invalidates) {
  auto& d = *this->dev;
  stream s(d);
  buffer dmem(d, memory_kind::device, 4096);
  d.begin_capture(s);
  d.fill_pattern_async(dmem.ptr, 4096, 1, s);
  EXPECT_THROW(d.synchronize(s), logic_error);
  EXPECT_THROW(d.end_capture(s), logic_error);  // invalidated, as CUDA does
  EXPECT_FALSE(d.is_capturing(s));
  d.fill_pattern_async(dmem.ptr, 4096, 1, s);
  s.synchronize();
}

TYPED_TEST(device_capture, allocation_on_the_capturing_thread_is_refused_and_invalidates) {
  auto& d = *this->dev;
  stream s(d);
  buffer dmem(d, memory_kind::device, 4096);
  d.begin_capture(s);
  d.fill_pattern_async(dmem.ptr, 4096, 1, s);
  EXPECT_THROW(d.allocate(memory_kind::device, 4096), logic_error);
  EXPECT_THROW(d.end_capture(s), logic_error);
  EXPECT_FALSE(d.is_capturing(s));
}

TYPED_TEST(device_capture, end_capture_from_another_thread_is_refused) {
  auto& d = *this->dev;
  stream s(d);
  buffer dmem(d, memory_kind::device, 4096);
  d.begin_capture(s);
  d.fill_pattern_async(dmem.ptr, 4096, 1, s);
  auto other = std::async(std::launch::async, [&] {
    try {
      graph g(d, d.end_capture(s));
      return false;
    } catch (const logic_error&) {
      return true;
    }
  });
  EXPECT_TRUE(get_or_die(other, "end_capture on another thread")) << "it was not refused";
  end_either_way(d, s);
  EXPECT_FALSE(d.is_capturing(s));
}

TYPED_TEST(device_capture, waiting_on_an_event_recorded_outside_the_capture_is_refused) {
  auto& d = *this->dev;
  stream s(d), other(d);
  event outside(d);
  buffer dmem(d, memory_kind::device, 4096);
  d.fill_pattern_async(dmem.ptr, 4096, 1, other);
  outside.record(other);
  outside.synchronize();
  d.begin_capture(s);
  EXPECT_THROW(d.wait(outside, s), logic_error);  // CUDA: cudaErrorStreamCaptureIsolation
  EXPECT_THROW(d.end_capture(s), logic_error);
  EXPECT_FALSE(d.is_capturing(s));
  d.wait(outside, s);  // outside a capture it is an ordinary wait
  s.synchronize();
}

TYPED_TEST(device_capture, query_of_an_event_recorded_in_the_capture_is_refused) {
  auto& d = *this->dev;
  stream s(d);
  event e(d);
  buffer dmem(d, memory_kind::device, 4096);
  d.begin_capture(s);
  d.fill_pattern_async(dmem.ptr, 4096, 1, s);
  e.record(s);
  EXPECT_THROW(e.query(), logic_error);  // CUDA: cudaErrorCapturedEvent
  end_either_way(d, s);
  EXPECT_FALSE(d.is_capturing(s));
}

TYPED_TEST(device_capture, pageable_copy_on_a_capturing_stream_is_refused_and_capture_goes_on) {
  auto& d = *this->dev;
  stream s(d);
  const std::size_t n = 4096;
  buffer dmem(d, memory_kind::device, n), host(d, memory_kind::pinned_host, n);
  std::vector<unsigned char> pageable(n, 7);
  d.begin_capture(s);
  EXPECT_THROW(d.copy_async(dmem.ptr, pageable.data(), n, copy_direction::host_to_device, s),
               invalid_argument);
  EXPECT_THROW(d.copy_async(pageable.data(), dmem.ptr, n, copy_direction::device_to_host, s),
               invalid_argument);
  d.fill_pattern_async(dmem.ptr, n, 3, s);
  d.copy_async(host.ptr, dmem.ptr, n, copy_direction::device_to_host, s);  // pinned: captured
  graph g = graph::end_capture(d, s);  // the refusals did not invalidate it
  g.launch(s);
  s.synchronize();
  std::vector<unsigned char> want(n);
  fill_pattern(want.data(), n, 3);
  EXPECT_EQ(checksum(host.ptr, n), checksum(want.data(), n));
}

// Work queued on the launch stream before launch_graph runs before the replay; work after it
// waits for the whole replay.
TYPED_TEST(device_capture, replay_is_ordered_around_the_work_of_its_stream) {
  auto& d = *this->dev;
  stream capture_on(d), s(d);
  const std::size_t n = std::size_t{1} << 20;
  buffer a(d, memory_kind::device, n), back(d, memory_kind::pinned_host, n);
  buffer result(d, memory_kind::pinned_host, sizeof(std::uint64_t));
  auto* sum = static_cast<std::uint64_t*>(result.ptr);
  d.begin_capture(capture_on);
  d.checksum_async(a.ptr, n, sum, capture_on);
  graph g = graph::end_capture(d, capture_on);
  for (std::uint64_t seed : {11u, 12u, 13u}) {
    d.fill_pattern_async(a.ptr, n, seed, s);  // before the replay
    g.launch(s);
    d.fill_pattern_async(a.ptr, n, seed + 100, s);  // after it
    d.copy_async(back.ptr, a.ptr, n, copy_direction::device_to_host, s);
    s.synchronize();
    std::vector<unsigned char> want(n);
    fill_pattern(want.data(), n, seed);
    EXPECT_EQ(*sum, checksum(want.data(), n)) << "the replay did not see the fill before it";
    fill_pattern(want.data(), n, seed + 100);
    EXPECT_EQ(checksum(back.ptr, n), checksum(want.data(), n)) << "the fill after it ran early";
  }
}

TYPED_TEST(device_capture, verify_checksum_async_outside_capture_counts_matches_and_mismatches) {
  auto& d = *this->dev;
  stream s(d);
  const std::size_t n = 100003;
  buffer dmem(d, memory_kind::device, n), host(d, memory_kind::pinned_host, n);
  buffer counters(d, memory_kind::pinned_host, 2 * sizeof(std::uint32_t));
  std::memset(counters.ptr, 0, counters.bytes);
  auto* words = static_cast<std::uint32_t*>(counters.ptr);
  fill_pattern(host.ptr, n, 42);
  d.copy_async(dmem.ptr, host.ptr, n, copy_direction::host_to_device, s);
  const std::uint64_t good = checksum(host.ptr, n);
  d.verify_checksum_async(dmem.ptr, n, good, words, s);
  d.verify_checksum_async(dmem.ptr, n, good + 1, words, s);
  d.verify_checksum_async(dmem.ptr, n - 1, good, words, s);  // another range: another sum
  s.synchronize();
  EXPECT_EQ(read(counters), (counts{3, 2}));
  EXPECT_THROW(d.verify_checksum_async(nullptr, n, good, words, s), invalid_argument);
  EXPECT_THROW(d.verify_checksum_async(dmem.ptr, 0, good, words, s), invalid_argument);
  std::uint32_t pageable[2] = {0, 0};
  EXPECT_THROW(d.verify_checksum_async(dmem.ptr, n, good, pageable, s), invalid_argument);
}

// A graph destroyed with replays still queued: they run to the end first (sim) or complete before
// it is freed (cuda); nothing leaks (ASan).
TYPED_TEST(device_capture, destroying_a_graph_with_replays_queued_is_safe) {
  auto& d = *this->dev;
  stream s(d);
  const std::size_t n = std::size_t{256} << 10;
  buffer dmem(d, memory_kind::device, n);
  buffer counters(d, memory_kind::pinned_host, 2 * sizeof(std::uint32_t));
  std::memset(counters.ptr, 0, counters.bytes);
  std::vector<unsigned char> want(n);
  fill_pattern(want.data(), n, 8);
  d.begin_capture(s);
  d.fill_pattern_async(dmem.ptr, n, 8, s);
  d.verify_checksum_async(dmem.ptr, n, checksum(want.data(), n),
                          static_cast<std::uint32_t*>(counters.ptr), s);
  {
    graph g = graph::end_capture(d, s);
    for (int r = 0; r < 20; ++r) g.launch(s);
  }
  s.synchronize();
  d.synchronize_all();
  EXPECT_EQ(read(counters), (counts{20, 0}));
}

}  // namespace
}  // namespace htp::test
