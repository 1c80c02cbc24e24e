// Device-resident tensors (pager::register_resident): placed in HBM at registration, filled from
// the caller's bytes, and never evicted, written back nor moved, so they need no host copy. For
// weights an engine keeps in HBM for the whole run, and scratch such as staging buffers.
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>
#include <vector>

namespace htp {

extent pager::impl::room_for(std::unique_lock<std::mutex>& lock, std::uint32_t slot,
                             std::size_t bytes) {
  bool compacted = false;
  for (;;) {
    reap();
    const detail::demand_result r = room.for_demand(bytes, !compacted, /*may_degrade=*/false);
    if (r.room) return *r.room;
    compacted = compacted || r.waits.compacted;
    if (r.exhausted()) {
      throw detail::ladder_exhausted(
          room.oom_message(bytes, tensors[slot].name, "place in HBM the device-resident tensor"),
          bytes);
    }
    const std::exception_ptr failed = room.wait(lock, r.waits);
    if (failed && !r.waits.only_moves) {
      reap();
      throw_transfer_failed(detail::concat("register_resident('", tensors[slot].name, "')"),
                            failed);
    }
  }
}

tensor_handle pager::register_resident(std::string name, std::size_t bytes, tensor_kind kind,
                                       const void* source) {
  auto& p = *impl_;
  HTP_EXPECTS(kind != tensor_kind::activation, invalid_argument, "register_resident('", name,
              "', activation): a device-resident tensor never leaves HBM, so there is no last use "
              "to free it at; register it as tensor_kind::mutable_state (scratch), or with "
              "register_tensor to page it");
  HTP_EXPECTS(bytes > 0, invalid_argument, "register_resident('", name,
              "', 0 bytes): a tensor must have at least one byte");
  HTP_EXPECTS(
      bytes <= p.tiers.hbm->max_request_bytes(), invalid_argument, "register_resident('", name,
      "', ", bytes, " bytes): larger than the largest HBM extent (",
      p.tiers.hbm->max_request_bytes(),
      " bytes; pager_config.hbm_budget_bytes = ", p.config.hbm_budget_bytes,
      "). A device-resident tensor must fit in HBM whole; split it or register it pageable");
  std::unique_lock lock(p.mutex);
  // Outside the victim index from the start: nothing evicts or moves it.
  const tensor_handle h =
      p.tensors.add(detail::tensor_spec::resident(std::move(name), bytes, kind));
  extent where;
  try {
    where = p.room_for(lock, h.index, bytes);
  } catch (...) {
    p.tensors.remove(h.index);
    throw;
  }
  // Kernels may still read the memory's previous tenant: the fill waits for them on the device.
  // Waits are enqueued under the lock (they never block; the fence's events stay valid only here).
  std::vector<event_ref> readers = p.room.fence_events(where);
  for (event_ref e : readers) p.dev.wait(e, p.room.private_stream());
  lock.unlock();
  // The fill: the caller's bytes, or zeros, in chunks (a pageable source is allowed: on cuda
  // the copy is then synchronous with respect to the host, as set-up may be).
  std::string failure;
  try {
    static const std::vector<unsigned char> zeros(std::size_t{4} << 20, 0);
    const std::size_t step = source != nullptr ? bytes : zeros.size();
    for (std::size_t off = 0; off < bytes; off += step) {
      const std::size_t n = std::min(step, bytes - off);
      const void* from = source != nullptr ? static_cast<const unsigned char*>(source) + off
                                           : static_cast<const void*>(zeros.data());
      p.dev.copy_async(static_cast<char*>(where.ptr) + off, from, n, copy_direction::host_to_device,
                       p.room.private_stream());
    }
    p.room.private_stream().synchronize();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  lock.lock();
  if (!failure.empty()) {
    try {
      p.room.private_stream().synchronize();  // nothing of ours still writes the extent
    } catch (...) {
    }
    p.room.free_hbm(where);
    const std::string what = detail::concat("register_resident('", p.tensors[h.index].name, "')");
    p.tensors.remove(h.index);
    impl::throw_copy_failed(what, failure);
  }
  p.tensors.place_resident(h.index, where);
  return h;
}

}  // namespace htp
