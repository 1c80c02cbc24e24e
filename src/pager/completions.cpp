// Completions: what the transfer engine finished since the last call (loads, write-backs, moves,
// and loads detached by the room maker), release points retired as their kernels finish, and the
// waits of the calls that need a tensor quiet. Runs with the pager's mutex held, on every call;
// costs O(what finished), never a scan of the tensors (docs/pager.md, "Costs").
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

namespace htp {

using detail::pending_kind;
using detail::tensor_record;

void pager::impl::reap() {
  for (const finished_transfer& done : tiers.engine->take_finished()) room.complete(done);
  tensors.retire_all_releases();
  prefetch.harvest();
  room.drop_fences();
}

std::uint32_t pager::impl::quiesce(std::unique_lock<std::mutex>& lock, tensor_handle h,
                                   const std::function<void(const tensor_record&)>& check) {
  for (;;) {
    reap();
    const std::uint32_t slot = slot_of(h);
    check(tensors[slot]);
    detail::wait_set w;
    const tensor_record& t = tensors[slot];
    if (t.pending != pending_kind::none) w.tickets.push_back(t.ticket);
    room.detached_loads_of(slot, w.tickets);  // rare: loads detached by evict_loading still run
    if (!tensors.settle(slot)) {
      for (const auto& r : tensors[slot].release_events) w.events.push_back(r.event);
    }
    if (w.empty()) return slot;
    room.wait(lock, w);  // a failed copy is accounted by reap() on the next look
  }
}

void pager::impl::throw_copy_failed(const std::string& what, const std::string& why) {
  throw cuda_error(-1, "htp_copy_failed", what, __FILE__, __LINE__,
                   "a copy the pager waited for failed on the device: " + why);
}

void pager::impl::throw_transfer_failed(const std::string& what, std::exception_ptr cause) {
  try {
    std::rethrow_exception(cause);
  } catch (const io_error& e) {
    throw io_error(detail::concat(what, ": a page-in could not read the tensor's file: ", e.what()),
                   e.path(), e.error_number());
  } catch (const corrupt_data& e) {
    throw corrupt_data(detail::concat(
        what,
        ": a page-in failed its checksum on the device (the tensor is back on its source, "
        "nothing else is affected; restore the bytes and acquire again): ",
        e.what()));
  } catch (const std::exception& e) {
    throw_copy_failed(what, e.what());
  }
}

}  // namespace htp
