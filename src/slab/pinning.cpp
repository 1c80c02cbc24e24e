// Reserving (and, for the host tier, pinning) the budget from the device: parallel chunks,
// measured, optionally on a background thread.
#include "slab/state.hpp"

#include <algorithm>
#include <atomic>

namespace htp {

void slab_allocator::state::mark_ready(std::size_t r, char* base, double seconds) {
  std::lock_guard lock(mu);
  reservation& res = reservations[r];
  res.base = base;
  res.ready = true;
  const auto key = std::make_pair(reinterpret_cast<std::uintptr_t>(base), r);
  by_address.insert(std::upper_bound(by_address.begin(), by_address.end(), key), key);
  free_runs.insert(static_cast<std::uint32_t>(res.first), static_cast<std::uint32_t>(res.pages));
  free_pages += res.pages;
  ready_pages += res.pages;
  reserved_bytes += res.pages << page_shift;
  pin_seconds = std::max(pin_seconds, seconds);
  largest_dirty = true;
  ready_cv.notify_all();
}

void slab_allocator::state::reserve_all() {
  pin_start = std::chrono::steady_clock::now();
  std::atomic<std::size_t> next{0};
  std::mutex error_mu;
  std::exception_ptr first_error;
  auto worker = [&] {
    while (true) {
      {
        std::lock_guard lock(mu);
        if (stop_pinning) return;
      }
      const std::size_t r = next.fetch_add(1);
      if (r >= reservations.size()) return;
      {
        std::lock_guard lock(error_mu);
        if (first_error) return;
      }
      try {
        void* p = dev.allocate(kind, reservations[r].pages << page_shift);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - pin_start).count();
        mark_ready(r, static_cast<char*>(p), s);
      } catch (...) {
        std::lock_guard lock(error_mu);
        if (!first_error) first_error = std::current_exception();
      }
    }
  };
  const std::size_t n_threads =
      std::min<std::size_t>(std::max(1u, cfg.pin_threads), reservations.size());
  std::vector<std::thread> threads;
  try {
    for (std::size_t i = 1; i < n_threads; ++i) threads.emplace_back(worker);
  } catch (...) {
    // Could not start more threads: the ones we have (and this one) do the work.
  }
  worker();
  for (auto& t : threads) t.join();
  std::lock_guard lock(mu);
  reservation_done = true;
  if (first_error) pin_error = first_error;
  ready_cv.notify_all();
  if (first_error && !cfg.pin_in_background) std::rethrow_exception(first_error);
}

void slab_allocator::state::release_all() noexcept {
  for (reservation& r : reservations) {
    if (!r.ready) continue;
    try {
      dev.deallocate(kind, r.base, r.pages << page_shift);
    } catch (...) {
      // The device refused (it should not); nothing more can be done in a destructor.
    }
    r.ready = false;
  }
}

}  // namespace htp
