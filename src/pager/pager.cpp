// The pager's public API: handle table, register/unregister, acquire/release, prefetch, schedule,
// explicit eviction and compaction. See include/htp/pager.hpp and docs/pager.md.
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

#include <cstring>
#include <spdlog/spdlog.h>

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
  HTP_EXPECTS(c.hbm_budget_bytes >= c.slab_bytes, invalid_argument, "pager_config.hbm_budget_bytes (",
              c.hbm_budget_bytes, ") must hold at least one slab (slab_bytes = ", c.slab_bytes, ")");
  HTP_EXPECTS(c.host_budget_bytes >= c.slab_bytes, invalid_argument,
              "pager_config.host_budget_bytes (", c.host_budget_bytes,
              ") must hold at least one slab (slab_bytes = ", c.slab_bytes, ")");
  HTP_EXPECTS(c.compaction_threshold > 0 && c.compaction_threshold <= 1, invalid_argument,
              "pager_config.compaction_threshold is ", c.compaction_threshold,
              "; it must be in (0, 1], e.g. 0.15");
  HTP_EXPECTS(c.prefetch_lookahead <= 64, invalid_argument, "pager_config.prefetch_lookahead is ",
              c.prefetch_lookahead, "; more than 64 tensors ahead only wastes HBM");
  HTP_EXPECTS(c.latency_budget.count() > 0, invalid_argument,
              "pager_config.latency_budget must be positive");
}

std::vector<memory_region> regions_of(slab_allocator& a) {
  std::vector<memory_region> out;
  for (const extent& e : a.reservations()) out.push_back({e.ptr, e.bytes});
  return out;
}

}  // namespace

pager::impl::impl(device& d, pager_config c) : dev(d), config(std::move(c)), private_stream(d) {
  validate(config);
  slab_allocator_config hc;
  hc.t = tier::hbm;
  hc.budget_bytes = config.hbm_budget_bytes;
  hc.slab_bytes = config.slab_bytes;
  hc.compaction_threshold = config.compaction_threshold;
  hbm = std::make_unique<slab_allocator>(dev, hc);
  slab_allocator_config pc = hc;
  pc.t = tier::host;
  pc.budget_bytes = config.host_budget_bytes;
  host = std::make_unique<slab_allocator>(dev, pc);
  host->wait_reserved();

  transfer_config tc;
  tc.chunk_bytes = config.chunk_bytes;
  tc.max_in_flight_chunks = config.max_in_flight_chunks;
  tc.h2d = config.h2d;
  tc.d2h = config.d2h;
  tc.device_memory = regions_of(*hbm);
  tc.host_memory = regions_of(*host);
  engine = std::make_unique<transfer_engine>(dev, tc);
  if (config.trace) trace = std::make_unique<detail::trace_log>(start);
}

pager::impl::~impl() {
  try {
    engine->drain();
    for (auto& t : tensors) {
      for (auto e : t.release_events) dev.synchronize(e);
    }
    for (auto& f : fences) {  // kernels may still read memory already evicted
      for (auto e : f.events) dev.synchronize(e);
    }
  } catch (...) {
    // teardown proceeds: the memory goes back with the allocators below
  }
  engine.reset();
  for (auto e : all_events) dev.destroy_event(e);
  hbm.reset();
  host.reset();
}

tensor_record& pager::impl::get(tensor_handle h) {
  HTP_EXPECTS(h.generation != 0, invalid_argument, "null tensor_handle; use one returned by register_tensor");
  HTP_EXPECTS(h.index < tensors.size() && tensors[h.index].live &&
                  tensors[h.index].generation == h.generation,
              invalid_argument, "stale or unknown tensor_handle {index ", h.index, ", generation ",
              h.generation, "}: the tensor was unregistered (or never registered with this pager)");
  return tensors[h.index];
}

const tensor_record& pager::impl::get(tensor_handle h) const {
  return const_cast<impl*>(this)->get(h);
}

tensor_handle pager::impl::handle_of(std::uint32_t slot) const {
  return {slot, tensors[slot].generation};
}

// ---- pager ---------------------------------------------------------------------------------------

pager::pager(device& dev, pager_config config)
    : impl_(std::make_unique<impl>(dev, std::move(config))) {}

pager::~pager() = default;

tensor_handle pager::register_tensor(std::string name, std::size_t bytes, tensor_kind kind,
                                     const void* source) {
  auto& p = *impl_;
  HTP_EXPECTS(bytes > 0, invalid_argument, "register_tensor('", name, "', 0 bytes): a tensor must have at least one byte");
  HTP_EXPECTS(bytes <= p.hbm->max_request_bytes() || p.config.on_oom == oom_policy::allow_degraded,
              invalid_argument, "register_tensor('", name, "', ", bytes,
              " bytes): it can never fit in HBM, whose largest extent is ", p.hbm->max_request_bytes(),
              " bytes (budget ", p.config.hbm_budget_bytes,
              "). Raise hbm_budget_bytes, split the tensor, or set on_oom = allow_degraded");
  extent h;
  {
    std::lock_guard lock(p.mutex);
    try {
      h = p.host->allocate(bytes);
    } catch (const out_of_memory& e) {
      throw out_of_memory(detail::concat("register_tensor('", name, "', ", bytes,
                                         " bytes): the host tier is full. Raise host_budget_bytes "
                                         "or unregister tensors. ", e.what()),
                          bytes);
    }
  }
  // Fill outside the lock: registering a large tensor must not stall acquires.
  if (source != nullptr) {
    std::memcpy(h.ptr, source, bytes);
  } else {
    std::memset(h.ptr, 0, bytes);
  }
  std::lock_guard lock(p.mutex);
  std::uint32_t slot;
  if (!p.free_slots.empty()) {
    slot = p.free_slots.back();
    p.free_slots.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(p.tensors.size());
    p.tensors.emplace_back();
  }
  tensor_record& t = p.tensors[slot];
  const std::uint32_t generation = t.generation == 0 ? 1 : t.generation;
  t = tensor_record{};
  t.live = true;
  t.generation = generation;
  t.name = std::move(name);
  t.bytes = bytes;
  t.kind = kind;
  t.host = h;
  ++p.counters.registered_tensors;
  return {slot, generation};
}

void pager::unregister_tensor(tensor_handle h) {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  tensor_record& t = p.quiesce(lock, h, [](const tensor_record& r) {
    HTP_EXPECTS(r.pins == 0, invalid_argument, "unregister_tensor('", r.name, "'): it is acquired ",
                r.pins, " time(s); release it first");
  });
  if (t.hbm) p.free_hbm(*t.hbm);
  p.host->deallocate(t.host.ptr, t.host.bytes);
  p.schedule.forget(h.index);
  const std::uint32_t next = t.generation + 1 == 0 ? 1 : t.generation + 1;
  t = tensor_record{};
  t.generation = next;
  p.free_slots.push_back(h.index);
  --p.counters.registered_tensors;
}

device_span pager::acquire(tensor_handle h, stream_ref compute, bool wait) {
  auto& p = *impl_;
  HTP_EXPECTS(static_cast<bool>(compute), invalid_argument, "acquire: null compute stream");
  std::unique_lock lock(p.mutex);
  bool counted = false;
  bool compacted = false;
  bool ladder_threw = false;
  // Outcome counters are bumped only once the acquire has succeeded, so that
  // acquires == hits + faults + degraded_acquires + failed_acquires + oom.thrown.
  try {
  for (;;) {
    p.reap();
    tensor_record& t = p.get(h);
    const std::uint32_t slot = h.index;
    if (!counted) {
      counted = true;
      ++p.counters.acquires;
      t.last_access = ++p.tick;
      p.schedule.on_access(slot);
    }
    if (t.load_failed) {  // earlier acquirers still hold an extent whose page-in failed
      impl::throw_copy_failed(detail::concat("acquire('", t.name, "')"),
                        "its page-in failed while other acquires hold it; retry after they release");
    }
    if (t.degraded) {  // already served zero-copy: every concurrent acquire shares that mode
      const device_span span{p.dev.mapped_device_pointer(t.host.ptr), t.bytes, true};
      ++t.pins;
      ++p.counters.degraded_acquires;
      return span;
    }
    bool faulted = false, prefetch_hit = false, late = false;
    switch (t.where) {
      case residency::resident:
        prefetch_hit = t.prefetched_unused;
        if (t.pending == pending_kind::move) p.engine->wait_on(t.ticket, compute);
        break;
      case residency::loading:
        if (t.prefetched_unused) {
          late = true;
          // Urgent now: move it ahead of other prefetches, keeping its fence and its word.
          if (t.ticket_priority != transfer_priority::fault &&
              p.engine->raise_priority(t.ticket, transfer_priority::fault)) {
            t.ticket_priority = transfer_priority::fault;
          }
        }
        p.engine->wait_on(t.ticket, compute);
        break;
      case residency::writing_back:  // cancel the eviction: the HBM copy is still good
        p.engine->wait_on(t.ticket, compute);
        t.where = residency::resident;
        t.dirty = false;
        break;
      case residency::host: {
        detail::wait_set waits;
        auto room = p.make_room(t.bytes, /*demand=*/true, slot, !compacted, waits);
        compacted = compacted || waits.compacted;
        if (!room) {
          if (!waits.empty()) {
            // A write-back, move or load the ladder waited for failed: report it rather than
            // retry, so a persistent device fault cannot spin here. Nothing changed for `h`.
            const std::string failed = p.wait_for(lock, waits);
            if (!failed.empty()) {
              p.reap();
              impl::throw_copy_failed(detail::concat("acquire('", p.get(h).name, "')"), failed);
            }
            continue;  // state may have changed meanwhile: start over
          }
          if (p.config.on_oom == oom_policy::allow_degraded) {
            const device_span span{p.dev.mapped_device_pointer(t.host.ptr), t.bytes, true};
            ++p.counters.oom.degraded;
            ++p.counters.degraded_acquires;
            t.degraded = true;
            ++t.pins;
            spdlog::warn("htp pager: '{}' ({} bytes) served from mapped host memory (degraded): HBM is full of pinned tensors",
                         t.name, t.bytes);
            return span;
          }
          ++p.counters.oom.thrown;
          ladder_threw = true;
          throw out_of_memory(p.oom_message(t.bytes, t.name), t.bytes);
        }
        p.start_load(slot, *room, transfer_priority::fault);
        t.fault_load = true;
        faulted = true;
        p.engine->wait_on(t.ticket, compute);
        break;
      }
    }
    t.prefetched_unused = false;
    if (t.pins++ == 0 && p.trace) t.acquired_at = std::chrono::steady_clock::now();
    const device_span span{t.hbm->ptr, t.bytes, false};
    const transfer_ticket pending = t.pending != pending_kind::none ? t.ticket : transfer_ticket{};
    p.prefetch_upcoming();
    p.sample_occupancy();
    if (wait && pending) {
      lock.unlock();
      try {
        p.engine->wait(pending);
      } catch (const logic_error& e) {
        // The bytes never arrived: undo this acquire's pin (nothing was queued on `compute` after
        // it but the wait, which the failure released) and report the failure.
        lock.lock();
        p.reap();
        tensor_record& u = p.get(h);
        if (--u.pins == 0 && u.load_failed) {
          p.free_hbm(*u.hbm, std::move(u.release_events));
          u.release_events.clear();
          u.hbm.reset();
          u.where = residency::host;
          u.load_failed = false;
        }
        impl::throw_copy_failed(detail::concat("acquire('", u.name, "', wait)"), e.what());
      }
      lock.lock();
    }
    if (faulted) {
      ++p.counters.faults;
    } else {
      ++p.counters.hits;
      if (prefetch_hit) ++p.counters.prefetch_hits;
      if (late) ++p.counters.late_prefetches;
    }
    return span;
  }
  } catch (...) {
    if (counted && !ladder_threw) {  // the ladder's own out_of_memory is counted in oom.thrown
      if (!lock.owns_lock()) lock.lock();
      ++p.counters.failed_acquires;
    }
    throw;
  }
}

void pager::release(tensor_handle h, stream_ref compute, bool dirty) {
  auto& p = *impl_;
  HTP_EXPECTS(static_cast<bool>(compute), invalid_argument, "release: null compute stream");
  std::lock_guard lock(p.mutex);
  p.reap();
  tensor_record& t = p.get(h);
  HTP_EXPECTS(t.pins > 0, invalid_argument, "release('", t.name,
              "') without a matching acquire (or released twice)");
  HTP_EXPECTS(!(dirty && t.kind == tensor_kind::weight), invalid_argument, "release('", t.name,
              "', dirty = true): weights are read-only; register it as tensor_kind::mutable_state "
              "if kernels write it");
  const event_ref e = p.take_event();
  try {
    p.dev.record(e, compute);
  } catch (...) {
    p.recycle_event(e);
    throw;
  }
  t.release_events.push_back(e);
  --t.pins;
  if (t.load_failed) {
    if (t.pins > 0) return;
    // The last holder of an extent whose page-in failed: free it after the kernels (fenced by
    // their release events) and tell the caller that what they read was not the tensor.
    t.load_failed = false;
    p.free_hbm(*t.hbm, std::move(t.release_events));
    t.release_events.clear();
    t.hbm.reset();
    t.where = residency::host;
    impl::throw_copy_failed(detail::concat("release('", t.name, "')"),
                      "its page-in failed after acquire returned; the release took effect, but "
                      "kernels ordered after that acquire read undefined bytes");
  }
  if (t.degraded) {
    if (t.pins == 0) t.degraded = false;  // writes went straight to the authoritative host copy
  } else if (dirty) {
    t.dirty = true;
  }
  if (t.pins == 0 && p.trace) {
    p.trace->add(detail::trace_track::compute, t.name, "acquired", t.acquired_at,
                 std::chrono::steady_clock::now());
  }
  p.prefetch_upcoming();  // the memory just released may be what the next layer needs
  p.maybe_auto_compact();
  p.sample_occupancy();
}

void pager::prefetch(tensor_handle h) {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.reap();
  p.get(h);
  p.prefetch_slot(h.index);
}

void pager::set_schedule(const std::vector<tensor_handle>& sequence, bool cyclic) {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  std::vector<std::uint32_t> slots;
  slots.reserve(sequence.size());
  for (std::size_t i = 0; i < sequence.size(); ++i) {
    try {
      p.get(sequence[i]);
    } catch (const invalid_argument& e) {
      throw invalid_argument(detail::concat("set_schedule: entry ", i, ": ", e.what()));
    }
    slots.push_back(sequence[i].index);
  }
  p.schedule.set(std::move(slots), cyclic);
  p.reap();
  p.prefetch_upcoming();
}

void pager::evict(tensor_handle h) {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  for (;;) {
    p.reap();
    tensor_record& t = p.get(h);
    HTP_EXPECTS(t.pins == 0, invalid_argument, "evict('", t.name, "'): it is acquired; release it first");
    if (t.where == residency::host) return;
    detail::wait_set w;
    bool mine = false;  // the write-back this call started
    if (t.pending != pending_kind::none) {
      w.tickets.push_back(t.ticket);
    } else if (!p.settle(t)) {
      w.events = t.release_events;
    } else {
      p.evict_now(h.index);
      if (t.pending == pending_kind::none) return;
      w.tickets.push_back(t.ticket);
      mine = true;
    }
    const std::string failed = p.wait_for(lock, w);
    if (mine && !failed.empty()) {  // the tensor stays resident and dirty; nothing is lost
      p.reap();
      impl::throw_copy_failed(detail::concat("evict('", p.get(h).name, "')"), failed);
    }
  }
}

std::size_t pager::compact() {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  p.reap();
  const std::size_t moves = p.start_compaction(0);
  detail::wait_set w;
  for (auto& t : p.tensors) {
    if (t.live && t.pending == pending_kind::move) w.tickets.push_back(t.ticket);
  }
  p.wait_for(lock, w);
  p.reap();
  return moves;
}

void pager::copy_to_host(tensor_handle h, void* dst) {
  auto& p = *impl_;
  HTP_EXPECTS(dst != nullptr, invalid_argument, "copy_to_host: null destination");
  std::unique_lock lock(p.mutex);
  tensor_record& t = p.quiesce(lock, h, [](const tensor_record& r) {
    HTP_EXPECTS(!(r.kind == tensor_kind::mutable_state && r.pins > 0), invalid_argument,
                "copy_to_host('", r.name, "'): the mutable tensor is acquired and may be being "
                "written; release it first");
  });
  if (t.hbm && t.dirty) {
    p.dev.copy_async(dst, t.hbm->ptr, t.bytes, copy_direction::device_to_host, p.private_stream);
    p.private_stream.synchronize();
  } else {
    std::memcpy(dst, t.host.ptr, t.bytes);
  }
}

void pager::synchronize() {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  for (;;) {
    p.reap();
    detail::wait_set w;
    for (auto& t : p.tensors) {
      if (t.live && t.pending != pending_kind::none) w.tickets.push_back(t.ticket);
    }
    if (w.empty()) return;
    p.wait_for(lock, w);
  }
}

tensor_info pager::info(tensor_handle h) const {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.reap();
  const tensor_record& t = p.get(h);
  return {t.name, t.bytes, t.kind, t.where, t.pins, t.dirty, t.degraded,
          t.pending != pending_kind::none};
}

pager_metrics pager::metrics() const {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.reap();
  p.sample_occupancy();
  return p.snapshot();
}

void pager::write_trace(const std::string& path) const {
  auto& p = *impl_;
  HTP_EXPECTS(p.trace != nullptr, invalid_argument,
              "write_trace: tracing is off; set pager_config.trace = true");
  {
    std::lock_guard lock(p.mutex);
    p.reap();
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  HTP_EXPECTS(f != nullptr, invalid_argument, "write_trace: cannot open '", path, "' for writing");
  const std::string json = p.trace->to_json();
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  std::fclose(f);
  HTP_EXPECTS(ok, invalid_argument, "write_trace: writing '", path, "' failed");
}

transfer_engine& pager::engine() noexcept { return *impl_->engine; }
const pager_config& pager::config() const noexcept { return impl_->config; }

}  // namespace htp
