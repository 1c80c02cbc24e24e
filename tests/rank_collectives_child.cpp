// One rank of sim collectives across processes, for rank_collectives_test.cpp, which starts N of
// these with posix_spawn:
//   rank_collectives_child NAME RANK WORLD TIMEOUT_MS ITERATIONS
// It makes a sim device, joins the world NAME, then runs ITERATIONS rounds of all_gather and
// all_reduce_sum (float32 and bfloat16, several sizes, one larger than the staging area the test
// sets with HTP_SIM_RANK_STAGING_BYTES) and reduce_scatter_sum (float32, in place and not, one
// block larger than the staging area), and checks every result exactly. After its first round it
// writes its rank (one byte) to fd 3 if that is open, so the test knows it runs. What went wrong
// goes to stderr. Exit codes: 0 every result right; 1 a wrong result or an unexpected error;
// 2 bad arguments; 3 the world was aborted because a rank died; 4 make_sim_rank_collectives threw
// htp::logic_error (a join that timed out, another world size); 5 aborted for another reason.
#include <htp/collectives.hpp>
#include <htp/error.hpp>
#include <htp/sim_device.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

using htp::element_type;

/// Rank r's float32 element i in round `it`: small integers, so every sum is exact.
float f32_value(std::size_t r, std::size_t it, std::size_t i) {
  return static_cast<float>((r + 1) * 3 + (i * 7 + it) % 101) - 50.0f;
}
/// Rank r's bfloat16 element i: an integer of 0..15 (exact in bfloat16, and so are the sums).
std::uint16_t bf16_value(std::size_t r, std::size_t it, std::size_t i) {
  const float f = static_cast<float>((r + i + it) % 16);
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<std::uint16_t>(bits >> 16);
}
float bf16_float(std::uint16_t v) {
  const std::uint32_t bits = std::uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
unsigned char byte_value(std::size_t r, std::size_t it, std::size_t i) {
  return static_cast<unsigned char>(r * 31 + i * 7 + it);
}

/// Thrown when a result is wrong: exit 1.
struct wrong {
  std::string what;
};

struct rank_run {
  htp::collectives& c;
  htp::device& dev;
  htp::stream& s;
  std::size_t rank, world;

  void gather(std::size_t it, std::size_t bytes) {
    std::vector<unsigned char> send(bytes), recv(bytes * world);
    for (std::size_t i = 0; i < bytes; ++i) send[i] = byte_value(rank, it, i);
    c.all_gather(rank, send.data(), recv.data(), bytes, s);
    s.synchronize();
    if (c.aborted()) return;  // the caller's next call says why
    for (std::size_t k = 0; k < world; ++k) {
      for (std::size_t i = 0; i < bytes; ++i) {
        if (recv[k * bytes + i] != byte_value(k, it, i))
          throw wrong{"all_gather of " + std::to_string(bytes) + " bytes: rank " +
                      std::to_string(k) + " byte " + std::to_string(i)};
      }
    }
  }
  void reduce_f32(std::size_t it, std::size_t count) {
    std::vector<float> buf(count);  // in place
    for (std::size_t i = 0; i < count; ++i) buf[i] = f32_value(rank, it, i);
    c.all_reduce_sum(rank, buf.data(), buf.data(), count, element_type::float32, s);
    s.synchronize();
    if (c.aborted()) return;
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0.0f;
      for (std::size_t k = 0; k < world; ++k) want += f32_value(k, it, i);
      if (buf[i] != want)
        throw wrong{"float32 all_reduce_sum of " + std::to_string(count) + ": element " +
                    std::to_string(i) + " is " + std::to_string(buf[i]) + ", not " +
                    std::to_string(want)};
    }
  }
  void reduce_bf16(std::size_t it, std::size_t count) {
    std::vector<std::uint16_t> send(count), recv(count);
    for (std::size_t i = 0; i < count; ++i) send[i] = bf16_value(rank, it, i);
    c.all_reduce_sum(rank, send.data(), recv.data(), count, element_type::bfloat16, s);
    s.synchronize();
    if (c.aborted()) return;
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0.0f;
      for (std::size_t k = 0; k < world; ++k) want += bf16_float(bf16_value(k, it, i));
      if (bf16_float(recv[i]) != want)
        throw wrong{"bfloat16 all_reduce_sum of " + std::to_string(count) + ": element " +
                    std::to_string(i)};
    }
  }
  /// Rank `rank`'s block of the float32 sum of world x count elements, in place or not.
  void scatter_f32(std::size_t it, std::size_t count, bool in_place) {
    std::vector<float> send(world * count), recv(count);
    for (std::size_t i = 0; i < world * count; ++i) send[i] = f32_value(rank, it, i);
    float* out = in_place ? send.data() + rank * count : recv.data();
    c.reduce_scatter_sum(rank, send.data(), out, count, element_type::float32, s);
    s.synchronize();
    if (c.aborted()) return;
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0.0f;
      for (std::size_t k = 0; k < world; ++k) want += f32_value(k, it, rank * count + i);
      if (out[i] != want)
        throw wrong{"float32 reduce_scatter_sum of " + std::to_string(count) + ": element " +
                    std::to_string(i) + " is " + std::to_string(out[i]) + ", not " +
                    std::to_string(want)};
    }
  }
  /// One round; the sizes straddle the test's 64 KiB staging area.
  void round(std::size_t it) {
    for (std::size_t bytes : {std::size_t{1}, std::size_t{4099}, std::size_t{150'001}})
      gather(it, bytes);
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{40'000}})
      reduce_f32(it, count);
    for (std::size_t count : {std::size_t{3}, std::size_t{50'001}}) reduce_bf16(it, count);
    scatter_f32(it, 7, false);
    scatter_f32(it, 20'000, true);
  }
};

/// Exit code for an htp::logic_error from a collective call after an abort.
int aborted_code(const std::exception& e) {
  std::fprintf(stderr, "aborted: %s\n", e.what());
  return std::strstr(e.what(), "died") != nullptr ? 3 : 5;
}

int run(const std::string& name, std::size_t rank, std::size_t world, long timeout_ms,
        std::size_t iterations) {
  htp::sim_config cfg;
  cfg.device_memory_bytes = 1 << 20;
  auto dev = htp::make_sim_device(cfg);
  htp::stream s(*dev);
  std::unique_ptr<htp::collectives> c;
  try {
    c = htp::make_sim_rank_collectives(name, rank, world, *dev,
                                       std::chrono::milliseconds(timeout_ms));
  } catch (const htp::logic_error& e) {
    std::fprintf(stderr, "join: %s\n", e.what());
    return 4;
  }
  rank_run r{*c, *dev, s, rank, world};
  for (std::size_t it = 0; it < iterations; ++it) {
    try {
      r.round(it);
      if (c->aborted()) {  // a pending call completed without its result: the next one says why
        std::vector<unsigned char> b(4);
        c->all_gather(rank, b.data(), b.data(), 1, s);
        std::fprintf(stderr, "aborted, yet a later call was accepted\n");
        return 1;
      }
    } catch (const htp::logic_error& e) {
      return aborted_code(e);
    } catch (const wrong& w) {
      std::fprintf(stderr, "rank %zu round %zu: wrong result: %s\n", rank, it, w.what.c_str());
      return 1;
    }
    if (it == 0) {
      const auto b = static_cast<unsigned char>(rank);
      if (write(3, &b, 1) < 0) {
      }  // fd 3 is open only when the test asks
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s NAME RANK WORLD TIMEOUT_MS ITERATIONS\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1], std::stoul(argv[2]), std::stoul(argv[3]), std::stol(argv[4]),
               std::stoul(argv[5]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected error: %s\n", e.what());
    return 1;
  }
}
