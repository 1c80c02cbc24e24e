// The weight codec (codec.hpp): round trips, the adversarial inputs, the raw fallback's bound,
// chunk-at-a-time decoding, and a seeded corruption fuzz of the decoder.
#include <htp/checksum.hpp>
#include <htp/codec.hpp>
#include <htp/error.hpp>

#include <htp/detail/codec_format.hpp>
#include "codec/huffman.hpp"
#include "common/synthetic_weights.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace htp::test {
namespace {

using bytes_t = std::vector<std::uint8_t>;
const weight_format formats[] = {weight_format::bf16, weight_format::fp16, weight_format::fp32};

bytes_t decode(const bytes_t& frame, std::size_t size) {
  bytes_t out(size);
  decode_weights(frame.data(), frame.size(), out.data(), out.size());
  return out;
}

double ratio(const bytes_t& frame, const bytes_t& raw) {
  return static_cast<double>(frame.size()) / static_cast<double>(raw.size());
}

void expect_round_trip(const bytes_t& raw, weight_format f, const codec_options& o = {}) {
  const bytes_t frame = encode_weights(raw.data(), raw.size(), f, o);
  EXPECT_LE(frame.size(), max_encoded_bytes(raw.size(), o)) << raw.size();
  const bytes_t back = decode(frame, raw.size());
  ASSERT_TRUE(back == raw) << to_string(f) << " " << raw.size() << " bytes";
}

TEST(codec, gaussian_weights_round_trip_bit_exact_and_shrink) {
  for (weight_format f : formats) {
    for (double sd : {0.02, 0.006, 0.1, 1.0}) {
      const bytes_t raw = synthetic::gaussian(300'001, sd, f, 7);
      const bytes_t frame = encode_weights(raw.data(), raw.size(), f);
      ASSERT_TRUE(decode(frame, raw.size()) == raw) << to_string(f) << " sd " << sd;
      // The symbol carries ~2.6 bits of 8 (bf16, fp32) or ~5.6 of 8 (fp16: 3 mantissa bits too).
      const double bound = f == weight_format::bf16 ? 0.72 : f == weight_format::fp16 ? 0.87 : 0.86;
      EXPECT_LT(ratio(frame, raw), bound) << to_string(f) << " sd " << sd;
    }
  }
}

TEST(codec, llama_like_mixture_round_trips) {
  for (weight_format f : formats) {
    const bytes_t raw = synthetic::llama_mixture(1 << 20, f, 3);
    expect_round_trip(raw, f);
  }
}

TEST(codec, uniform_random_bits_are_stored_raw_within_the_bound) {
  for (weight_format f : formats) {
    for (std::size_t n :
         {std::size_t{56} << 10, std::size_t{1} << 20, (std::size_t{9} << 20) + 3}) {
      const bytes_t raw = synthetic::uniform_bits(n, n);
      const bytes_t frame = encode_weights(raw.data(), raw.size(), f);
      const frame_view v = parse_frame(frame.data(), frame.size());
      for (std::size_t i = 0; i < v.chunk_count(); ++i) EXPECT_TRUE(v.chunk(i).raw) << i;
      EXPECT_LE(static_cast<double>(frame.size()), static_cast<double>(n) * 1.001) << n;
      ASSERT_TRUE(decode(frame, n) == raw);
    }
  }
}

TEST(codec, no_input_ever_grows_past_max_encoded_bytes) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 200; ++round) {
    const std::size_t n = rng() % 20000;
    const bytes_t raw = synthetic::uniform_bits(n, round);
    codec_options o;
    o.chunk_bytes = 4096 * (1 + rng() % 3);
    o.block_elements = 64 + rng() % 300;
    for (weight_format f : formats) {
      const bytes_t frame = encode_weights(raw.data(), raw.size(), f, o);
      EXPECT_LE(frame.size(), max_encoded_bytes(n, o));
      ASSERT_TRUE(decode(frame, n) == raw) << n;
    }
  }
}

TEST(codec, all_equal_values_shrink_to_one_bit_a_symbol) {
  for (weight_format f : formats) {
    const bytes_t raw = synthetic::all_equal(1 << 20, 0.0125f, f);
    const bytes_t frame = encode_weights(raw.data(), raw.size(), f);
    ASSERT_TRUE(decode(frame, raw.size()) == raw);
    const double w = static_cast<double>(element_bytes(f));
    EXPECT_LT(ratio(frame, raw), ((w - 1) * 8 + 1.01) / (w * 8)) << to_string(f);
  }
}

TEST(codec, nan_inf_subnormals_and_negative_zero_come_back_bit_for_bit) {
  for (weight_format f : formats) {
    for (std::size_t every : {std::size_t{1}, std::size_t{3}, std::size_t{100}}) {
      expect_round_trip(synthetic::with_specials(100'003, f, every, every), f);
    }
  }
}

TEST(codec, lengths_that_are_not_a_multiple_of_anything_round_trip) {
  const bytes_t big = synthetic::gaussian(700'000, 0.02, weight_format::fp32, 5);
  codec_options o;
  o.chunk_bytes = 4096;
  o.block_elements = 64;
  for (weight_format f : formats) {
    for (std::size_t n :
         {0, 1, 2, 3, 5, 7, 127, 129, 4095, 4096, 4097, 4099, 8191, 65537, 1000003}) {
      const bytes_t raw(big.begin(), big.begin() + static_cast<std::ptrdiff_t>(n));
      expect_round_trip(raw, f);
      expect_round_trip(raw, f, o);
    }
  }
}

TEST(codec, each_chunk_decodes_alone_to_its_part_of_the_whole) {
  const bytes_t raw = synthetic::llama_mixture(3'000'001, weight_format::bf16, 9);
  codec_options o;
  o.chunk_bytes = std::size_t{1} << 20;
  const bytes_t frame = encode_weights(raw.data(), raw.size(), weight_format::bf16, o);
  const frame_view v = parse_frame(frame.data(), frame.size());
  ASSERT_EQ(v.chunk_count(), 6u);
  EXPECT_EQ(v.decoded_bytes(), raw.size());
  EXPECT_EQ(v.wire_bytes(), frame.size());
  bytes_t out(raw.size(), 0);
  for (std::size_t i = v.chunk_count(); i-- > 0;) {  // any order: chunks are independent
    const chunk_view& c = v.chunk(i);
    EXPECT_EQ(c.decoded_offset, i * o.chunk_bytes);
    EXPECT_FALSE(c.raw);
    EXPECT_EQ(c.blocks, (c.decoded_bytes / 2 + o.block_elements - 1) / o.block_elements);
    decode_chunk(v, i, out.data() + c.decoded_offset, c.decoded_bytes);
  }
  EXPECT_TRUE(out == raw);
  EXPECT_THROW(decode_chunk(v, 6, out.data(), 1), invalid_argument);
  EXPECT_THROW(decode_chunk(v, 0, out.data(), 1), invalid_argument);
}

TEST(codec, threads_and_the_callers_buffer_give_the_same_frame) {
  const bytes_t raw = synthetic::llama_mixture(1'500'000, weight_format::fp16, 4);
  codec_options o;
  o.chunk_bytes = std::size_t{256} << 10;
  const bytes_t one = encode_weights(raw.data(), raw.size(), weight_format::fp16, o);
  o.threads = 4;
  EXPECT_TRUE(encode_weights(raw.data(), raw.size(), weight_format::fp16, o) == one);
  o.threads = 0;  // automatic: 12 chunks, up to 3 threads
  EXPECT_TRUE(encode_weights(raw.data(), raw.size(), weight_format::fp16, o) == one);
  bytes_t buf(max_encoded_bytes(raw.size(), o));
  const std::size_t n =
      encode_weights(raw.data(), raw.size(), weight_format::fp16, buf.data(), buf.size(), o);
  buf.resize(n);
  EXPECT_TRUE(buf == one);
  EXPECT_THROW(encode_weights(raw.data(), raw.size(), weight_format::fp16, buf.data(), n - 1, o),
               invalid_argument);
}

TEST(codec, refuses_bad_arguments_with_invalid_argument) {
  const bytes_t raw(100, 1);
  codec_options o;
  o.chunk_bytes = 4098;
  EXPECT_THROW(encode_weights(raw.data(), raw.size(), weight_format::bf16, o), invalid_argument);
  o = {};
  o.block_elements = 63;
  EXPECT_THROW(encode_weights(raw.data(), raw.size(), weight_format::bf16, o), invalid_argument);
  EXPECT_THROW(encode_weights(nullptr, 10, weight_format::bf16), invalid_argument);
  EXPECT_THROW(encode_weights(raw.data(), raw.size(), static_cast<weight_format>(9)),
               invalid_argument);
}

TEST(codec, symbol_histogram_counts_bf16_exponents) {
  const bytes_t raw = synthetic::all_equal(1000, 1.0f, weight_format::bf16);  // exponent 127
  const auto h = symbol_histogram(raw.data(), raw.size() + 0, weight_format::bf16);
  EXPECT_EQ(h[127], 1000u);
  EXPECT_DOUBLE_EQ(synthetic::entropy_bits(h), 0.0);
}

TEST(codec, limited_code_lengths_fit_and_the_kernels_code_ranks_match_canonical_order) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 300; ++round) {
    std::array<std::uint64_t, 256> freq{};
    const int used = 1 + static_cast<int>(rng() % 256);
    for (int k = 0; k < used; ++k)
      freq[rng() % 256] += 1 + (rng() % 3 == 0 ? rng() >> (rng() % 64) : rng() % 8);
    const auto lengths = codec::limited_code_lengths(freq);
    std::uint8_t packed[128] = {};
    std::uint32_t kraft = 0;
    for (unsigned s = 0; s < 256; ++s) {
      ASSERT_LE(lengths[s], codec::max_code_bits);
      ASSERT_EQ(lengths[s] == 0, freq[s] == 0) << s;
      if (lengths[s] != 0) kraft += 1u << (codec::max_code_bits - lengths[s]);
      packed[s / 2] = static_cast<std::uint8_t>(packed[s / 2] | lengths[s] << (4 * (s % 2)));
    }
    ASSERT_LE(kraft, codec::table_size);
    std::uint32_t first[codec::max_code_bits + 1] = {};
    ASSERT_EQ(codec::first_codes(packed, first), codec::status::ok);
    // The CPU decoder hands out codes in canonical order; the kernel computes each symbol's rank.
    std::uint32_t next[codec::max_code_bits + 1];
    std::memcpy(next, first, sizeof(next));
    for (unsigned s = 0; s < 256; ++s) {
      const unsigned l = codec::code_length(packed, s);
      if (l == 0) continue;
      ASSERT_EQ(codec::canonical_code(packed, first, s, l), next[l]++) << s;
    }
  }
}

// ---- corrupted streams -----------------------------------------------------------------------

/// Rewrites the header check word and every chunk checksum the (mutated) directory names, where
/// the directory is readable: so the mutation reaches the chunk decoder instead of the checksums.
void reseal(bytes_t& f) {
  auto u32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    std::memcpy(&v, f.data() + at, 4);
    return v;
  };
  if (f.size() < 32) return;
  const std::uint64_t count = u32(24);
  if (count > (f.size() - 32) / 24) return;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::size_t e = 32 + 24 * i;
    std::uint64_t off = 0;
    std::memcpy(&off, f.data() + e, 8);
    const std::uint64_t len = u32(e + 8);
    if (off > f.size() || len > f.size() - off) continue;
    const std::uint64_t sum = checksum(f.data() + off, len);
    std::memcpy(f.data() + e + 16, &sum, 8);
  }
  const std::uint64_t sum = checksum(f.data(), 28) ^ checksum(f.data() + 32, 24 * count) * 3;
  const auto word = static_cast<std::uint32_t>(sum ^ (sum >> 32));
  std::memcpy(f.data() + 28, &word, 4);
}

/// One seeded mutation: bit flips, a truncation, an edited length or offset, random bytes.
void mutate(bytes_t& f, std::mt19937_64& rng) {
  auto at = [&](std::size_t limit) { return static_cast<std::size_t>(rng() % limit); };
  switch (rng() % 6) {
    case 0:
      for (int k = 1 + static_cast<int>(rng() % 8); k > 0; --k)
        f[at(f.size())] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
      break;
    case 1: f.resize(at(f.size())); break;
    case 2: {  // a field of the header or directory
      const std::size_t limit = std::min<std::size_t>(f.size(), 32 + 24 * 8);
      const std::size_t p = at(limit) & ~std::size_t{3};
      const std::uint32_t v = static_cast<std::uint32_t>(rng() % 3 == 0 ? rng() : rng() % 70000);
      std::memcpy(f.data() + p, &v, std::min<std::size_t>(4, f.size() - p));
      break;
    }
    case 3: f[at(f.size())] = static_cast<std::uint8_t>(rng()); break;
    case 4: f.resize(f.size() + 1 + at(64), static_cast<std::uint8_t>(rng())); break;
    default:
      for (int k = 0; k < 16; ++k) f[at(f.size())] = static_cast<std::uint8_t>(rng());
      break;
  }
}

TEST(codec, corrupted_streams_decode_exactly_or_throw_corrupt_data) {
  codec_options o;
  o.chunk_bytes = 4096;
  o.block_elements = 64;
  std::vector<std::pair<bytes_t, bytes_t>> cases;  // (raw, frame)
  for (weight_format f : formats) {
    bytes_t raw = synthetic::with_specials(5001, f, 1, 37);
    cases.emplace_back(raw, encode_weights(raw.data(), raw.size(), f, o));
  }
  std::mt19937_64 rng(2024);
  int exact = 0;
  int detected = 0;
  int sealed_detected = 0;  // caught by the structure checks alone, past the checksums
  int sealed_ok = 0;
  for (int round = 0; round < 20000; ++round) {
    const auto& [raw, frame] = cases[static_cast<std::size_t>(round) % cases.size()];
    bytes_t bad = frame;
    mutate(bad, rng);
    const bool sealed = round % 2 == 1;  // half reach the chunk decoder past the checksums
    if (sealed) reseal(bad);
    bytes_t out(raw.size());
    try {
      decode_weights(bad.empty() ? frame.data() : bad.data(), bad.size(), out.data(), out.size());
      if (sealed) {
        ++sealed_ok;  // a valid frame of other weights: not detectable without the checksums
      } else {
        ASSERT_TRUE(out == raw) << "round " << round << ": decoded without error to wrong bytes";
        ++exact;
      }
    } catch (const corrupt_data&) {
      ++(sealed ? sealed_detected : detected);
    }
  }
  EXPECT_EQ(exact + detected, 10000);
  // Half the resealed mutations hit a raw sign-and-mantissa byte, which decodes to other weights;
  // the rest must meet the decoder's own checks.
  EXPECT_GT(sealed_detected, 2000) << sealed_ok << " resealed mutations decoded";
  RecordProperty("exact", exact);
  RecordProperty("detected", detected);
  RecordProperty("sealed_detected", sealed_detected);
  RecordProperty("sealed_ok", sealed_ok);
}

TEST(codec, corrupt_data_says_what_was_wrong) {
  const bytes_t raw = synthetic::gaussian(10000, 0.02, weight_format::bf16, 1);
  bytes_t frame = encode_weights(raw.data(), raw.size(), weight_format::bf16);
  bytes_t out(raw.size());
  frame[0] ^= 1;
  try {
    decode_weights(frame.data(), frame.size(), out.data(), out.size());
    FAIL() << "a bad magic number decoded";
  } catch (const corrupt_data& e) {
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos) << e.what();
  }
  frame[0] ^= 1;
  frame.back() ^= 0x10;
  try {
    decode_weights(frame.data(), frame.size(), out.data(), out.size());
    FAIL() << "a flipped payload bit decoded";
  } catch (const corrupt_data& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  EXPECT_THROW(decode_weights(frame.data(), 31, out.data(), out.size()), corrupt_data);
  EXPECT_THROW(verify_frame(frame.data(), frame.size()), corrupt_data);
  frame.back() ^= 0x10;
  EXPECT_EQ(verify_frame(frame.data(), frame.size()).decoded_bytes(), raw.size());
}

}  // namespace
}  // namespace htp::test
