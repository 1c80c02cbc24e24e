// Synthetic weights for the codec's tests and benchmark (docs/codec.md, "The weights"): no real
// checkpoint can be downloaded where htp is built, so weights are drawn, deterministically from a
// seed, to look like a trained model's where it matters to the codec, the exponent's distribution.
#pragma once

#include <htp/codec.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace htp::synthetic {

/// float to bfloat16 bits, round to nearest even (NaN stays a quiet NaN).
inline std::uint16_t to_bf16(float f) {
  std::uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

/// float to IEEE half bits, round to nearest even, with subnormals, overflow to infinity.
inline std::uint16_t to_fp16(float f) {
  std::uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u)
    return static_cast<std::uint16_t>(sign | (ax > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (ax >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal half (or the smallest normal, rounded up)
    float a = 0;
    std::memcpy(&a, &ax, 4);
    return static_cast<std::uint16_t>(sign |
                                      static_cast<std::uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  const std::uint32_t r = ax + 0xC8000FFFu + ((ax >> 13) & 1u);  // exponent rebiased by -112
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

/// Appends `f` in `format` (little-endian bytes).
inline void put(std::vector<std::uint8_t>& out, float f, weight_format format) {
  if (format == weight_format::fp32) {
    std::uint8_t b[4];
    std::memcpy(b, &f, 4);
    out.insert(out.end(), b, b + 4);
    return;
  }
  const std::uint16_t h = format == weight_format::bf16 ? to_bf16(f) : to_fp16(f);
  out.push_back(static_cast<std::uint8_t>(h));
  out.push_back(static_cast<std::uint8_t>(h >> 8));
}

/// n elements drawn from N(0, stddev^2).
inline std::vector<std::uint8_t> gaussian(std::size_t n, double stddev, weight_format format,
                                          std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, static_cast<float>(stddev));
  std::vector<std::uint8_t> out;
  out.reserve(n * element_bytes(format));
  for (std::size_t i = 0; i < n; ++i) put(out, d(rng), format);
  return out;
}

/// A Llama-like checkpoint: matrices of 2^18 elements, each Gaussian with its own scale, drawn
/// log-uniform from [0.006, 0.05] (the spread of Llama 3's projection matrices' standard
/// deviations); 1 element in 50 is an outlier from a 10x wider Gaussian (trained weights are
/// heavier-tailed than a Gaussian); 1 matrix in 64 is a norm gain vector, N(1, 0.05^2).
inline std::vector<std::uint8_t> llama_mixture(std::size_t n, weight_format format,
                                               std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_scale(std::log(0.006), std::log(0.05));
  std::normal_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 49);
  std::vector<std::uint8_t> out;
  out.reserve(n * element_bytes(format));
  constexpr std::size_t matrix = std::size_t{1} << 18;
  for (std::size_t m = 0; out.size() < n * element_bytes(format); ++m) {
    const bool gain = m % 64 == 63;
    const auto s = static_cast<float>(std::exp(log_scale(rng)));
    for (std::size_t i = 0; i < matrix && out.size() < n * element_bytes(format); ++i) {
      const float z = unit(rng);
      put(out, gain ? 1.0f + 0.05f * z : (pick(rng) == 0 ? 10.0f * s * z : s * z), format);
    }
  }
  return out;
}

/// Uniform random bytes: every bit pattern equally likely (incompressible).
inline std::vector<std::uint8_t> uniform_bits(std::size_t bytes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> out(bytes);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng() >> 56);
  return out;
}

/// n copies of one value.
inline std::vector<std::uint8_t> all_equal(std::size_t n, float value, weight_format format) {
  std::vector<std::uint8_t> out;
  out.reserve(n * element_bytes(format));
  for (std::size_t i = 0; i < n; ++i) put(out, value, format);
  return out;
}

/// N(0, 0.02^2) weights with one element in `every` replaced by a special bit pattern in turn:
/// quiet and signalling NaNs with payloads, +-infinity, subnormals, negative and positive zero.
inline std::vector<std::uint8_t> with_specials(std::size_t n, weight_format format,
                                               std::uint64_t seed, std::size_t every = 100) {
  std::vector<std::uint8_t> out = gaussian(n, 0.02, format, seed);
  const std::uint32_t half[] = {0x7FC0, 0x7F81, 0xFFFF, 0x7F80, 0xFF80,
                                0x0001, 0x807F, 0x8000, 0x0000};
  const std::uint32_t fp16[] = {0x7E00, 0x7C01, 0xFFFF, 0x7C00, 0xFC00,
                                0x0001, 0x83FF, 0x8000, 0x0000};
  const std::uint32_t fp32[] = {0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7F800000, 0xFF800000,
                                0x00000001, 0x807FFFFF, 0x80000000, 0x00000000};
  const std::uint32_t* table = format == weight_format::bf16   ? half
                               : format == weight_format::fp16 ? fp16
                                                               : fp32;
  const std::size_t w = element_bytes(format);
  for (std::size_t i = 0, k = 0; i < n; i += every, ++k) {
    const std::uint32_t v = table[k % 9];
    std::memcpy(out.data() + i * w, &v, w);  // little-endian host
  }
  return out;
}

/// Shannon entropy in bits of a histogram.
inline double entropy_bits(const std::vector<std::uint64_t>& h) {
  double total = 0;
  for (auto c : h) total += static_cast<double>(c);
  double bits = 0;
  for (auto c : h) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) / total;
    bits -= p * std::log2(p);
  }
  return bits;
}

}  // namespace htp::synthetic
