// The public face of the slab allocator: locking, argument checks and the request paths.
#include "slab/state.hpp"

#include <htp/detail/check.hpp>

namespace htp {

slab_allocator::slab_allocator(device& dev, const slab_allocator_config& config)
    : s_(std::make_unique<state>(dev, config)) {
  if (s_->cfg.pin_in_background) {
    s_->pinner = std::thread([st = s_.get()] {
      try {
        st->reserve_all();
      } catch (...) {
        // reserve_all stored the failure in pin_error; wait_reserved reports it.
      }
    });
    return;
  }
  try {
    s_->reserve_all();
  } catch (...) {
    s_->release_all();
    throw;
  }
}

slab_allocator::~slab_allocator() {
  {
    std::lock_guard lock(s_->mu);
    s_->stop_pinning = true;
  }
  if (s_->pinner.joinable()) s_->pinner.join();
  for (const auto& p : s_->pending) {
    try {
      s_->dev.synchronize(p.ev);
    } catch (...) {
      // The work failed; its memory is returned all the same.
    }
    s_->dev.destroy_event(p.ev);
  }
  for (event_ref e : s_->event_pool) s_->dev.destroy_event(e);
  s_->release_all();
}

extent slab_allocator::allocate(std::size_t bytes) {
  state& s = *s_;
  HTP_EXPECTS(bytes > 0, invalid_argument, "slab_allocator(", to_string(s.cfg.t),
              ")::allocate(0): a request must be at least one byte");
  HTP_EXPECTS(
      bytes <= max_request_bytes(), invalid_argument, "slab_allocator(", to_string(s.cfg.t),
      ")::allocate(", bytes, "): more than the tier can ever hold in one extent (",
      max_request_bytes(), " bytes: one reservation of ",
      s.per_reservation * s.page_bytes / s.slab_bytes, " slabs of ", s.slab_bytes, ", budget ",
      s.total_pages * s.page_bytes,
      " bytes); split the tensor or configure a larger budget_bytes / slabs_per_reservation");
  std::unique_lock lock(s.mu);
  if (!s.pending.empty()) s.reap_locked();
  while (true) {
    if (void* p = s.try_allocate(bytes)) return extent{p, bytes};
    if (!s.pending.empty() && s.reap_locked() > 0) continue;
    if (!s.reservation_done) {  // the slabs it needs may still be being pinned
      s.ready_cv.wait(lock);
      continue;
    }
    ++s.n_failed;
    throw out_of_memory(s.oom_message(bytes), bytes);
  }
}

void slab_allocator::deallocate(void* ptr, std::size_t bytes) {
  std::lock_guard lock(s_->mu);
  const state::location loc = s_->resolve(ptr, bytes, "deallocate");
  s_->free_at(loc, true);
  if (!s_->pending.empty()) s_->reap_locked();
}

void slab_allocator::deallocate_after(void* ptr, std::size_t bytes, stream_ref s) {
  state& st = *s_;
  std::lock_guard lock(st.mu);
  const state::location loc = st.resolve(ptr, bytes, "deallocate_after");
  st.pending.reserve(st.pending.size() + 1);
  st.event_pool.reserve(st.event_pool.size() + 1);
  const event_ref ev = st.pooled_event();
  try {
    st.dev.record(ev, s);
  } catch (...) {
    st.event_pool.push_back(ev);
    throw;
  }
  st.set_flags(loc, state::flag_pending);
  st.pending.push_back({ptr, bytes, loc, ev});
  st.pending_bytes += bytes;
}

std::size_t slab_allocator::reap() {
  std::lock_guard lock(s_->mu);
  return s_->reap_locked();
}

void slab_allocator::synchronize_pending() {
  std::vector<event_ref> events;
  {
    std::lock_guard lock(s_->mu);
    for (const auto& p : s_->pending) events.push_back(p.ev);
  }
  // Never block while holding the lock: other threads keep allocating meanwhile.
  for (event_ref e : events) s_->dev.synchronize(e);
  std::lock_guard lock(s_->mu);
  s_->reap_locked();
}

compaction_plan slab_allocator::plan_compaction(const std::function<bool(const extent&)>& movable,
                                                std::size_t for_request_bytes) {
  std::lock_guard lock(s_->mu);
  if (for_request_bytes > max_request_bytes()) return {};  // can never fit: nothing to plan
  return s_->plan(movable, for_request_bytes);
}

void slab_allocator::commit_move(const slab_move& m) {
  std::lock_guard lock(s_->mu);
  s_->commit(m);
}

void slab_allocator::cancel_move(const slab_move& m) {
  std::lock_guard lock(s_->mu);
  s_->cancel(m);
}

bool slab_allocator::should_compact() const {
  std::lock_guard lock(s_->mu);
  return s_->fragmentation().combined >= s_->cfg.compaction_threshold;
}

slab_allocator_stats slab_allocator::statistics() const {
  std::lock_guard lock(s_->mu);
  if (!s_->pending.empty()) s_->reap_locked();
  return s_->stats();
}

fragmentation_report slab_allocator::fragmentation() const {
  std::lock_guard lock(s_->mu);
  return s_->fragmentation();
}

fragmentation_report slab_allocator::audit() const {
  std::lock_guard lock(s_->mu);
  return s_->audit();
}

void slab_allocator::wait_reserved() {
  std::unique_lock lock(s_->mu);
  s_->ready_cv.wait(lock, [&] { return s_->reservation_done; });
  if (s_->pin_error) std::rethrow_exception(s_->pin_error);
}

std::vector<extent> slab_allocator::reservations() {
  wait_reserved();
  std::lock_guard lock(s_->mu);
  std::vector<extent> out;
  for (const auto& r : s_->reservations) out.push_back({r.base, r.pages * s_->page_bytes});
  return out;
}

tier slab_allocator::tier_of() const noexcept { return s_->cfg.t; }
std::size_t slab_allocator::slab_bytes() const noexcept { return s_->slab_bytes; }
std::size_t slab_allocator::page_bytes() const noexcept { return s_->page_bytes; }
std::size_t slab_allocator::capacity_bytes() const noexcept {
  return s_->total_pages * s_->page_bytes;
}
std::size_t slab_allocator::max_request_bytes() const noexcept {
  return s_->per_reservation * s_->page_bytes;
}

std::size_t slab_allocator::rounded_size(std::size_t bytes) const {
  HTP_EXPECTS(bytes > 0 && bytes <= max_request_bytes(), invalid_argument, "slab_allocator(",
              to_string(s_->cfg.t), ")::rounded_size(", bytes, "): must be within [1, ",
              max_request_bytes(), "]");
  return s_->rounded(bytes);
}

}  // namespace htp
