// The tiers (tiers.hpp): the pager_config checks, the HBM and host slab allocators and the
// transfer engine over them.
#include "pager/tiers.hpp"

#include <htp/detail/check.hpp>
#include <htp/detail/link_checks.hpp>

#include <unistd.h>

#include "log.hpp"

#include <algorithm>

namespace htp::detail {

namespace {

void validate(const pager_config& c) {
  HTP_EXPECTS(c.slab_bytes >= (std::size_t{64} << 10) && c.slab_bytes <= (std::size_t{1} << 30) &&
                  (c.slab_bytes & (c.slab_bytes - 1)) == 0,
              invalid_argument, "pager_config.slab_bytes is ", c.slab_bytes,
              "; it must be a power of two from 65536 (64 KiB) to 1073741824 (1 GiB), e.g. 64 MiB");
  HTP_EXPECTS(
      c.page_bytes == 0 || (c.page_bytes >= 4096 && c.page_bytes <= c.slab_bytes &&
                            (c.page_bytes & (c.page_bytes - 1)) == 0),
      invalid_argument, "pager_config.page_bytes is ", c.page_bytes,
      "; it must be 0 (automatic) or a power of two from 4096 (4 KiB) to pager_config.slab_bytes (",
      c.slab_bytes, ")");
  HTP_EXPECTS(c.hbm_budget_bytes >= c.slab_bytes, invalid_argument,
              "pager_config.hbm_budget_bytes (", c.hbm_budget_bytes,
              ") must hold at least one slab (pager_config.slab_bytes = ", c.slab_bytes, ")");
  HTP_EXPECTS(c.host_budget_bytes == 0 || c.host_budget_bytes >= c.slab_bytes, invalid_argument,
              "pager_config.host_budget_bytes (", c.host_budget_bytes,
              ") must be 0 (tensors in caller memory only) or hold at least one slab "
              "(pager_config.slab_bytes = ",
              c.slab_bytes, ")");
  HTP_EXPECTS(c.chunk_bytes > 0, invalid_argument, "pager_config.chunk_bytes is 0; use e.g. 2 MiB");
  HTP_EXPECTS(c.compaction_threshold > 0 && c.compaction_threshold <= 1, invalid_argument,
              "pager_config.compaction_threshold is ", c.compaction_threshold,
              "; it must be in (0, 1], e.g. 0.15");
  HTP_EXPECTS(c.prefetch_lookahead <= 64, invalid_argument, "pager_config.prefetch_lookahead is ",
              c.prefetch_lookahead, "; more than 64 tensors ahead only wastes HBM");
  HTP_EXPECTS(c.lookahead_max_tensors >= 1 && c.lookahead_max_tensors <= 4096, invalid_argument,
              "pager_config.lookahead_max_tensors is ", c.lookahead_max_tensors,
              "; it must be in [1, 4096] (it bounds what one call examines; 256 is the default)");
  HTP_EXPECTS(c.popularity_half_life > 0, invalid_argument, "pager_config.popularity_half_life is ",
              c.popularity_half_life,
              "; it must be positive (acquires of the group; 64 is the default)");
  HTP_EXPECTS(c.latency_budget.count() > 0, invalid_argument, "pager_config.latency_budget is ",
              c.latency_budget.count(), " ms; it must be positive, e.g. 200 ms");
  HTP_EXPECTS(c.max_in_flight_chunks >= 1, invalid_argument,
              "pager_config.max_in_flight_chunks is ", c.max_in_flight_chunks,
              "; at least 1 chunk per direction must be in flight (3 is the default)");
  detail::check_link_config(c.h2d, "pager_config.h2d", c.chunk_bytes, "pager_config.chunk_bytes");
  detail::check_link_config(c.d2h, "pager_config.d2h", c.chunk_bytes, "pager_config.chunk_bytes");
}

std::vector<memory_region> regions_of(slab_allocator& a) {
  std::vector<memory_region> out;
  for (const extent& e : a.reservations()) out.push_back({e.ptr, e.bytes});
  return out;
}

/// A note, not a refusal, when the host budget is over twice what MemTotal reads: a typo'd budget
/// shows in the log before the pins fail (or, in a VM whose RAM grows as it is used, before the
/// out-of-memory killer acts). A timing-only device's pinned memory is address space only.
void warn_if_far_above_ram(std::size_t budget, bool timing_only) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (timing_only || pages <= 0 || page <= 0) return;
  const auto ram = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
  if (budget / 2 > ram) {
    detail::logger().warn(
        "pager_config.host_budget_bytes is {} bytes, over twice the {} bytes MemTotal "
        "reports; pinning it may fail or exhaust the host (lower it unless this VM's "
        "memory grows on use)",
        budget, ram);
  }
}

/// A budget larger than the memory behind it fails here, with the field's name, before any
/// bookkeeping is sized by it.
void check_fits(const char* field, std::size_t budget, std::size_t available, const char* what) {
  if (available == 0 || budget <= available) return;
  throw out_of_memory(detail::concat("pager_config.", field, " is ", budget, " bytes, but ", what,
                                     " has ", available, " bytes. Lower ", field, "."),
                      budget);
}

}  // namespace

tiers::tiers(device& dev, const pager_config& c) {
  validate(c);
  check_fits("hbm_budget_bytes", c.hbm_budget_bytes, dev.properties().total_memory,
             "the device's memory");
  check_fits("host_budget_bytes", c.host_budget_bytes, host_address_space_bytes,
             "the user address space of this host");
  warn_if_far_above_ram(c.host_budget_bytes, dev.properties().timing_only);
  slab_allocator_config hc;
  hc.t = tier::hbm;
  hc.budget_bytes = c.hbm_budget_bytes;
  hc.slab_bytes = c.slab_bytes;
  hc.page_bytes = c.page_bytes;
  hc.compaction_threshold = c.compaction_threshold;
  hbm = std::make_unique<slab_allocator>(dev, hc);
  if (c.host_budget_bytes > 0) {
    slab_allocator_config pc = hc;
    pc.t = tier::host;
    pc.budget_bytes = c.host_budget_bytes;
    // Host reservations (pinned in parallel) are at least as large as the HBM budget, so any
    // tensor that can be paged in has a host extent; with allow_degraded, one reservation.
    const std::size_t reservation = c.on_oom == oom_policy::allow_degraded
                                        ? c.host_budget_bytes
                                        : std::max(c.hbm_budget_bytes, std::size_t{1} << 30);
    pc.slabs_per_reservation = (reservation + c.slab_bytes - 1) / c.slab_bytes;
    host = std::make_unique<slab_allocator>(dev, pc);
    host->wait_reserved();
  }

  transfer_config tc;
  tc.chunk_bytes = c.chunk_bytes;
  tc.max_in_flight_chunks = c.max_in_flight_chunks;
  tc.h2d = c.h2d;
  tc.d2h = c.d2h;
  tc.finished_queue = true;  // reap() learns of completions from the engine's queue
  tc.verify_page_ins = c.verify_page_ins;
  tc.device_memory = regions_of(*hbm);
  if (host) tc.host_memory = regions_of(*host);
  engine = std::make_unique<transfer_engine>(dev, tc);
}

tiers::~tiers() {
  engine.reset();  // before the memory it copies between
  hbm.reset();
  host.reset();
}

}  // namespace htp::detail
