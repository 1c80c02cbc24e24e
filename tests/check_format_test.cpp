// detail::concat (the message builder behind HTP_EXPECTS and HTP_ASSERT) formats each part as fmt's
// "{}" does, without fmt in check.hpp: compared here with fmt itself, part type by part type, and
// for doubles and floats over special values and a few hundred thousand random bit patterns.
#include <htp/detail/check.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>

namespace {

using htp::detail::concat;

template <typename T>
void expect_as_fmt(T v) {
  EXPECT_EQ(concat(v), fmt::format("{}", v));
}

TEST(CheckFormat, IntegersAsFmt) {
  expect_as_fmt(0);
  expect_as_fmt(-1);
  expect_as_fmt(std::numeric_limits<int>::min());
  expect_as_fmt(std::numeric_limits<long long>::min());
  expect_as_fmt(std::numeric_limits<unsigned long long>::max());
  expect_as_fmt(std::size_t{1} << 40);
  expect_as_fmt(static_cast<short>(-3));
  expect_as_fmt(static_cast<unsigned short>(65535));
  // signed and unsigned char are numbers to fmt (uint8_t included), char a character.
  expect_as_fmt(static_cast<unsigned char>(200));
  expect_as_fmt(static_cast<signed char>(-5));
  expect_as_fmt(std::uint8_t{7});
  expect_as_fmt('x');
  expect_as_fmt(true);
  expect_as_fmt(false);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 10000; ++i) {
    expect_as_fmt(static_cast<long long>(rng()));
    expect_as_fmt(static_cast<std::uint64_t>(rng()));
    expect_as_fmt(static_cast<std::int32_t>(rng()));
  }
}

TEST(CheckFormat, FloatingPointAsFmt) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (double d : {0.0,
                   -0.0,
                   1.0,
                   -1.5,
                   100.0,
                   0.1,
                   0.3,
                   2.5,
                   123.456,
                   1e15,
                   1e16,
                   9.999999999999998e15,
                   1234567890123456.7,
                   1e-4,
                   1e-5,
                   0.00012,
                   0.5e-4,
                   1e22,
                   1e23,
                   1e100,
                   1e-300,
                   5e-324,
                   std::numeric_limits<double>::max(),
                   std::numeric_limits<double>::min(),
                   inf,
                   -inf,
                   std::nan(""),
                   -std::nan("")}) {
    expect_as_fmt(d);
  }
  for (float f : {0.0f, 1.0f, 0.1f, 3.4028235e38f, 1e-45f, 1e16f, 1e15f, 65536.0f})
    expect_as_fmt(f);
  std::mt19937_64 rng(2);
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    expect_as_fmt(d);
    // Values of a size messages show: rates, ratios, seconds.
    expect_as_fmt(std::ldexp(static_cast<double>(rng() >> 11), static_cast<int>(rng() % 120) - 80));
    const auto b32 = static_cast<std::uint32_t>(rng());
    float f;
    std::memcpy(&f, &b32, sizeof f);
    expect_as_fmt(f);
    if (HasFailure()) break;
  }
}

enum class colour : unsigned char { red = 7 };
enum plain { first = -2 };

TEST(CheckFormat, StringsPointersEnumsAsFmt) {
  int x = 0;
  expect_as_fmt(static_cast<const void*>(&x));
  expect_as_fmt(static_cast<const void*>(nullptr));
  EXPECT_EQ(concat(&x), fmt::format("{}", static_cast<const void*>(&x)));
  EXPECT_EQ(concat(nullptr), fmt::format("{}", nullptr));
  EXPECT_EQ(concat(colour::red), "7");
  EXPECT_EQ(concat(first), "-2");
  const std::string s = "str";
  const std::string_view sv = "view";
  const char* cs = "chars";
  char buf[] = "buffer";
  EXPECT_EQ(concat("literal ", s, ' ', sv, ' ', cs, ' ', buf, ' ', 42, ' ', 2.5, ' ', true),
            fmt::format("{}{}{}{}{}{}{}{}{}{}{}{}{}{}", "literal ", s, ' ', sv, ' ', cs, ' ',
                        static_cast<const char*>(buf), ' ', 42, ' ', 2.5, ' ', true));
  EXPECT_EQ(concat(), "");
}

TEST(CheckFormat, MacrosThrowTheMessage) {
  const std::size_t n = 5;
  try {
    HTP_EXPECTS(n < 3, htp::invalid_argument, "bytes=", n, " exceeds ", 2.5, " (", colour::red,
                ")");
    FAIL() << "no throw";
  } catch (const htp::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "bytes=5 exceeds 2.5 (7)");
  }
  try {
    HTP_ASSERT(n == 0, "n=", n);
    FAIL() << "no throw";
  } catch (const htp::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("htp invariant broken at "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(": n == 0 n=5"), std::string::npos) << e.what();
  }
}

}  // namespace
