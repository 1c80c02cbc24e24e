// The formatting behind detail::concat (include/htp/detail/check.hpp): each part written the way
// fmt's "{}" writes it, so messages read the same as when concat called fmt, without every file
// that uses HTP_EXPECTS compiling fmt. tests/check_format_test.cpp compares the two.
#include <htp/detail/check.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <system_error>

namespace htp::detail {

namespace {

/// fmt's shortest form of a finite floating-point value: the shortest digits that read back the
/// same value (std::to_chars in scientific notation gives them, as fmt's Dragonbox does), laid
/// out in fixed notation when the decimal exponent of the first digit is in [-4, 16), else as
/// d.ddde+XX (at least two exponent digits).
template <typename Float>
void append_float(std::string& out, Float v) {
  if (std::isnan(v)) {
    out += std::signbit(v) ? "-nan" : "nan";
    return;
  }
  if (std::isinf(v)) {
    out += v < 0 ? "-inf" : "inf";
    return;
  }
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  if (ec != std::errc()) {
    out += "?";  // cannot happen: 64 characters hold any float or double
    return;
  }
  const char* p = buf;
  if (*p == '-') out += *p++;
  const char* e = static_cast<const char*>(std::memchr(p, 'e', static_cast<std::size_t>(end - p)));
  std::string digits;
  for (const char* q = p; q != e; ++q) {
    if (*q != '.') digits += *q;
  }
  int exp10 = 0;
  const char* x = e + 1;
  const bool negative_exp = *x == '-';
  if (*x == '+' || *x == '-') ++x;
  std::from_chars(x, end, exp10);
  if (negative_exp) exp10 = -exp10;

  const int n = static_cast<int>(digits.size());
  if (exp10 < -4 || exp10 >= 16) {
    out += digits[0];
    if (n > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    out += 'e';
    out += exp10 < 0 ? '-' : '+';
    const int a = exp10 < 0 ? -exp10 : exp10;
    if (a < 10) out += '0';
    out += std::to_string(a);
  } else if (exp10 >= n - 1) {
    out += digits;
    out.append(static_cast<std::size_t>(exp10 - (n - 1)), '0');
  } else if (exp10 >= 0) {
    out.append(digits, 0, static_cast<std::size_t>(exp10 + 1));
    out += '.';
    out.append(digits, static_cast<std::size_t>(exp10 + 1), std::string::npos);
  } else {
    out += "0.";
    out.append(static_cast<std::size_t>(-exp10 - 1), '0');
    out += digits;
  }
}

template <typename Int>
void append_integer(std::string& out, Int v, int base = 10) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, base);
  (void)ec;  // 32 characters hold any 64-bit integer in base 10 or 16
  out.append(buf, end);
}

}  // namespace

void append(std::string& out, std::string_view text) { out += text; }

void append(std::string& out, const char* text) { out += text != nullptr ? text : "(null)"; }

void append(std::string& out, char c) { out += c; }

void append(std::string& out, bool b) { out += b ? "true" : "false"; }

void append(std::string& out, long long v) { append_integer(out, v); }

void append(std::string& out, unsigned long long v) { append_integer(out, v); }

void append(std::string& out, float v) { append_float(out, v); }

void append(std::string& out, double v) { append_float(out, v); }

void append(std::string& out, const void* p) {
  out += "0x";
  append_integer(out, reinterpret_cast<std::uintptr_t>(p), 16);
}

}  // namespace htp::detail
