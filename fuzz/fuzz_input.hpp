// A tiny reader of fuzzer bytes (libFuzzer's FuzzedDataProvider is clang-only; the regression
// replay builds with gcc too). Reads past the end return zeros, so every input is a valid program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace htp::fuzz {

class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const noexcept { return pos_ >= size_; }
  std::uint8_t byte() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint32_t u32() noexcept {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | byte();
    return v;
  }
  /// A value in [0, n) for n > 0.
  std::size_t below(std::size_t n) noexcept { return n == 0 ? 0 : u32() % n; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace htp::fuzz

/// Fails the fuzz run (a crash libFuzzer records; a failure the replay test reports).
#define HTP_FUZZ_CHECK(cond, what)                                                                 \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   what);                                                                          \
      std::abort();                                                                                \
    }                                                                                              \
  } while (0)
