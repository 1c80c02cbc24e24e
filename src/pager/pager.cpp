// The pager's public API: handle table, register/unregister, acquire/release, explicit eviction
// and compaction, copies and reports (the hints are in hints.cpp). See include/htp/pager.hpp and
// docs/pager.md.
#include "pager/pager_impl.hpp"

#include <algorithm>
#include <htp/checksum.hpp>
#include <htp/detail/check.hpp>

#include "transfer/link_checks.hpp"

#include <unistd.h>
#include <cerrno>
#include <cstring>
#include "log.hpp"

namespace htp {

using detail::pending_kind;
using detail::tensor_record;

const char* to_string(residency r) noexcept {
  switch (r) {
    case residency::host: return "host";
    case residency::loading: return "loading";
    case residency::resident: return "resident";
    case residency::writing_back: return "writing_back";
  }
  return "?";
}

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

/// What a host budget can never exceed: the 47-bit user address space of x86-64 and arm64 Linux
/// (128 TiB), in which every pinned slab must be mapped. Physical memory is no bound: a microVM's
/// MemTotal can read far below the RAM it can use (it grows as the guest touches memory), so a
/// budget above it is allowed and a slab the host cannot pin fails then, as out_of_memory.
constexpr std::size_t host_address_space_bytes = std::size_t{1} << 47;

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

pager::impl::impl(device& d, pager_config c)
    : dev(d), config(std::move(c)), stats(config.trace ? config.trace_capacity : 0), events(d),
      tensors(d, events, schedule, groups, stats, config.checked), private_stream(d) {
  validate(config);
  check_fits("hbm_budget_bytes", config.hbm_budget_bytes, dev.properties().total_memory,
             "the device's memory");
  check_fits("host_budget_bytes", config.host_budget_bytes, host_address_space_bytes,
             "the user address space of this host");
  warn_if_far_above_ram(config.host_budget_bytes, dev.properties().timing_only);
  slab_allocator_config hc;
  hc.t = tier::hbm;
  hc.budget_bytes = config.hbm_budget_bytes;
  hc.slab_bytes = config.slab_bytes;
  hc.page_bytes = config.page_bytes;
  hc.compaction_threshold = config.compaction_threshold;
  hbm = std::make_unique<slab_allocator>(dev, hc);
  if (config.host_budget_bytes > 0) {
    slab_allocator_config pc = hc;
    pc.t = tier::host;
    pc.budget_bytes = config.host_budget_bytes;
    // Host reservations (pinned in parallel) are at least as large as the HBM budget, so any
    // tensor that can be paged in has a host extent; with allow_degraded, one reservation.
    const std::size_t reservation = config.on_oom == oom_policy::allow_degraded
                                        ? config.host_budget_bytes
                                        : std::max(config.hbm_budget_bytes, std::size_t{1} << 30);
    pc.slabs_per_reservation = (reservation + config.slab_bytes - 1) / config.slab_bytes;
    host = std::make_unique<slab_allocator>(dev, pc);
    host->wait_reserved();
  }

  transfer_config tc;
  tc.chunk_bytes = config.chunk_bytes;
  tc.max_in_flight_chunks = config.max_in_flight_chunks;
  tc.h2d = config.h2d;
  tc.d2h = config.d2h;
  tc.finished_queue = true;  // reap() learns of completions from the engine's queue
  tc.verify_page_ins = config.verify_page_ins;
  tc.device_memory = regions_of(*hbm);
  if (host) tc.host_memory = regions_of(*host);
  engine = std::make_unique<transfer_engine>(dev, tc);
}

pager::impl::~impl() {
  try {
    engine->drain();
    for (std::uint32_t s = 0; s < tensors.size(); ++s) {
      for (const auto& r : tensors[s].release_events) dev.synchronize(r.event);
    }
    fences.for_each([&](const detail::fence& f) {  // kernels may still read memory already evicted
      for (auto e : f.events) dev.synchronize(e);
    });
  } catch (...) {
    // teardown proceeds: the memory goes back with the allocators below
  }
  engine.reset();
  for (const auto& [ptr, r] : host_regions) {
    if (r.kind != host_region_kind::pinned) {
      try {
        dev.unregister_host_memory(const_cast<char*>(ptr));
      } catch (...) {
      }
    }
  }
  hbm.reset();
  host.reset();
}

detail::host_region* pager::impl::region_of(const void* p, std::size_t bytes) {
  const auto* q = static_cast<const char*>(p);
  auto it = host_regions.upper_bound(q);
  if (it == host_regions.begin()) return nullptr;
  --it;
  if (q < it->first || bytes > it->second.bytes ||
      static_cast<std::size_t>(q - it->first) > it->second.bytes - bytes) {
    return nullptr;
  }
  return &it->second;
}

// ---- pager
// ---------------------------------------------------------------------------------------

pager::pager(device& dev, pager_config config)
    : impl_(std::make_unique<impl>(dev, std::move(config))) {}

pager::~pager() = default;

namespace {
void check_fits_hbm(const pager::impl& p, const std::string& name, std::size_t bytes) {
  HTP_EXPECTS(bytes > 0, invalid_argument, "register_tensor('", name,
              "', 0 bytes): a tensor must have at least one byte");
  HTP_EXPECTS(bytes <= p.hbm->max_request_bytes() || p.config.on_oom == oom_policy::allow_degraded,
              invalid_argument, "register_tensor('", name, "', ", bytes,
              " bytes): it can never fit in HBM, whose largest extent is ",
              p.hbm->max_request_bytes(),
              " bytes (pager_config.hbm_budget_bytes = ", p.config.hbm_budget_bytes,
              "). Raise pager_config.hbm_budget_bytes, split the tensor, or set "
              "pager_config.on_oom = allow_degraded");
}
}  // namespace

tensor_handle pager::register_tensor(std::string name, std::size_t bytes, tensor_kind kind,
                                     const void* source) {
  auto& p = *impl_;
  check_fits_hbm(p, name, bytes);
  HTP_EXPECTS(p.host != nullptr, invalid_argument, "register_tensor('", name,
              "'): pager_config.host_budget_bytes is 0, so the pager holds no host memory of its "
              "own. Lend yours with add_host_region and use register_tensor_at, or set "
              "pager_config.host_budget_bytes");
  HTP_EXPECTS(bytes <= p.host->max_request_bytes(), invalid_argument, "register_tensor('", name,
              "', ", bytes, " bytes): larger than the largest host extent (",
              p.host->max_request_bytes(),
              " bytes; pager_config.host_budget_bytes = ", p.config.host_budget_bytes,
              "). Raise pager_config.host_budget_bytes or lend the "
              "memory with add_host_region and register_tensor_at");
  extent h;
  {
    std::lock_guard lock(p.mutex);
    try {
      h = p.host->allocate(bytes);
    } catch (const out_of_memory& e) {
      throw out_of_memory(detail::concat("register_tensor('", name, "', ", bytes,
                                         " bytes): the host tier is full. Raise "
                                         "pager_config.host_budget_bytes or unregister tensors. ",
                                         e.what()),
                          bytes);
    }
  }
  // Fill outside the lock: registering a large tensor must not stall acquires. A timing-only
  // device's host tier holds no bytes: nothing to fill.
  if (p.dev.properties().timing_only) {
  } else if (source != nullptr) {
    std::memcpy(h.ptr, source, bytes);
  } else {
    std::memset(h.ptr, 0, bytes);
  }
  std::lock_guard lock(p.mutex);
  return p.tensors.add(
      detail::tensor_spec::in_host(std::move(name), bytes, kind, h, /*external=*/false));
}

tensor_handle pager::register_tensor_at(std::string name, std::size_t bytes, tensor_kind kind,
                                        void* host_ptr) {
  auto& p = *impl_;
  check_fits_hbm(p, name, bytes);
  std::lock_guard lock(p.mutex);
  detail::host_region* r = p.region_of(host_ptr, bytes);
  HTP_EXPECTS(r != nullptr, invalid_argument, "register_tensor_at('", name, "', ", bytes,
              " bytes at ", host_ptr,
              "): the range is not inside one region lent with add_host_region; lend "
              "the memory first");
  HTP_EXPECTS(
      !(kind == tensor_kind::mutable_state && r->kind == host_region_kind::pageable_read_only),
      invalid_argument, "register_tensor_at('", name,
      "'): a mutable tensor cannot live in "
      "a read-only region (its write-backs would land there); lend writable memory");
  ++r->tensors;
  return p.tensors.add(detail::tensor_spec::in_host(std::move(name), bytes, kind,
                                                    extent{host_ptr, bytes}, /*external=*/true));
}

void pager::add_host_region(void* ptr, std::size_t bytes, host_region_kind kind) {
  auto& p = *impl_;
  HTP_EXPECTS(ptr != nullptr && bytes > 0, invalid_argument, "add_host_region(", ptr, ", ", bytes,
              "): give a non-null range of at least one byte");
  // No host maps more than its user address space: a larger range is a wrong size, on any backend.
  const auto start = reinterpret_cast<std::uintptr_t>(ptr);
  HTP_EXPECTS(bytes <= host_address_space_bytes && start <= host_address_space_bytes - bytes,
              invalid_argument, "add_host_region(", ptr, ", ", bytes, "): the range runs past the ",
              host_address_space_bytes,
              "-byte user address space; pass the size of memory the program actually holds");
  {
    std::lock_guard lock(p.mutex);
    const auto* b = static_cast<const char*>(ptr);
    auto next = p.host_regions.lower_bound(b);
    const bool overlaps = (next != p.host_regions.end() && next->first < b + bytes) ||
                          (next != p.host_regions.begin() &&
                           std::prev(next)->first + std::prev(next)->second.bytes > b);
    HTP_EXPECTS(!overlaps, invalid_argument, "add_host_region(", ptr, ", ", bytes,
                "): overlaps a region already lent; lend each range once");
  }
  // Registering pins pages: slow, so outside the lock (acquires go on meanwhile).
  if (kind != host_region_kind::pinned) {
    p.dev.register_host_memory(ptr, bytes, kind == host_region_kind::pageable_read_only);
  } else {
    // "Pinned" is checked, not trusted: both ends must be mapped for this GPU (throws otherwise).
    (void)p.dev.mapped_device_pointer(ptr);
    (void)p.dev.mapped_device_pointer(static_cast<char*>(ptr) + bytes - 1);
  }
  try {
    p.engine->add_host_memory({ptr, bytes});
  } catch (...) {
    if (kind != host_region_kind::pinned) p.dev.unregister_host_memory(ptr);
    throw;
  }
  std::lock_guard lock(p.mutex);
  p.host_regions.emplace(static_cast<const char*>(ptr), detail::host_region{bytes, kind, 0});
}

bool pager::in_host_region(const void* ptr, std::size_t bytes) const {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  return p.region_of(ptr, bytes) != nullptr;
}

void pager::remove_host_region(void* ptr) {
  auto& p = *impl_;
  host_region_kind kind;
  {
    std::lock_guard lock(p.mutex);
    auto it = p.host_regions.find(static_cast<const char*>(ptr));
    HTP_EXPECTS(it != p.host_regions.end(), invalid_argument, "remove_host_region(", ptr,
                "): not the start of a region lent with add_host_region");
    HTP_EXPECTS(it->second.tensors == 0, invalid_argument, "remove_host_region(", ptr,
                "): ", it->second.tensors,
                " registered tensor(s) still live in it; unregister them first");
    kind = it->second.kind;
    p.host_regions.erase(it);
  }
  p.engine->remove_host_memory(ptr);
  if (kind != host_region_kind::pinned) p.dev.unregister_host_memory(ptr);
}

void pager::unregister_tensor(tensor_handle h) {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  const std::uint32_t slot = p.quiesce(lock, h, [](const tensor_record& r) {
    HTP_EXPECTS(r.pins == 0, invalid_argument, "unregister_tensor('", r.name, "'): it is acquired ",
                r.pins, " time(s); release it first");
  });
  const tensor_record& t = p.tensors[slot];
  if (t.external) {
    // The host extent's size: a compressed tensor's bytes are its decoded size, not what it holds.
    if (auto* r = p.region_of(t.host.ptr, t.host.bytes)) --r->tensors;
  } else if (!t.device_resident && !t.file) {
    p.host->deallocate(t.host.ptr, t.host.bytes);
  }
  const bool scheduled = p.schedule.contains(slot);
  for (std::uint32_t s : p.groups.forget_slot(slot)) {
    if (s != slot) p.tensors.reindex(s);
  }
  if (const auto held = p.tensors.remove(slot)) p.free_hbm(*held);
  if (scheduled) {
    // The schedule's positions shift: re-key every tensor holding HBM (O(n), rare).
    p.schedule.forget(slot);
    p.pace.reset(p.schedule.size());  // positions moved
    p.tensors.reindex_all();
  }
}

device_span pager::acquire(tensor_handle h, stream_ref compute, bool wait) {
  device_span out;
  impl_->acquire_n(&h, 1, compute, wait, &out);
  return out;
}

std::vector<device_span> pager::acquire(const std::vector<tensor_handle>& hs, stream_ref compute,
                                        bool wait) {
  std::vector<device_span> out(hs.size());
  impl_->acquire_n(hs.data(), hs.size(), compute, wait, out.data());
  return out;
}

void pager::release(tensor_handle h, stream_ref compute, bool dirty) {
  impl_->release_n(&h, 1, compute, dirty);
}

void pager::release(const std::vector<tensor_handle>& hs, stream_ref compute, bool dirty) {
  impl_->release_n(hs.data(), hs.size(), compute, dirty);
}

void pager::evict(tensor_handle h) {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  for (;;) {
    p.reap();
    const std::uint32_t slot = p.slot_of(h);
    const tensor_record& t = p.tensors[slot];
    HTP_EXPECTS(t.pins == 0, invalid_argument, "evict('", t.name,
                "'): it is acquired; release it first");
    HTP_EXPECTS(
        !t.device_resident, invalid_argument, "evict('", t.name,
        "'): it is device-resident (register_resident) and has no host copy to fall back on; "
        "unregister it to free its HBM");
    if (t.where == residency::host) return;
    detail::wait_set w;
    bool mine = false;  // the write-back this call started
    if (t.pending != pending_kind::none) {
      w.tickets.push_back(t.ticket);
    } else if (!p.tensors.settle(slot)) {
      for (const auto& r : t.release_events) w.events.push_back(r.event);
    } else {
      p.evict_now(slot);
      if (p.tensors[slot].pending == pending_kind::none) return;
      w.tickets.push_back(p.tensors[slot].ticket);
      mine = true;
    }
    const std::exception_ptr failed = p.wait_for(lock, w);
    if (mine && failed) {  // the tensor stays resident and dirty; nothing is lost
      p.reap();
      impl::throw_transfer_failed(detail::concat("evict('", p.tensors.get(h).name, "')"), failed);
    }
  }
}

std::size_t pager::compact() {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  p.reap();
  const std::size_t moves = p.start_compaction(0);
  detail::wait_set w;
  p.add_move_waits(w);
  p.wait_for(lock, w);
  p.reap();
  return moves;
}

namespace {

// A compressed tensor's bytes, decoded on every core without the pager's lock: its wire bytes are
// copied out under the lock first (the host copy may be unregistered once the lock is dropped; a
// companion file is read after). Decoding is what takes time: ~0.3 GB/s a core.
void copy_coded_to_host(std::unique_lock<std::mutex>& lock, const detail::tensor_record& t,
                        void* dst) {
  const std::shared_ptr<const coded_layout> layout = t.coded;
  const std::shared_ptr<const tensor_file> file = t.file;
  const std::uint64_t offset = t.file_offset;
  const std::string name = t.name;
  std::vector<std::uint8_t> wire(layout->wire_bytes);
  if (!file) std::memcpy(wire.data(), t.host.ptr, wire.size());
  lock.unlock();
  if (file) {
    try {
      file->read(wire.data(), wire.size(), offset);
    } catch (const io_error& e) {
      throw io_error(
          detail::concat("copy_to_host('", name, "'): reading the companion failed: ", e.what()),
          e.path(), e.error_number());
    }
  }
  pager::impl::decode_to_host(*layout, wire.data(), dst);
}

// A file-backed tensor read by copy_to_host is checked as its page-ins are: each chunk against
// the checksum taken at registration, so a changed file never reaches a checkpoint silently.
void check_read(const void* bytes_read, std::size_t bytes, const std::vector<std::uint64_t>& sums,
                std::size_t chunk, const std::string& name, const tensor_file& f,
                std::uint64_t offset) {
  const auto* at = static_cast<const unsigned char*>(bytes_read);
  for (std::size_t k = 0, done = 0; done < bytes; ++k, done += chunk) {
    const std::size_t n = std::min(chunk, bytes - done);
    if (k < sums.size() && checksum(at + done, n) == sums[k]) continue;
    throw corrupt_data(detail::concat(
        "copy_to_host('", name, "'): chunk ", k, " (", n, " bytes at offset ", offset + done,
        " of '", f.name(),
        "') does not match the checksum taken at registration: the file changed since; "
        "restore it, or register the tensor again"));
  }
}

}  // namespace

void pager::copy_to_host(tensor_handle h, void* dst) {
  auto& p = *impl_;
  HTP_EXPECTS(dst != nullptr, invalid_argument, "copy_to_host: null destination");
  HTP_EXPECTS(!p.dev.properties().timing_only, invalid_argument,
              "copy_to_host: the device is timing-only (sim_config::timing_only) and holds no "
              "tensor bytes; "
              "use a sim device that stores bytes to read them back");
  std::unique_lock lock(p.mutex);
  const std::uint32_t slot = p.quiesce(lock, h, [](const tensor_record& r) {
    HTP_EXPECTS(!(r.kind == tensor_kind::mutable_state && r.pins > 0), invalid_argument,
                "copy_to_host('", r.name,
                "'): the mutable tensor is acquired and may be being "
                "written; release it first");
  });
  const tensor_record& t = p.tensors[slot];
  const std::string name = t.name;
  std::string failure;
  if (t.hbm && (t.dirty || t.device_resident)) {
    // HBM is authoritative. Pinned meanwhile (nothing evicts or moves it), the copy and its wait
    // run without the lock: `dst` may be pageable, which makes the copy synchronous.
    p.tensors.pin(slot);
    const extent from = *t.hbm;
    lock.unlock();
    try {
      p.dev.copy_async(dst, from.ptr, from.bytes, copy_direction::device_to_host, p.private_stream);
      p.private_stream.synchronize();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    lock.lock();
    p.unpin(slot);
  } else if (t.coded) {
    copy_coded_to_host(lock, t, dst);
  } else if (t.file) {
    // A weight's file is authoritative; read it without the lock (a read may take milliseconds).
    const std::shared_ptr<const tensor_file> f = t.file;
    const std::uint64_t offset = t.file_offset;
    const std::size_t bytes = t.bytes;
    const auto sums = t.chunk_checksums;  // null: verify_page_ins was off at registration
    lock.unlock();
    try {
      f->read(dst, bytes, offset);
    } catch (const io_error& e) {  // the type acquire throws for the same fault
      throw io_error(
          detail::concat("copy_to_host('", name, "'): reading the file failed: ", e.what()),
          e.path(), e.error_number());
    }
    if (sums) check_read(dst, bytes, *sums, p.engine->config().chunk_bytes, name, *f, offset);
  } else {
    std::memcpy(dst, t.host.ptr, t.bytes);
  }
  if (!failure.empty())
    impl::throw_copy_failed(detail::concat("copy_to_host('", name, "')"), failure);
}

void pager::synchronize() {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  for (;;) {
    p.reap();
    detail::wait_set w;
    for (std::uint32_t s : p.tensors.in_flight()) w.tickets.push_back(p.tensors[s].ticket);
    for (const auto& [id, d] : p.detached_loads) w.tickets.push_back(transfer_ticket{id});
    if (w.empty()) return;
    p.wait_for(lock, w);
  }
}

tensor_info pager::info(tensor_handle h) const {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.reap();
  const tensor_record& t = p.tensors.get(h);
  return {t.name,           t.bytes, t.kind,     t.where,
          t.pins,           t.dirty, t.degraded, t.pending != pending_kind::none,
          t.device_resident};
}

void pager::reset_metrics() {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.reap();
  p.stats.reset(p.hbm_bytes_held, p.hbm->capacity_bytes());
}

pager_metrics pager::metrics() const {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  p.reap();
  p.sample_occupancy();
  pager_metrics m = p.snapshot();
  const std::vector<detail::fault_wait_sample> samples =
      p.stats.fault_waits();  // copied; sorted unlocked
  const std::uint64_t dropped = p.stats.fault_waits_dropped();
  const double peak = static_cast<double>(p.engine->link_peak(copy_direction::host_to_device));
  lock.unlock();
  m.fault_wait = detail::pager_stats::summarize(samples, dropped, peak);
  return m;
}

void pager::trace_compute_span(const std::string& name, std::chrono::steady_clock::time_point begin,
                               std::chrono::steady_clock::time_point end) {
  impl_->stats.compute_span(name, begin, end);
}

void pager::write_trace(const std::string& path) const {
  auto& p = *impl_;
  HTP_EXPECTS(p.stats.tracing(), invalid_argument,
              "write_trace: tracing is off; set pager_config.trace = true");
  {
    std::lock_guard lock(p.mutex);
    p.reap();
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  HTP_EXPECTS(f != nullptr, invalid_argument, "write_trace: cannot open '", path, "' for writing");
  const std::string json = p.stats.trace()->to_json();
  const bool written = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  const int e = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const int why = !written ? e : errno;
    throw io_error(detail::concat("write_trace: writing '", path, "' failed: ", std::strerror(why),
                                  "; free space or choose another path"),
                   path, why);
  }
}

transfer_engine& pager::engine() noexcept { return *impl_->engine; }
const pager_config& pager::config() const noexcept { return impl_->config; }

}  // namespace htp
