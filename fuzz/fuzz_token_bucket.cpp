// Fuzz target: the token bucket under a virtual clock. After every step: tokens never negative or
// above burst, a take never succeeds without its tokens, time_until_available is exact, and the
// bytes taken since the last rate or burst change stay within rate x elapsed + burst.
#include "fuzz_input.hpp"

#include <htp/error.hpp>
#include <htp/token_bucket.hpp>

#include <cstdint>

__extension__ typedef unsigned __int128 u128;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  htp::fuzz::input in(data, size);
  std::int64_t now = 1'000'000;
  std::uint64_t rate = 1 + std::uint64_t{in.u32()};
  std::uint64_t burst = 1 + in.u32() % (1u << 24);
  htp::token_bucket b(rate, burst, [&] { return now; });
  // Window since the last change of rate, burst or mode: what the bound applies to.
  std::int64_t window_start = now;
  std::uint64_t window_taken = 0;
  bool unlimited = false;
  for (int step = 0; step < 256 && !in.empty(); ++step) {
    switch (in.byte() % 7) {
      case 0: now += static_cast<std::int64_t>(in.u32()); break;
      case 1: {
        const std::uint64_t n = in.below(burst + 1);
        const std::uint64_t before = b.available();
        const bool ok = b.try_take(n);
        HTP_FUZZ_CHECK(unlimited || ok == (before >= n), "try_take disagrees with available");
        if (ok && !unlimited) window_taken += n;
        break;
      }
      case 2: {
        const std::uint64_t n = 1 + in.below(burst);
        const std::int64_t wait = b.time_until_available(n);
        HTP_FUZZ_CHECK(wait >= 0, "negative wait");
        now += wait;
        HTP_FUZZ_CHECK(b.try_take(n), "time_until_available was not enough");
        if (!unlimited) window_taken += n;
        break;
      }
      case 3:
        rate = 1 + std::uint64_t{in.u32()};
        b.set_rate(rate);
        unlimited = false;
        window_start = now;
        window_taken = 0;
        break;
      case 4:
        burst = 1 + in.u32() % (1u << 24);
        b.set_burst(burst);
        window_start = now;
        window_taken = 0;
        break;
      case 5:
        unlimited = (in.byte() & 1) != 0;
        b.set_unlimited(unlimited);
        window_start = now;
        window_taken = 0;
        break;
      case 6:
        try {
          b.try_take(burst + 1 + in.below(1000));
          HTP_FUZZ_CHECK(unlimited, "a take above burst succeeded");
        } catch (const htp::invalid_argument&) {
          HTP_FUZZ_CHECK(!unlimited, "unlimited mode rejected a take");
        }
        break;
    }
    const std::uint64_t avail = b.available();
    HTP_FUZZ_CHECK(avail <= burst, "tokens above burst");
    if (!unlimited) {
      const auto elapsed = static_cast<u128>(now - window_start);
      const u128 bound = elapsed * rate / 1'000'000'000u + burst;
      HTP_FUZZ_CHECK(window_taken <= bound, "took more than rate x time + burst");
    }
  }
  return 0;
}
