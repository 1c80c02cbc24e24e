// The transfer engine: request bookkeeping, one dispatcher and one completer thread per stream.
// See Note [Transfer engine] in include/htp/transfer_engine.hpp.
#include <htp/detail/link_checks.hpp>
#include "transfer/engine_impl.hpp"

namespace htp {

const char* to_string(transfer_priority p) noexcept {
  switch (p) {
    case transfer_priority::fault: return "fault";
    case transfer_priority::prefetch: return "prefetch";
    case transfer_priority::writeback: return "writeback";
    case transfer_priority::compaction: return "compaction";
  }
  return "?";
}

const char* to_string(transfer_status s) noexcept {
  switch (s) {
    case transfer_status::queued: return "queued";
    case transfer_status::in_flight: return "in_flight";
    case transfer_status::complete: return "complete";
    case transfer_status::cancelled: return "cancelled";
    case transfer_status::failed: return "failed";
    case transfer_status::expired: return "expired";
  }
  return "?";
}

namespace {

std::uint64_t resolve_link(device& dev, const transfer_config& c, transfer_link_config& link,
                           copy_direction d) {
  if (!link.link_bytes_per_second)
    link.link_bytes_per_second =
        measure_copy_bandwidth(dev, d, c.calibration_bytes, c.calibration_repeats);
  if (!link.rate_bytes_per_second)
    link.rate_bytes_per_second = std::max<std::uint64_t>(
        1, static_cast<std::uint64_t>(static_cast<double>(*link.link_bytes_per_second) *
                                      c.default_cap_fraction));
  if (link.burst_bytes == 0) link.burst_bytes = 2 * static_cast<std::uint64_t>(c.chunk_bytes);
  return *link.link_bytes_per_second;
}

void validate(const transfer_config& c) {
  HTP_EXPECTS(c.chunk_bytes > 0, invalid_argument, "transfer_config: chunk_bytes must be > 0");
  HTP_EXPECTS(c.max_deadline_wait.count() > 0, invalid_argument,
              "transfer_config: max_deadline_wait must be > 0 (it bounds how long a request may "
              "be overtaken; 100 ms is the default)");
  HTP_EXPECTS(c.max_in_flight_chunks >= 1, invalid_argument,
              "transfer_config: max_in_flight_chunks must be >= 1");
  HTP_EXPECTS(c.default_cap_fraction > 0 && c.default_cap_fraction <= 1, invalid_argument,
              "transfer_config: default_cap_fraction ", c.default_cap_fraction,
              " is not in (0, 1]");
  detail::check_link_config(c.h2d, "transfer_config.h2d", c.chunk_bytes,
                            "transfer_config.chunk_bytes");
  detail::check_link_config(c.d2h, "transfer_config.d2h", c.chunk_bytes,
                            "transfer_config.chunk_bytes");
  HTP_EXPECTS(c.calibration_bytes > 0 && c.calibration_repeats >= 1, invalid_argument,
              "transfer_config: calibration needs bytes > 0 and repeats >= 1");
}

}  // namespace

transfer_engine::impl::impl(device& d, transfer_config c) : dev(d), cfg(std::move(c)), words(d) {
  validate(cfg);
  for (const auto& r : cfg.device_memory)
    device_regions_.emplace(static_cast<const char*>(r.ptr), r.bytes);
  for (const auto& r : cfg.host_memory)
    host_regions_.emplace(static_cast<const char*>(r.ptr), r.bytes);
  const std::uint64_t peak[2] = {resolve_link(dev, cfg, cfg.h2d, copy_direction::host_to_device),
                                 resolve_link(dev, cfg, cfg.d2h, copy_direction::device_to_host)};
  const transfer_link_config* links[2] = {&cfg.h2d, &cfg.d2h};
  for (std::size_t i = 0; i < 2; ++i) {
    lanes[i] = std::make_unique<lane>(dev, *links[i]->rate_bytes_per_second, links[i]->burst_bytes);
    lane& l = *lanes[i];
    l.bucket.set_unlimited(links[i]->unlimited);
    l.upstream = links[i]->upstream;
    l.link_peak = peak[i];
    for (std::size_t k = 0; k < cfg.max_in_flight_chunks; ++k) {
      l.events.emplace_back(dev);
      l.free_events.push_back(l.events.back().ref());
    }
  }
  words.reserve(4 * transfer::value_word_pool::block_words);  // not under the lock, later
  for (auto& l : lanes) {
    l->dispatcher = std::thread([this, p = l.get()] { dispatch_loop(*p); });
    l->completer = std::thread([this, p = l.get()] { complete_loop(*p); });
  }
}

transfer_engine::impl::~impl() {
  {
    std::lock_guard lock(mutex_);
    stopping = true;
    for (auto& l : lanes) {
      for (auto& q : l->queues) {
        q.erase_if([&](const request_ptr& r) {
          if (r->issued != 0 || r->failed) return false;
          dev.write_value(r->word.word, r->word.generation);
          l->queued_ids.erase(r->id);
          finish_locked(r, transfer_status::cancelled);
          return true;
        });
      }
      l->dispatch_cv.notify_all();
    }
  }
  for (auto& l : lanes) l->dispatcher.join();
  for (auto& l : lanes) l->completer.join();
  for (auto& l : lanes) {
    try {
      l->stream_.synchronize();
    } catch (...) {  // a sticky device error; nothing more to do at shutdown
    }
  }
  if (verify_stream) {
    try {
      verify_stream->synchronize();
    } catch (...) {  // a sticky device error; nothing more to do at shutdown
    }
  }
  for (char* b : bounce_all) dev.deallocate(memory_kind::pinned_host, b, bounce_alloc_bytes());
  if (decode_stream) {
    try {
      decode_stream->synchronize();
    } catch (...) {  // a sticky device error (a corrupt piece on sim); nothing more to do
    }
  }
  for (auto& d : decode_slots) {
    dev.deallocate(memory_kind::device, d.buf, cfg.chunk_bytes);
    dev.destroy_event(d.t0);
    dev.destroy_event(d.t1);
  }
  if (decode_status_words != nullptr)
    dev.deallocate(memory_kind::pinned_host, decode_status_words, decode_status_bytes);
}

// Note [Fenced requests and deadlock]
// A request with `after` events makes the lane's stream wait for them: for an event E recorded on
// a compute stream. Whatever that compute stream waits on before recording E was submitted before
// the fenced request (E existed when it was submitted). If the fenced request's wait were queued
// on the stream ahead of such an older request's chunks, the stream would wait for E, E for the
// compute stream, and the compute stream for those chunks: a cycle. So a fenced request whose
// events have not completed is issued only once every older request on its lane has been fully
// issued; priorities still order everything else. The oldest pending request is never blocked,
// so the dispatcher always makes progress.
void transfer_engine::impl::check_region(const void* ptr, std::size_t bytes, copy_direction d,
                                         bool source) const {
  // H2D: the source is host memory and the destination device memory; D2H the other way round;
  // D2D both are device memory.
  const bool device_side =
      d == copy_direction::device_to_device || (d == copy_direction::host_to_device) != source;
  const auto* p = static_cast<const char*>(ptr);
  std::lock_guard lock(regions_mutex_);
  const auto& regions = device_side ? device_regions_ : host_regions_;
  auto it = regions.upper_bound(p);
  if (it != regions.begin()) {
    --it;
    const char* base = it->first;
    if (p >= base && bytes <= it->second &&
        static_cast<std::size_t>(p - base) <= it->second - bytes)
      return;
  }
  // A source outside the engine's host memory may be pageable: its cudaMemcpyAsync would then be
  // synchronous, under the engine's lock, while a stream may be parked on a later copy.
  throw invalid_argument(detail::concat(
      "transfer_engine::submit: ", source ? "source" : "destination", " [", ptr, ", +", bytes,
      ") (", to_string(d), ") is not inside the ", device_side ? "device" : "pinned host",
      " memory the engine was given (", regions.size(), " regions in transfer_config::",
      device_side ? "device_memory" : "host_memory", " and add_host_memory)",
      device_side ? "" : "; pin or register the host memory and give it to the engine first"));
}

void transfer_engine::add_host_memory(memory_region r) {
  HTP_EXPECTS(r.ptr != nullptr && r.bytes > 0, invalid_argument,
              "transfer_engine::add_host_memory: give a non-null region of at least one byte");
  std::lock_guard lock(impl_->regions_mutex_);
  const auto* b = static_cast<const char*>(r.ptr);
  auto& m = impl_->host_regions_;
  auto next = m.lower_bound(b);
  const bool overlaps = (next != m.end() && next->first < b + r.bytes) ||
                        (next != m.begin() && std::prev(next)->first + std::prev(next)->second > b);
  HTP_EXPECTS(!overlaps, invalid_argument, "transfer_engine::add_host_memory(", r.ptr, ", ",
              r.bytes, "): overlaps a region the engine already has");
  m.emplace(b, r.bytes);
}

void transfer_engine::remove_host_memory(const void* ptr) {
  std::lock_guard lock(impl_->regions_mutex_);
  HTP_EXPECTS(impl_->host_regions_.erase(static_cast<const char*>(ptr)) == 1, invalid_argument,
              "transfer_engine::remove_host_memory(", ptr, "): not the start of a host region");
}

lane& transfer_engine::impl::link_lane(copy_direction d, const char* what) {
  HTP_EXPECTS(d == copy_direction::host_to_device || d == copy_direction::device_to_host,
              invalid_argument, "transfer_engine::", what, ": direction ", to_string(d),
              " has no host link to cap; use H2D or D2H");
  return lane_of(d);
}

transfer_status transfer_engine::impl::status_locked(std::uint64_t id) const {
  HTP_EXPECTS(id != 0 && id < next_id, invalid_argument, "transfer ticket ", id,
              " was not returned by this engine");
  if (auto it = live.find(id); it != live.end())
    return it->second->issued == 0 ? transfer_status::queued : transfer_status::in_flight;
  if (auto it = history.find(id); it != history.end()) return it->second.status;
  return transfer_status::expired;
}

// ---- public ----------------------------------------------------------------------------------

transfer_engine::transfer_engine(device& dev, transfer_config config)
    : impl_(std::make_unique<impl>(dev, std::move(config))) {}

transfer_engine::~transfer_engine() = default;

transfer_ticket transfer_engine::submit(void* dst, const void* src, std::size_t bytes,
                                        copy_direction direction, transfer_priority priority) {
  return submit(dst, src, bytes, direction, priority, {});
}

transfer_ticket transfer_engine::submit(void* dst, const void* src, std::size_t bytes,
                                        copy_direction direction, transfer_priority priority,
                                        std::vector<event_ref> after) {
  HTP_EXPECTS(dst != nullptr && src != nullptr, invalid_argument, "transfer_engine::submit(", dst,
              ", ", src, ", ", bytes, "): source and destination must be non-null");
  HTP_EXPECTS(bytes > 0, invalid_argument,
              "transfer_engine::submit: a transfer must move at least one byte");
  HTP_EXPECTS(direction != copy_direction::host_to_host, invalid_argument,
              "transfer_engine::submit: H2H copies are not the engine's business; use memcpy");
  const auto pi = static_cast<std::size_t>(priority);
  HTP_EXPECTS(pi < transfer_priority_count, invalid_argument,
              "transfer_engine::submit: unknown priority ", pi);
  const auto* a = static_cast<const char*>(dst);
  const auto* b = static_cast<const char*>(src);
  HTP_EXPECTS(a + bytes <= b || b + bytes <= a, invalid_argument, "transfer_engine::submit(", dst,
              ", ", src, ", ", bytes, "): source and destination overlap");
  impl_->check_region(dst, bytes, direction, /*source=*/false);
  impl_->check_region(src, bytes, direction, /*source=*/true);

  auto r = std::make_shared<request>();
  r->dst = static_cast<char*>(dst);
  r->src = b;
  r->bytes = bytes;
  r->direction = direction;
  r->priority = priority;
  r->chunk_count = (bytes + impl_->cfg.chunk_bytes - 1) / impl_->cfg.chunk_bytes;
  r->after = std::move(after);
  return impl_->enqueue(std::move(r), "submit");
}

transfer_ticket transfer_engine::impl::enqueue(request_ptr r, const char* call) {
  std::unique_lock lock(mutex_);
  HTP_EXPECTS(!stopping, logic_error, "transfer_engine::", call, " during destruction");
  while (!words.has_free()) {
    // Rare: the dispatchers pin more words ahead (grow_words) once fewer than words_low_water are
    // free. Here every word is live: pin another block without the engine's lock (cudaHostAlloc
    // may synchronise the device, and streams may be parked on words meanwhile). The caller's own
    // lock (the pager's) is still held: the reason the dispatchers grow the pool first.
    if (std::exception_ptr error = grow_words(lock)) std::rethrow_exception(error);
    HTP_EXPECTS(!stopping, logic_error, "transfer_engine::", call, " during destruction");
  }
  r->word = words.acquire();
  r->id = next_id++;
  r->submit_ns = now_ns();
  live.emplace(r->id, r);
  const auto pi = static_cast<std::size_t>(r->priority);
  ++classes[pi].submitted;
  lane& l = lane_of(r->direction);
  push_to_queue(l, r);
  l.dispatch_cv.notify_one();
  return transfer_ticket{r->id};
}

bool transfer_engine::cancel(transfer_ticket t) {
  std::lock_guard lock(impl_->mutex_);
  if (impl_->status_locked(t.id) != transfer_status::queued) return false;
  const request_ptr r = impl_->live.at(t.id);
  lane& l = impl_->lane_of(r->direction);
  impl_->remove_from_queue(l, r);
  impl_->dev.write_value(r->word.word, r->word.generation);
  impl_->finish_locked(r, transfer_status::cancelled);
  l.dispatch_cv.notify_one();
  return true;
}

bool transfer_engine::impl::requeue(transfer_ticket t,
                                    const std::function<bool(request&)>& change) {
  std::lock_guard lock(mutex_);
  const transfer_status st = status_locked(t.id);
  if (st != transfer_status::queued && st != transfer_status::in_flight) return false;
  const request_ptr r = live.at(t.id);
  // A failed request waits only for its issued chunks; it must not re-enter a queue.
  if (r->failed || r->issued == r->chunk_count) return false;
  lane& l = lane_of(r->direction);
  remove_from_queue(l, r);  // O(log n), then back under its new key
  const bool changed = change(*r);
  push_to_queue(l, r);
  if (changed) l.dispatch_cv.notify_one();
  return changed;
}

bool transfer_engine::raise_priority(transfer_ticket t, transfer_priority priority) {
  return impl_->requeue(t, [&](request& r) {
    if (priority >= r.priority) return false;  // never lowers
    --impl_->classes[static_cast<std::size_t>(r.priority)].submitted;
    r.priority = priority;
    ++impl_->classes[static_cast<std::size_t>(priority)].submitted;
    return true;
  });
}

bool transfer_engine::set_need_time(transfer_ticket t, std::chrono::steady_clock::time_point need) {
  return impl_->requeue(t, [&](request& r) {
    r.need_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(need.time_since_epoch()).count();
    return true;
  });
}

void transfer_engine::wait_on(transfer_ticket t, stream_ref compute) {
  HTP_EXPECTS(static_cast<bool>(compute), invalid_argument,
              "transfer_engine::wait_on: null stream");
  // Decide under the lock, enqueue without it: a caller's stream whose queue is full blocks the
  // enqueue, and the dispatcher needs this lock to issue the copy that would drain it.
  transfer::value_word word;
  event_ref last_chunk;
  lane* held_in = nullptr;
  {
    std::lock_guard lock(impl_->mutex_);
    impl_->status_locked(t.id);  // validates the ticket
    auto it = impl_->live.find(t.id);
    if (it == impl_->live.end()) return;  // finished: nothing to wait for
    const request_ptr& r = it->second;
    lane& l = impl_->lane_of(r->direction);
    if (r->issued == r->chunk_count && !r->failed) {
      // Every chunk is on the stream: wait on the last one's event (a plain event wait, no
      // stream memory operation), held so it is not recycled before the wait is enqueued.
      for (auto c = l.in_flight.rbegin(); c != l.in_flight.rend(); ++c) {
        if (c->req == r) {
          last_chunk = c->ev;
          ++l.held[last_chunk.native];
          held_in = &l;
          break;
        }
      }
    }
    if (!last_chunk) word = r->word;  // not issued yet: the word its last chunk will write
  }
  if (!last_chunk) {
    // Safe after the lock: words are never freed, and a generation, once written, stays reached
    // (later users write larger ones; the wait is wrap-safe >=; value_word_pool.hpp).
    impl_->dev.wait_value_async(word.word, word.generation, compute);
    return;
  }
  const auto unhold = [&] {
    std::lock_guard lock(impl_->mutex_);
    lane& l = *held_in;
    auto h = l.held.find(last_chunk.native);
    if (--h->second > 0) return;
    l.held.erase(h);
    auto d = std::find(l.deferred.begin(), l.deferred.end(), last_chunk);
    if (d != l.deferred.end()) {  // completed meanwhile: recyclable now
      l.deferred.erase(d);
      l.free_events.push_back(last_chunk);
      l.dispatch_cv.notify_one();
    }
  };
  try {
    impl_->dev.wait(last_chunk, compute);
  } catch (...) {
    unhold();
    throw;
  }
  unhold();
}

void transfer_engine::wait(transfer_ticket t) {
  std::unique_lock lock(impl_->mutex_);
  impl_->status_locked(t.id);
  impl_->finished_cv.wait(lock, [&] { return impl_->live.count(t.id) == 0; });
  auto it = impl_->history.find(t.id);
  if (it == impl_->history.end() || it->second.status != transfer_status::failed) return;
  const std::string why =
      detail::concat("transfer_engine: request ", t.id, " failed: ", it->second.error);
  if (it->second.read_error) {
    try {
      std::rethrow_exception(it->second.read_error);
    } catch (const io_error& e) {
      throw io_error(why, e.path(), e.error_number());
    } catch (const corrupt_data&) {
      throw corrupt_data(why);
    }
  }
  throw logic_error(why);
}

void transfer_engine::drain() {
  std::unique_lock lock(impl_->mutex_);
  impl_->finished_cv.wait(lock, [&] { return impl_->live.empty(); });
}

std::vector<finished_transfer> transfer_engine::take_finished() {
  std::vector<finished_transfer> out;
  std::lock_guard lock(impl_->mutex_);
  out.swap(impl_->finished);
  return out;
}

bool transfer_engine::is_complete(transfer_ticket t) const {
  const auto s = status(t);
  return s != transfer_status::queued && s != transfer_status::in_flight;
}

transfer_status transfer_engine::status(transfer_ticket t) const {
  std::lock_guard lock(impl_->mutex_);
  return impl_->status_locked(t.id);
}

std::optional<std::chrono::nanoseconds> transfer_engine::latency(transfer_ticket t) const {
  std::lock_guard lock(impl_->mutex_);
  impl_->status_locked(t.id);
  auto it = impl_->history.find(t.id);
  if (it == impl_->history.end() || it->second.status != transfer_status::complete)
    return std::nullopt;
  return std::chrono::nanoseconds(it->second.latency_ns);
}

void transfer_engine::set_rate(copy_direction direction, std::uint64_t bytes_per_second) {
  lane& l = impl_->link_lane(direction, "set_rate");
  l.bucket.set_rate(bytes_per_second);  // throws on 0 before changing anything
  std::lock_guard lock(impl_->mutex_);
  l.dispatch_cv.notify_one();
}

void transfer_engine::set_unlimited(copy_direction direction) {
  lane& l = impl_->link_lane(direction, "set_unlimited");
  l.bucket.set_unlimited(true);
  std::lock_guard lock(impl_->mutex_);
  l.dispatch_cv.notify_one();
}

transfer_metrics transfer_engine::metrics() const {
  std::lock_guard lock(impl_->mutex_);
  transfer_metrics m;
  const std::int64_t now = now_ns();
  m.elapsed_ns = static_cast<std::uint64_t>(now - impl_->start_ns);
  transfer_direction_metrics* dirs[3] = {&m.h2d, &m.d2h, &m.d2d};
  for (std::size_t d = 0; d < 3; ++d) {
    auto& o = *dirs[d];
    const lane& l = *impl_->lanes[d == 0 ? 0 : 1];
    o.bytes = impl_->bytes_done[d];
    o.chunks = impl_->chunks_done[d];
    // busy time is per stream; D2H and D2D share the reduction stream's.
    o.busy_ns =
        l.busy_ns + (l.in_flight.empty() ? 0 : static_cast<std::uint64_t>(now - l.busy_since));
    o.achieved_gbps =
        o.busy_ns ? static_cast<double>(o.bytes) / static_cast<double>(o.busy_ns) : 0.0;
    if (d < 2) {
      o.token_wait_ns = l.token_wait_ns;
      o.rate_cap_bytes_per_second = l.bucket.unlimited() ? 0 : l.bucket.rate();
      o.link_peak_bytes_per_second = l.link_peak;
      o.utilization = l.link_peak ? o.achieved_gbps * 1e9 / static_cast<double>(l.link_peak) : 0.0;
    }
  }
  m.decode = impl_->decode_counts;
  if (impl_->decode_in_flight != 0)
    m.decode.busy_ns += static_cast<std::uint64_t>(now - impl_->decode_busy_since);
  for (std::size_t p = 0; p < transfer_priority_count; ++p) {
    m.classes[p] = impl_->classes[p];
    m.classes[p].queue_depth =
        impl_->lanes[0]->queues[p].size() + impl_->lanes[1]->queues[p].size();
    m.classes[p].latency = impl_->latencies[p].summary();
  }
  return m;
}

std::uint64_t transfer_engine::link_peak(copy_direction direction) const {
  lane& l = impl_->link_lane(direction, "link_peak");
  std::lock_guard lock(impl_->mutex_);
  return l.link_peak;
}

std::uint64_t transfer_engine::effective_rate(copy_direction direction) const {
  lane& l = impl_->link_lane(direction, "effective_rate");
  std::lock_guard lock(impl_->mutex_);
  return l.bucket.unlimited() ? l.link_peak : l.bucket.rate();
}

stream_ref transfer_engine::prefetch_stream() const noexcept {
  return impl_->lanes[0]->stream_.ref();
}
stream_ref transfer_engine::reduction_stream() const noexcept {
  return impl_->lanes[1]->stream_.ref();
}
const transfer_config& transfer_engine::config() const noexcept { return impl_->cfg; }

}  // namespace htp
