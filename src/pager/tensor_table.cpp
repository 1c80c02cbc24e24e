// The tensor table (tensor_table.hpp): the transitions of the tensor state machine, the invariants
// they keep, the handle table and the release points.
#include "pager/tensor_table.hpp"

#include <htp/detail/check.hpp>

#include "pager/observer.hpp"

#include <algorithm>
#include <atomic>

namespace htp::detail {
namespace {

/// Each table's tag, carried by its handles: a handle of another pager is refused by name.
std::uint32_t next_owner_tag() {
  static std::atomic<std::uint32_t> next{1};
  std::uint32_t tag = next.fetch_add(1, std::memory_order_relaxed);
  if (tag == 0) tag = next.fetch_add(1, std::memory_order_relaxed);  // after 2^32 pagers
  return tag;
}

}  // namespace

tensor_table::tensor_table(device& dev, event_pool& events, const access_schedule& schedule,
                           const routed_groups& groups, pager_observer& observer, bool checked,
                           bool stamp_pins)
    : dev_(dev), events_(events), schedule_(schedule), groups_(groups), observe_(observer),
      checked_(checked), stamp_pins_(stamp_pins), owner_(next_owner_tag()) {}

// ---- lookup ------------------------------------------------------------------------------------

const tensor_record& tensor_table::get(tensor_handle h) const {
  HTP_EXPECTS(h.generation != 0, invalid_argument,
              "null tensor_handle; use one returned by register_tensor");
  HTP_EXPECTS(h.owner == owner_, invalid_argument, "tensor_handle {index ", h.index,
              ", generation ", h.generation,
              "} belongs to another pager (or was made by hand); use the handle this "
              "pager returned when the tensor was registered with it");
  HTP_EXPECTS(
      h.index < slots_.size() && slots_[h.index].live && slots_[h.index].generation == h.generation,
      invalid_argument, "stale or unknown tensor_handle {index ", h.index, ", generation ",
      h.generation, "}: the tensor was unregistered (or never registered with this pager)");
  return slots_[h.index];
}

tensor_handle tensor_table::handle_of(std::uint32_t slot) const {
  tensor_handle h;
  h.index = slot;
  h.generation = slots_[slot].generation;
  h.owner = owner_;
  return h;
}

void tensor_table::check_list(const tensor_handle* hs, std::size_t n, const char* what,
                              const std::function<void(const tensor_record&)>& check) {
  const std::uint64_t epoch = ++list_epoch_;
  for (std::size_t i = 0; i < n; ++i) {
    const tensor_record& t = get(hs[i]);
    if (check) check(t);
    HTP_EXPECTS(t.notes.list_mark != epoch, invalid_argument, what, ": '", t.name,
                "' appears twice in the list (entry ", i, "); name each tensor once");
    at(hs[i].index).notes.list_mark = epoch;
  }
}

std::optional<std::uint32_t> tensor_table::slot_of_ticket(std::uint64_t ticket_id) const {
  const auto it = ticket_slot_.find(ticket_id);
  if (it == ticket_slot_.end()) return std::nullopt;
  return it->second;
}

// ---- registration ------------------------------------------------------------------------------

tensor_handle tensor_table::add(tensor_spec spec) {
  std::uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  tensor_record& t = at(slot);
  const std::uint32_t generation = t.generation == 0 ? 1 : t.generation;
  t = tensor_record{};
  t.live = true;
  t.generation = generation;
  t.name = std::move(spec.name);
  t.bytes = spec.source.bytes;
  t.kind = spec.kind;
  t.device_resident = spec.device_resident;
  t.dead = spec.kind == tensor_kind::activation;  // no content until its first write
  t.source = std::move(spec.source);
  observe_.registered(t);
  done(slot);
  return handle_of(slot);
}

std::optional<extent> tensor_table::remove(std::uint32_t slot) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.live && t.pins == 0 && t.pending == pending_kind::none && t.release_events.empty(),
             "removing '", t.name, "' with pins, a copy in flight or release events");
  observe_.unregistered(t);
  const std::optional<extent> held = t.hbm;
  const std::uint32_t next = t.generation + 1 == 0 ? 1 : t.generation + 1;
  t = tensor_record{};
  t.generation = next;
  done(slot);
  free_slots_.push_back(slot);
  return held;
}

void tensor_table::place_resident(std::uint32_t slot, extent where) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.device_resident && t.where == residency::host && !t.hbm, "placing '", t.name, "'");
  t.hbm = where;
  t.where = residency::resident;
  observe_.placed_resident(t);
  done(slot);
}

// ---- copies ------------------------------------------------------------------------------------

void tensor_table::set_pending(std::uint32_t slot, pending_kind kind, transfer_ticket ticket) {
  tensor_record& t = at(slot);
  if (t.ticket) ticket_slot_.erase(t.ticket.id);
  if (t.in_flight_pos != not_in_flight) {  // leave the list (swap with the last)
    const std::uint32_t last = in_flight_.back();
    in_flight_[t.in_flight_pos] = last;
    at(last).in_flight_pos = t.in_flight_pos;
    in_flight_.pop_back();
    t.in_flight_pos = not_in_flight;
  }
  t.pending = kind;
  t.ticket = ticket;
  if (kind != pending_kind::none) {
    t.in_flight_pos = static_cast<std::uint32_t>(in_flight_.size());
    in_flight_.push_back(slot);
    ticket_slot_[ticket.id] = slot;
  }
}

freed_hbm tensor_table::to_host(std::uint32_t slot) {
  tensor_record& t = at(slot);
  freed_hbm f{*t.hbm, take_release_events(slot)};
  t.hbm.reset();
  t.where = residency::host;
  t.notes.prefetched_unused = false;
  return f;
}

void tensor_table::begin_load(std::uint32_t slot, extent where, transfer_ticket ticket,
                              transfer_priority priority) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.where == residency::host && !t.device_resident && t.pins == 0 && !t.dead,
             "loading '", t.name, "'");
  t.hbm = where;
  t.where = residency::loading;
  set_pending(slot, pending_kind::load, ticket);
  stamp(t, priority);
  t.notes.fault_load = priority == transfer_priority::fault;
  t.notes.prefetched_unused = priority == transfer_priority::prefetch;
  observe_.load_started(t, priority);
  done(slot);
}

void tensor_table::stamp(tensor_record& t, transfer_priority priority) {
  t.notes.ticket_priority = priority;
  t.times.ticket_start = std::chrono::steady_clock::now();
}

void tensor_table::raise_to_fault(std::uint32_t slot) {
  at(slot).notes.ticket_priority = transfer_priority::fault;
}

void tensor_table::finish_load(std::uint32_t slot, std::chrono::nanoseconds latency) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.pending == pending_kind::load, "finishing a load of '", t.name, "'");
  t.times.loaded_at = t.times.ticket_start +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(latency);
  observe_.load_finished(t, t.ticket, t.times.loaded_at, latency);
  t.where = residency::resident;
  t.notes.fault_load = false;
  set_pending(slot, pending_kind::none);
  done(slot);
}

std::optional<freed_hbm> tensor_table::fail_load(std::uint32_t slot, std::exception_ptr why) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.pending == pending_kind::load, "failing a load of '", t.name, "'");
  // Counted here, where it is decided, whether or not it was acquired.
  observe_.load_failed(t, t.ticket, why);
  t.times.load_error = std::move(why);
  t.notes.fault_load = false;
  set_pending(slot, pending_kind::none);
  std::optional<freed_hbm> freed;
  if (t.pins > 0) {
    // Acquired already (acquire does not wait unless asked): kernels ordered after the acquire may
    // be reading the extent. Keep it until the last release, which frees it and reports the
    // failure; the host copy stays authoritative.
    t.load_failed = true;
  } else {
    // Kernels that acquired and released it meanwhile may still run: the extent goes fenced.
    freed = to_host(slot);
    t.dirty = false;  // whatever they wrote landed in undefined HBM, never in the host copy
  }
  done(slot);
  return freed;
}

freed_hbm tensor_table::detach_load(std::uint32_t slot, cause why) {
  HTP_ASSERT(can_evict_loading(slot), "detaching the load of '", at(slot).name, "'");
  tensor_record& t = at(slot);
  ++t.detached_load_count;  // its host bytes are still being read: unregistering waits for them
  observe_.evicted(t, eviction::load_in_flight, why);
  set_pending(slot, pending_kind::none);
  freed_hbm f = to_host(slot);
  t.notes.fault_load = false;
  done(slot);
  return f;
}

void tensor_table::detached_load_done(std::uint32_t slot, std::uint32_t generation) {
  if (slot < slots_.size() && at(slot).generation == generation &&
      at(slot).detached_load_count > 0) {
    --at(slot).detached_load_count;
  }
}

void tensor_table::begin_write_back(std::uint32_t slot, transfer_ticket ticket, cause why) {
  tensor_record& t = at(slot);
  HTP_ASSERT(can_evict(slot) && t.dirty && is_mutable(t.kind) && !t.dead, "writing back '", t.name,
             "'");
  stamp(t, transfer_priority::writeback);
  observe_.evicted(t, eviction::write_back, why);
  t.notes.prefetched_unused = false;
  set_pending(slot, pending_kind::write_back, ticket);
  t.where = residency::writing_back;
  done(slot);
}

void tensor_table::cancel_write_back(std::uint32_t slot) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.where == residency::writing_back, "cancelling the write-back of '", t.name, "'");
  t.where = residency::resident;  // the copy goes on; its completion leaves the tensor resident
  t.dirty = false;
  done(slot);
}

std::optional<extent> tensor_table::finish_write_back(std::uint32_t slot,
                                                      std::chrono::nanoseconds latency) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.pending == pending_kind::write_back, "finishing the write-back of '", t.name, "'");
  observe_.copy_finished(t, true, latency);
  set_pending(slot, pending_kind::none);
  std::optional<extent> freed;
  if (t.where == residency::writing_back) {
    freed = t.hbm;
    t.hbm.reset();
    t.where = residency::host;
    t.dirty = false;
  }  // else: re-acquired during the write-back; it stays resident
  done(slot);
  return freed;
}

void tensor_table::fail_write_back(std::uint32_t slot) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.pending == pending_kind::write_back, "failing the write-back of '", t.name, "'");
  observe_.copy_finished(t, false, {});
  set_pending(slot, pending_kind::none);
  t.where = residency::resident;
  t.dirty = !t.dead;  // also when re-acquired meanwhile (cancel_write_back marked it clean); a
                      // dead activation's content needs no copy
  done(slot);
}

void tensor_table::begin_move(std::uint32_t slot, const slab_move& m, transfer_ticket ticket) {
  tensor_record& t = at(slot);
  HTP_ASSERT(can_evict(slot) && t.hbm->ptr == m.from.ptr, "moving '", t.name, "'");
  set_pending(slot, pending_kind::move, ticket);
  t.move = m;
  t.hbm = m.to;
  stamp(t, transfer_priority::compaction);
  observe_.move_started(t);
  done(slot);
}

slab_move tensor_table::finish_move(std::uint32_t slot, bool ok, std::chrono::nanoseconds latency) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.pending == pending_kind::move && t.move, "finishing the move of '", t.name, "'");
  observe_.copy_finished(t, ok, latency);
  const slab_move m = *t.move;
  if (!ok) t.hbm = m.from;
  t.move.reset();
  set_pending(slot, pending_kind::none);
  done(slot);
  return m;
}

freed_hbm tensor_table::drop_to_host(std::uint32_t slot, cause why) {
  tensor_record& t = at(slot);
  HTP_ASSERT(can_evict(slot) && !(t.dirty && is_mutable(t.kind)), "evicting '", t.name,
             "' without a write-back");
  observe_.evicted(t, eviction::clean, why);
  freed_hbm f = to_host(slot);
  done(slot);
  return f;
}

void tensor_table::begin_fresh(std::uint32_t slot, extent where) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.dead && t.where == residency::host && !t.hbm && t.pins == 0 && !t.degraded &&
                 t.pending == pending_kind::none,
             "a fresh acquire of '", t.name, "'");
  t.hbm = where;
  t.where = residency::resident;
  t.times.loaded_at = {};
  done(slot);
}

bool tensor_table::can_drop_dead(std::uint32_t slot) const {
  const tensor_record& t = slots_[slot];
  return t.dead && can_evict(slot);
}

void tensor_table::discard(std::uint32_t slot) {
  tensor_record& t = at(slot);
  HTP_ASSERT(
      t.kind == tensor_kind::activation && !t.dead && t.pins == 0 && !t.degraded && !t.load_failed,
      "discarding the activation '", t.name, "'");
  // An eviction writing it back: the write-back goes on (the engine has it), but its completion
  // must not take a dead tensor to host as if its content were kept there.
  if (t.where == residency::writing_back) t.where = residency::resident;
  t.dirty = false;  // dead content is never written back
  t.dead = true;
  observe_.discarded(t);
  done(slot);
}

freed_hbm tensor_table::drop_dead(std::uint32_t slot) {
  tensor_record& t = at(slot);
  HTP_ASSERT(can_drop_dead(slot) && !t.dirty, "dropping the dead activation '", t.name, "'");
  observe_.dead_dropped(t);
  freed_hbm f = to_host(slot);
  done(slot);
  return f;
}

// ---- pins and releases -------------------------------------------------------------------------

bool tensor_table::count_access(std::uint32_t slot) {
  tensor_notes& n = at(slot).notes;
  if (n.access_counted) return false;
  n.access_counted = true;
  return true;
}

void tensor_table::pin(std::uint32_t slot) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.hbm && !t.degraded && !t.load_failed, "pinning '", t.name, "'");
  t.notes.prefetched_unused = false;
  if (t.pins++ == 0 && stamp_pins_) t.times.acquired_at = std::chrono::steady_clock::now();
  done(slot);
}

void tensor_table::pin_degraded(std::uint32_t slot) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.where == residency::host && (t.degraded || t.pins == 0) && t.source.raw_host(),
             "pinning '", t.name, "' in mapped host memory");
  t.degraded = true;
  ++t.pins;
  done(slot);
}

std::optional<freed_hbm> tensor_table::unpin(std::uint32_t slot) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.pins > 0, "unpinning '", t.name, "'");
  std::optional<freed_hbm> freed;
  if (--t.pins == 0) {
    t.degraded = false;
    t.notes.access_counted = false;
    if (t.load_failed) {
      t.load_failed = false;
      freed = to_host(slot);
    }
  }
  done(slot);
  return freed;
}

std::optional<freed_hbm> tensor_table::release(std::uint32_t slot, release_point point, bool dirty,
                                               bool supersede) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.pins > 0, "releasing '", t.name, "'");
  keep_release_point(slot, point, supersede);
  std::optional<freed_hbm> freed;
  if (--t.pins == 0) t.notes.access_counted = false;
  if (t.load_failed) {
    if (t.pins == 0) {
      // The last holder of an extent whose page-in failed: it goes after the kernels (fenced by
      // their release events); the caller reports that what they read was not the tensor.
      t.load_failed = false;
      freed = to_host(slot);
    }
  } else if (t.degraded) {
    if (t.pins == 0) t.degraded = false;     // writes went straight to the authoritative host copy
  } else if (dirty && !t.device_resident) {  // no host copy to write back: nothing to mark
    t.dirty = true;
  }
  if (dirty) t.dead = false;  // an activation's first write: its content lives from here
  if (t.pins == 0 && !freed) observe_.last_release(t);
  done(slot);
  return freed;
}

std::optional<freed_hbm> tensor_table::release_last_use(std::uint32_t slot, release_point point,
                                                        bool supersede) {
  tensor_record& t = at(slot);
  HTP_ASSERT(t.pins == 1 && t.kind == tensor_kind::activation, "the last use of '", t.name, "'");
  keep_release_point(slot, point, supersede);
  t.pins = 0;
  t.notes.access_counted = false;
  t.degraded = false;  // (its writes went to the host copy, now stale)
  t.dirty = false;     // dead content is never written back
  t.dead = true;
  std::optional<freed_hbm> freed;
  if (t.load_failed) {  // the extent goes after the kernels; the caller reports the failure
    t.load_failed = false;
    freed = to_host(slot);
  }
  observe_.last_use(t);
  done(slot);
  return freed;
}

void tensor_table::keep_release_point(std::uint32_t slot, release_point point, bool supersede) {
  tensor_record& t = at(slot);
  // A later release on the same stream supersedes an earlier one: streams run in order.
  bool replaced = false;
  if (supersede) {
    for (auto& r : t.release_events) {
      if (r.stream != point.stream) continue;
      events_.release(r.event);
      r = point;
      replaced = true;
      break;
    }
  }
  if (!replaced) t.release_events.push_back(point);
  releases_[point.stream.native].push_back({point.seq, slot, t.generation});
}

void tensor_table::retire_releases(void* s) {
  auto it = releases_.find(s);
  if (it == releases_.end()) return;
  auto& queue = it->second;
  while (!queue.empty()) {
    const release_entry& r = queue.front();
    tensor_record& t = at(r.slot);
    auto point = t.live && t.generation == r.generation
                     ? std::find_if(t.release_events.begin(), t.release_events.end(),
                                    [&](const release_point& p) { return p.seq == r.seq; })
                     : t.release_events.end();
    if (point != t.release_events.end()) {
      if (!dev_.query(point->event)) return;  // and so are the younger ones on this stream
      events_.release(point->event);
      t.release_events.erase(point);
    }
    queue.pop_front();
  }
}

void tensor_table::retire_all_releases() {
  for (auto it = releases_.begin(); it != releases_.end();) {  // the streams with releases pending
    retire_releases(it->first);
    it = it->second.empty() ? releases_.erase(it) : std::next(it);
  }
}

bool tensor_table::settle(std::uint32_t slot) {
  auto& ev = at(slot).release_events;
  ev.remove_if([&](const release_point& r) {
    if (!dev_.query(r.event)) return false;
    events_.release(r.event);
    return true;
  });
  return ev.empty();
}

std::vector<event_ref> tensor_table::take_release_events(std::uint32_t slot) {
  auto& ev = at(slot).release_events;
  std::vector<event_ref> out;
  out.reserve(ev.size());
  for (const auto& r : ev) out.push_back(r.event);
  ev.clear();
  return out;
}

// ---- the victim index and the invariants -------------------------------------------------------

void tensor_table::reindex(std::uint32_t slot) {
  const tensor_record& t = slots_[slot];
  victim_key k;
  k.indexed = t.live && t.hbm.has_value() && !t.load_failed && !t.device_resident;
  if (k.indexed) {
    k.group = t.pins > 0                      ? victim_group::pinned
              : is_mutable(t.kind) && t.dirty ? victim_group::dirty
                                              : victim_group::clean;
    // An idle dead activation's HBM holds nothing anyone reads: the first to go. (One pinned is
    // being written: it is keyed as any tensor.)
    k.next_use = t.dead && t.pins == 0 ? access_schedule::never : schedule_.next_use(slot);
    if (groups_.anchor_of(slot) >= 0) k.popularity = groups_.score(slot);
  }
  victims_.update(slot, k);
}

void tensor_table::reindex_all() {
  for (std::uint32_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].live && slots_[s].hbm) reindex(s);
  }
}

bool tensor_table::can_evict(std::uint32_t slot) const {
  const tensor_record& t = slots_[slot];
  return t.live && t.hbm && t.pins == 0 && t.pending == pending_kind::none &&
         t.where == residency::resident;
}

bool tensor_table::can_evict_loading(std::uint32_t slot) const {
  const tensor_record& t = slots_[slot];
  return t.live && t.hbm && t.pins == 0 && t.pending == pending_kind::load &&
         t.where == residency::loading && !t.dirty && !t.notes.prefetched_unused &&
         !t.release_events.empty();
}

void tensor_table::done(std::uint32_t slot) {
  reindex(slot);
  if (checked_) check(slot);
}

void tensor_table::check(std::uint32_t slot) const {
  const tensor_record& t = slots_[slot];
  const bool in_flight = t.pending != pending_kind::none;
  HTP_ASSERT(
      in_flight == static_cast<bool>(t.ticket) && in_flight == (t.in_flight_pos != not_in_flight),
      "'", t.name, "': a pending ticket exists iff a copy is in flight");
  if (!t.live) {
    HTP_ASSERT(!t.hbm && !in_flight && t.pins == 0 && t.release_events.empty(), "slot ", slot,
               ": a free slot holds nothing");
    return;
  }
  HTP_ASSERT(t.hbm.has_value() == (t.where != residency::host), "'", t.name,
             "': an HBM extent exists iff the tensor is not on the host (", to_string(t.where),
             ")");
  HTP_ASSERT((t.pending == pending_kind::load) == (t.where == residency::loading && !t.load_failed),
             "'", t.name, "': a load is in flight iff the tensor is loading");
  HTP_ASSERT((t.pending == pending_kind::write_back) >= (t.where == residency::writing_back), "'",
             t.name, "': writing back without a write-back in flight");
  HTP_ASSERT((t.pending == pending_kind::move) == t.move.has_value(), "'", t.name,
             "': a move is planned iff one is in flight");
  HTP_ASSERT(!t.move || t.where == residency::resident, "'", t.name,
             "': only a resident tensor moves");
  HTP_ASSERT(!t.load_failed || (t.where == residency::loading && t.pins > 0), "'", t.name,
             "': a failed load is kept only while acquired");
  HTP_ASSERT(!t.degraded || (t.where == residency::host && t.pins > 0), "'", t.name,
             "': degraded only while acquired from the host");
  HTP_ASSERT(!t.dirty || (t.hbm && is_mutable(t.kind) && !t.device_resident), "'", t.name,
             "': only a mutable tensor in HBM is dirty");
  HTP_ASSERT(!t.dead || (t.kind == tensor_kind::activation && !t.device_resident), "'", t.name,
             "': only an activation is dead");
  HTP_ASSERT(!t.dead || (!t.dirty && t.where != residency::writing_back), "'", t.name,
             "': dead content is never dirty nor written back");
  HTP_ASSERT(!t.notes.prefetched_unused || t.hbm, "'", t.name, "': a prefetched tensor holds HBM");
  HTP_ASSERT(!t.device_resident || t.where == residency::resident ||
                 (t.where == residency::host && t.pins == 0),
             "'", t.name, "': a device-resident tensor is resident once placed");
  HTP_ASSERT(t.pins >= 0, "'", t.name, "': negative pins");
}

}  // namespace htp::detail
