// The pager's public API: handle table, register/unregister, acquire/release, explicit eviction
// and compaction, copies and reports (the hints are in hints.cpp). See include/htp/pager.hpp and
// docs/pager.md.
#include "pager/pager_impl.hpp"

#include <algorithm>
#include <htp/checksum.hpp>
#include <htp/detail/check.hpp>

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

pager::impl::impl(device& d, pager_config c)
    : dev(d), config(std::move(c)), tiers(dev, config),
      observe(config.trace ? config.trace_capacity : 0), events(d),
      prefetch(d, config, tensors, *tiers.engine, observe.all),
      tensors(d, events, prefetch.future().schedule, prefetch.future().groups, observe.all,
              config.checked, /*stamp_pins=*/config.trace),
      room(d, config, *tiers.hbm, *tiers.engine, tensors, events, prefetch.future(), observe.all) {}

pager::impl::~impl() {
  try {
    tiers.engine->drain();
    for (std::uint32_t s = 0; s < tensors.size(); ++s) {
      for (const auto& r : tensors[s].release_events) dev.synchronize(r.event);
    }
    room.synchronize_fences();
  } catch (...) {
    // teardown proceeds: the memory goes back with the allocators
  }
  tiers.engine.reset();  // no copy reads caller memory any more
  for (const auto& [ptr, r] : host_regions) {
    if (r.kind != host_region_kind::pinned) {
      try {
        dev.unregister_host_memory(const_cast<char*>(ptr));
      } catch (...) {
      }
    }
  }
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
  HTP_EXPECTS(
      bytes <= p.tiers.hbm->max_request_bytes() || p.config.on_oom == oom_policy::allow_degraded,
      invalid_argument, "register_tensor('", name, "', ", bytes,
      " bytes): it can never fit in HBM, whose largest extent is ",
      p.tiers.hbm->max_request_bytes(),
      " bytes (pager_config.hbm_budget_bytes = ", p.config.hbm_budget_bytes,
      "). Raise pager_config.hbm_budget_bytes, split the tensor, or set "
      "pager_config.on_oom = allow_degraded");
}
}  // namespace

tensor_handle pager::register_tensor(std::string name, std::size_t bytes, tensor_kind kind,
                                     const void* source) {
  auto& p = *impl_;
  check_fits_hbm(p, name, bytes);
  HTP_EXPECTS(!(kind == tensor_kind::activation && source != nullptr), invalid_argument,
              "register_tensor('", name,
              "', activation): an activation has no initial content (it starts dead; its first "
              "acquire is fresh and the kernels write it); pass source = nullptr, or register it "
              "as tensor_kind::mutable_state to start from these bytes");
  HTP_EXPECTS(p.tiers.host != nullptr, invalid_argument, "register_tensor('", name,
              "'): pager_config.host_budget_bytes is 0, so the pager holds no host memory of its "
              "own. Lend yours with add_host_region and use register_tensor_at, or set "
              "pager_config.host_budget_bytes");
  HTP_EXPECTS(bytes <= p.tiers.host->max_request_bytes(), invalid_argument, "register_tensor('",
              name, "', ", bytes, " bytes): larger than the largest host extent (",
              p.tiers.host->max_request_bytes(),
              " bytes; pager_config.host_budget_bytes = ", p.config.host_budget_bytes,
              "). Raise pager_config.host_budget_bytes or lend the "
              "memory with add_host_region and register_tensor_at");
  extent h;
  {
    std::lock_guard lock(p.mutex);
    try {
      h = p.tiers.host->allocate(bytes);
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
  if (p.dev.properties().timing_only || kind == tensor_kind::activation) {
    // (an activation's host extent is written only by the write-back of a live one)
  } else if (source != nullptr) {
    std::memcpy(h.ptr, source, bytes);
  } else {
    std::memset(h.ptr, 0, bytes);
  }
  std::lock_guard lock(p.mutex);
  return p.tensors.add(detail::tensor_spec::of(
      std::move(name), kind, tensor_source::in_pinned_tier(h.ptr, h.bytes, bytes)));
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
  HTP_EXPECTS(!(is_mutable(kind) && r->kind == host_region_kind::pageable_read_only),
              invalid_argument, "register_tensor_at('", name,
              "'): a mutable tensor cannot live in "
              "a read-only region (its write-backs would land there); lend writable memory");
  ++r->tensors;
  return p.tensors.add(detail::tensor_spec::of(std::move(name), kind,
                                               tensor_source::in_caller_memory(host_ptr, bytes)));
}

void pager::add_host_region(void* ptr, std::size_t bytes, host_region_kind kind) {
  auto& p = *impl_;
  HTP_EXPECTS(ptr != nullptr && bytes > 0, invalid_argument, "add_host_region(", ptr, ", ", bytes,
              "): give a non-null range of at least one byte");
  // No host maps more than its user address space: a larger range is a wrong size, on any backend.
  const auto start = reinterpret_cast<std::uintptr_t>(ptr);
  HTP_EXPECTS(bytes <= detail::host_address_space_bytes &&
                  start <= detail::host_address_space_bytes - bytes,
              invalid_argument, "add_host_region(", ptr, ", ", bytes, "): the range runs past the ",
              detail::host_address_space_bytes,
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
    p.tiers.engine->add_host_memory({ptr, bytes});
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
  p.tiers.engine->remove_host_memory(ptr);
  if (kind != host_region_kind::pinned) p.dev.unregister_host_memory(ptr);
}

void pager::unregister_tensor(tensor_handle h) {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  const std::uint32_t slot = p.quiesce(lock, h, [](const tensor_record& r) {
    HTP_EXPECTS(r.pins == 0, invalid_argument, "unregister_tensor('", r.name, "'): it is acquired ",
                r.pins, " time(s); release it first");
  });
  // The host extent's size: a compressed tensor's bytes are its decoded size, not what it holds.
  const tensor_source& src = p.tensors[slot].source;
  if (src.place == source_place::caller_memory) {
    if (auto* r = p.region_of(src.host, src.host_bytes)) --r->tensors;
  } else if (src.place == source_place::pinned_tier) {
    p.tiers.host->deallocate(src.host, src.host_bytes);
  }
  p.prefetch.forget(slot);
  if (const auto held = p.tensors.remove(slot)) p.room.free_hbm(*held);
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

void pager::release_last_use(tensor_handle h, stream_ref compute) {
  impl_->release_n(&h, 1, compute, /*dirty=*/false, /*last_use=*/true);
}

void pager::discard(tensor_handle h) {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.reap();  // a copy that finished is accounted first: the state below is current
  const std::uint32_t slot = p.slot_of(h);
  const tensor_record& t = p.tensors[slot];
  HTP_EXPECTS(t.kind == tensor_kind::activation, invalid_argument, "discard('", t.name,
              "'): it is ", t.kind == tensor_kind::weight ? "a weight" : "mutable_state",
              ", whose content lives as long as it is registered; only an activation's content can "
              "be discarded. Register saved tensors as tensor_kind::activation, or use evict() or "
              "unregister_tensor()");
  HTP_EXPECTS(t.pins == 0, invalid_argument, "discard('", t.name, "'): it is acquired ", t.pins,
              " time(s), so kernels may still use it; release it first, or end its last acquire "
              "with release_last_use (which orders the content's death on the stream)");
  if (!t.dead) p.tensors.discard(slot);
  // Freed now, fenced by its release events; with a copy in flight, when that copy completes.
  p.room.discard_dead(slot);
  p.sample_occupancy();
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
      p.room.evict(slot, detail::cause::request);
      if (p.tensors[slot].pending == pending_kind::none) return;
      w.tickets.push_back(p.tensors[slot].ticket);
      mine = true;
    }
    const std::exception_ptr failed = p.room.wait(lock, w);
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
  const std::size_t moves = p.room.compact(0, detail::cause::request);
  detail::wait_set w;
  p.room.add_move_waits(w);
  p.room.wait(lock, w);
  p.reap();
  return moves;
}

namespace {

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

/// A tensor's bytes from its source (`src`, a copy taken under the lock), into `dst`: a raw host
/// copy is copied under the lock (the memory may be unregistered once it is dropped); a file is
/// read, and coded bytes decoded on every core, without it (a read may take milliseconds, a decode
/// ~0.3 GB/s a core). Returns with the lock dropped.
void read_source(std::unique_lock<std::mutex>& lock, const tensor_source src, void* dst,
                 const std::string& name, std::size_t chunk_bytes) {
  std::vector<std::uint8_t> wire(src.is_coded() ? src.wire_bytes() : 0);
  if (src.host != nullptr)
    std::memcpy(src.is_coded() ? wire.data() : dst, src.host, src.wire_bytes());
  lock.unlock();
  if (src.file) {
    try {
      src.file->read(src.is_coded() ? wire.data() : dst, src.wire_bytes(), src.file_offset);
    } catch (const io_error& e) {  // the type acquire throws for the same fault
      throw io_error(
          detail::concat("copy_to_host('", name, "'): reading the file failed: ", e.what()),
          e.path(), e.error_number());
    }
    if (src.chunk_checksums)  // null: verify_page_ins was off at registration
      check_read(dst, src.bytes, *src.chunk_checksums, chunk_bytes, name, *src.file,
                 src.file_offset);
  }
  if (src.is_coded()) pager::impl::decode_to_host(*src.coded, wire.data(), dst);
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
    HTP_EXPECTS(!(is_mutable(r.kind) && r.pins > 0), invalid_argument, "copy_to_host('", r.name,
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
      p.dev.copy_async(dst, from.ptr, from.bytes, copy_direction::device_to_host,
                       p.room.private_stream());
      p.room.private_stream().synchronize();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    lock.lock();
    p.unpin(slot);
  } else {
    read_source(lock, t.source, dst, name, p.tiers.engine->config().chunk_bytes);
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
    p.room.detached_loads(w.tickets);
    if (w.empty()) return;
    p.room.wait(lock, w);
  }
}

tensor_info pager::info(tensor_handle h) const {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.reap();
  const tensor_record& t = p.tensors.get(h);
  return {t.name,
          t.bytes,
          t.kind,
          t.where,
          t.pins,
          t.dirty,
          t.degraded,
          t.pending != pending_kind::none,
          t.device_resident,
          t.dead};
}

void pager::reset_metrics() {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.reap();
  p.observe.stats.reset(p.room.held_bytes(), p.tiers.hbm->capacity_bytes());
}

pager_metrics pager::metrics() const {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  p.reap();
  p.sample_occupancy();
  pager_metrics m = p.snapshot();
  const std::vector<detail::fault_wait_sample> samples =
      p.observe.stats.fault_waits();  // copied; sorted unlocked
  const std::uint64_t dropped = p.observe.stats.fault_waits_dropped();
  const double peak =
      static_cast<double>(p.tiers.engine->link_peak(copy_direction::host_to_device));
  lock.unlock();
  m.fault_wait = detail::pager_stats::summarize(samples, dropped, peak);
  return m;
}

void pager::trace_compute_span(const std::string& name, std::chrono::steady_clock::time_point begin,
                               std::chrono::steady_clock::time_point end) {
  impl_->observe.stats.compute_span(name, begin, end);
}

void pager::write_trace(const std::string& path) const {
  auto& p = *impl_;
  HTP_EXPECTS(p.observe.stats.tracing(), invalid_argument,
              "write_trace: tracing is off; set pager_config.trace = true");
  {
    std::lock_guard lock(p.mutex);
    p.reap();
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  HTP_EXPECTS(f != nullptr, invalid_argument, "write_trace: cannot open '", path, "' for writing");
  const std::string json = p.observe.stats.trace()->to_json();
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

transfer_engine& pager::engine() noexcept { return *impl_->tiers.engine; }
const pager_config& pager::config() const noexcept { return impl_->config; }

}  // namespace htp
