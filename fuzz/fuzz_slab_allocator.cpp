// Fuzz target: the slab allocator on a sim device. Operations: allocate, deallocate, stream-ordered
// deallocate, reap, plan a compaction and commit or cancel its moves (copying the bytes as the
// pager does). After every step: no two live extents overlap, bytes in use equal the sum of live
// extents, audit() agrees with the incremental counters, and every live extent still holds the
// payload written into it (checked in place from its seed).
#include "fuzz_input.hpp"

#include <htp/checksum.hpp>
#include <htp/error.hpp>
#include <htp/sim_device.hpp>
#include <htp/slab_allocator.hpp>

#include <cstring>
#include <map>
#include <memory>

namespace {

struct live_block {
  std::size_t bytes;
  std::uint64_t seed;
  std::uint64_t sum;
};

std::uint64_t fill(void* p, std::size_t bytes, std::uint64_t seed) {
  htp::fill_pattern(p, bytes, seed);
  return htp::checksum(p, bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  htp::fuzz::input in(data, size);
  static std::unique_ptr<htp::device> dev = [] {
    htp::sim_config c;
    c.device_memory_bytes = 8 << 20;
    return htp::make_sim_device(c);
  }();
  static htp::stream s(*dev);
  constexpr std::size_t slab = 64 << 10;
  htp::slab_allocator_config cfg;
  cfg.budget_bytes = (4 + in.byte() % 13) * slab;
  cfg.slab_bytes = slab;
  cfg.slabs_per_reservation = in.byte() % 5;  // 0 = one reservation
  htp::slab_allocator a(*dev, cfg);
  std::map<char*, live_block> live;
  std::uint64_t next_seed = 1;

  auto check = [&] {
    const char* end = nullptr;
    std::size_t sum = 0;
    for (const auto& [p, b] : live) {
      HTP_FUZZ_CHECK(end == nullptr || p >= end, "live extents overlap");
      end = p + b.bytes;
      sum += b.bytes;
      HTP_FUZZ_CHECK(htp::checksum(p, b.bytes) == b.sum, "a live extent lost its bytes");
    }
    a.synchronize_pending();
    const auto st = a.statistics();
    HTP_FUZZ_CHECK(st.bytes_in_use == sum, "bytes in use differ from the live extents");
    HTP_FUZZ_CHECK(st.live_allocations == live.size(), "live allocation count differs");
    a.audit();  // throws htp::logic_error (a crash here) on any disagreement
  };

  for (int step = 0; step < 128 && !in.empty(); ++step) {
    const std::uint8_t op = in.byte() % 6;
    if (op <= 1 || live.empty()) {  // allocate: small (bins) or large (runs)
      const std::size_t bytes = op == 0 ? 1 + in.below(slab / 2) : 1 + in.below(4 * slab);
      try {
        const htp::extent e = a.allocate(bytes);
        HTP_FUZZ_CHECK(reinterpret_cast<std::uintptr_t>(e.ptr) % 256 == 0, "misaligned extent");
        const std::uint64_t seed = next_seed++;
        live[static_cast<char*>(e.ptr)] = {bytes, seed, fill(e.ptr, bytes, seed)};
      } catch (const htp::out_of_memory&) {
      } catch (const htp::invalid_argument&) {
        HTP_FUZZ_CHECK(bytes > a.max_request_bytes(), "a request that fits was rejected");
      }
    } else if (op <= 3) {  // deallocate now or after the stream
      auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(in.below(live.size())));
      if (op == 2) {
        a.deallocate(it->first, it->second.bytes);
      } else {
        a.deallocate_after(it->first, it->second.bytes, s);
      }
      live.erase(it);
    } else if (op == 4) {  // a double or wrong-size release is rejected and changes nothing
      auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(in.below(live.size())));
      bool threw = false;
      try {
        a.deallocate(it->first, it->second.bytes + 1);
      } catch (const htp::invalid_argument&) {
        threw = true;
      }
      HTP_FUZZ_CHECK(threw, "a wrong-size release was accepted");
    } else {  // compaction: plan, copy, commit (or cancel some)
      const std::uint8_t mode = in.byte();
      const std::size_t request = (mode & 1) ? 1 + in.below(4 * slab) : 0;
      htp::compaction_plan plan;
      try {
        plan = a.plan_compaction(
            [&](const htp::extent& e) {
              return (reinterpret_cast<std::uintptr_t>(e.ptr) >> 8) % 3 !=
                     static_cast<std::uintptr_t>(mode % 3);
            },
            request);
      } catch (const htp::invalid_argument&) {
        continue;  // a request larger than any extent
      }
      for (const auto& m : plan.moves) {
        auto it = live.find(static_cast<char*>(m.from.ptr));
        HTP_FUZZ_CHECK(it != live.end(), "a move of something not live");
        HTP_FUZZ_CHECK(m.to.bytes == m.from.bytes, "a move changes size");
        if (in.byte() % 4 == 0) {
          a.cancel_move(m);
          continue;
        }
        std::memcpy(m.to.ptr, m.from.ptr, m.from.bytes);
        a.commit_move(m);
        const live_block b = it->second;
        live.erase(it);
        live[static_cast<char*>(m.to.ptr)] = b;
      }
    }
    check();
  }
  for (const auto& [p, b] : live) a.deallocate(p, b.bytes);
  return 0;
}
