// Fuzz target: a pager operation sequence on a sim device against a shadow model (the checksum each
// tensor's bytes must have). Operations: register, unregister, acquire + verify on the device,
// acquire + write + release dirty, hold / release later, prefetch, evict, compact, set_schedule,
// copy_to_host. After every step: registered count and tier accounting exact, HBM within budget;
// every few steps and at the end every tensor's bytes are checked; at teardown all memory is back.
#include "fuzz_input.hpp"

#include <htp/checksum.hpp>
#include <htp/error.hpp>
#include <htp/pager.hpp>
#include <htp/sim_device.hpp>

#include <memory>
#include <string>
#include <vector>

namespace {

struct shadow {
  htp::tensor_handle h;
  std::size_t bytes;
  htp::tensor_kind kind;
  std::uint64_t sum;
  int held = 0;
};

std::uint64_t pattern_sum(std::size_t bytes, std::uint64_t seed) {
  std::vector<unsigned char> b(bytes);
  htp::fill_pattern(b.data(), bytes, seed);
  return htp::checksum(b.data(), bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  htp::fuzz::input in(data, size);
  static std::unique_ptr<htp::device> dev = [] {
    htp::sim_config c;
    c.device_memory_bytes = 16 << 20;
    c.pinned_memory_bytes = 32 << 20;
    return htp::make_sim_device(c);
  }();
  const std::size_t device_free = dev->memory().free_bytes;
  constexpr std::size_t slab = 64 << 10;
  const std::uint8_t shape = in.byte();
  {
    htp::pager_config c;
    c.hbm_budget_bytes = (2 + shape % 7) * slab;
    c.host_budget_bytes = 64 * slab;
    c.slab_bytes = slab;
    c.chunk_bytes = 16 << 10;
    c.h2d.link_bytes_per_second = 10'000'000'000;
    c.h2d.unlimited = true;
    c.d2h.link_bytes_per_second = 10'000'000'000;
    c.d2h.unlimited = true;
    c.checked = (shape & 0x10) != 0;
    c.on_oom = (shape & 0x20) ? htp::oom_policy::allow_degraded : htp::oom_policy::throw_error;
    c.prefetch_lookahead = (shape >> 6) % 3;
    htp::pager p(*dev, c);
    htp::stream compute(*dev);
    auto* slot = static_cast<std::uint64_t*>(dev->allocate(htp::memory_kind::pinned_host, 8));
    std::vector<shadow> live;
    std::uint64_t seed = 1;

    auto verify_host = [&](const shadow& t) {
      std::vector<unsigned char> out(t.bytes);
      p.copy_to_host(t.h, out.data());
      HTP_FUZZ_CHECK(htp::checksum(out.data(), out.size()) == t.sum, "copy_to_host lost bytes");
    };

    for (int step = 0; step < 64 && !in.empty(); ++step) {
      const std::uint8_t op = in.byte() % 10;
      if (op == 0 || live.empty()) {  // register
        const std::size_t bytes = 1 + in.below(3 * slab);
        const auto kind =
            (in.byte() & 1) ? htp::tensor_kind::weight : htp::tensor_kind::mutable_state;
        std::vector<unsigned char> b(bytes);
        htp::fill_pattern(b.data(), bytes, ++seed);
        try {
          const auto h = p.register_tensor("t" + std::to_string(step), bytes, kind, b.data());
          live.push_back({h, bytes, kind, htp::checksum(b.data(), bytes)});
        } catch (const htp::out_of_memory&) {
        } catch (const htp::invalid_argument&) {  // never fits in this small HBM
          HTP_FUZZ_CHECK(bytes > c.hbm_budget_bytes, "a tensor that fits was rejected");
        }
        continue;
      }
      shadow& t = live[in.below(live.size())];
      switch (op) {
        case 1:  // unregister
          if (t.held > 0) {
            bool threw = false;
            try {
              p.unregister_tensor(t.h);
            } catch (const htp::invalid_argument&) {
              threw = true;
            }
            HTP_FUZZ_CHECK(threw, "unregister of an acquired tensor succeeded");
          } else {
            p.unregister_tensor(t.h);
            t = live.back();
            live.pop_back();
          }
          break;
        case 2:
        case 3:
        case 4: {  // acquire, verify, maybe write, release now or hold
          htp::device_span s;
          try {
            s = p.acquire(t.h, compute, (in.byte() & 1) != 0);
          } catch (const htp::out_of_memory&) {
            HTP_FUZZ_CHECK(c.on_oom == htp::oom_policy::throw_error, "OOM despite allow_degraded");
            break;
          }
          dev->checksum_async(s.data, s.bytes, slot, compute);
          compute.synchronize();
          HTP_FUZZ_CHECK(*slot == t.sum, "acquire handed out wrong bytes");
          const bool write = t.kind == htp::tensor_kind::mutable_state && op == 3 && t.held == 0;
          if (write) {
            dev->fill_pattern_async(s.data, s.bytes, ++seed, compute);
            p.release(t.h, compute, true);
            t.sum = pattern_sum(t.bytes, seed);
          } else if (op == 4 && t.held < 2) {
            ++t.held;
          } else {
            p.release(t.h, compute);
          }
          break;
        }
        case 5:  // release a held tensor
          if (t.held > 0) {
            p.release(t.h, compute);
            --t.held;
          } else {
            bool threw = false;
            try {
              p.release(t.h, compute);
            } catch (const htp::invalid_argument&) {
              threw = true;
            }
            HTP_FUZZ_CHECK(threw, "a release without acquire was accepted");
          }
          break;
        case 6: p.prefetch(t.h); break;
        case 7:
          if (t.held == 0) {
            p.evict(t.h);
            HTP_FUZZ_CHECK(p.info(t.h).where == htp::residency::host, "evict left it in HBM");
          }
          break;
        case 8: p.compact(); break;
        case 9: {
          if (in.byte() & 1) {
            std::vector<htp::tensor_handle> seq;
            for (int k = 0; k < 4; ++k) seq.push_back(live[in.below(live.size())].h);
            p.set_schedule(seq, (in.byte() & 1) != 0);
          } else if (!(t.kind == htp::tensor_kind::mutable_state && t.held > 0)) {
            verify_host(t);
          }
          break;
        }
        default: break;
      }
      const auto m = p.metrics();
      HTP_FUZZ_CHECK(m.registered_tensors == live.size(), "registered count differs");
      HTP_FUZZ_CHECK(m.hbm.used_bytes <= m.hbm.capacity_bytes, "HBM over budget");
      std::size_t host_sum = 0;
      for (const auto& x : live) host_sum += x.bytes;
      HTP_FUZZ_CHECK(m.host.used_bytes == host_sum, "host tier accounting differs");
    }
    for (auto& t : live) {
      for (; t.held > 0; --t.held) p.release(t.h, compute);
    }
    for (const auto& t : live) verify_host(t);
    for (const auto& t : live) p.unregister_tensor(t.h);
    const auto m = p.metrics();
    HTP_FUZZ_CHECK(m.hbm.used_bytes == 0 && m.host.used_bytes == 0, "bytes left after unregister");
    compute.synchronize();
    dev->deallocate(htp::memory_kind::pinned_host, slot, 8);
  }
  HTP_FUZZ_CHECK(dev->memory().free_bytes == device_free, "device memory not returned");
  return 0;
}
