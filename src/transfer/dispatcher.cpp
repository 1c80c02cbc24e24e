// The transfer engine's threads: per stream, a dispatcher that issues the highest-priority chunk
// once its tokens are there and a slot is free, and a completer that retires chunks in stream
// order. See Note [Transfer engine] in include/htp/transfer_engine.hpp.
#include "transfer/engine_impl.hpp"

#include <htp/detail/codec_format.hpp>

#include <cinttypes>
#include <cstdio>

namespace htp {
namespace {

std::string hex64(std::uint64_t v) {
  char out[19];
  std::snprintf(out, sizeof(out), "0x%016" PRIx64, v);
  return out;
}

}  // namespace

request* transfer_engine::impl::pick(lane& l) {
  // The oldest queued request is issued even if its fences have not completed (the deadlock-free
  // issue rule); the others wait for theirs. Found in O(1), not by a scan of every queued request.
  const std::uint64_t oldest =
      l.queued_ids.empty() ? std::numeric_limits<std::uint64_t>::max() : *l.queued_ids.begin();
  for (auto& q : l.queues) {
    for (const auto& [key, r] : q) {
      if (r->issued == 0 && !r->after.empty() && r->id != oldest) {
        bool done = true;
        try {
          done = std::all_of(r->after.begin(), r->after.end(),
                             [&](event_ref e) { return dev.query(e); });
        } catch (...) {
          // A broken context (sticky error): let the request go; its wait fails in issue_chunk and
          // fails the request, instead of an exception ending the dispatcher thread.
        }
        if (!done) continue;
        r->after.clear();  // nothing left to wait for
      }
      return r.get();
    }
  }
  return nullptr;
}

void transfer_engine::impl::remove_from_queue(lane& l, const request_ptr& r) {
  if (l.queues[static_cast<std::size_t>(r->priority)].erase(r->queue_key)) {
    l.queued_ids.erase(r->id);
  }
}

void transfer_engine::impl::push_to_queue(lane& l, const request_ptr& r) {
  const std::int64_t need = r->priority == transfer_priority::fault ? detail::no_need : r->need_ns;
  r->queue_key = {detail::issue_key(r->submit_ns, need, cfg.max_deadline_wait.count()), r->id};
  l.queues[static_cast<std::size_t>(r->priority)].push(r->queue_key, r);
  l.queued_ids.insert(r->id);
}

void transfer_engine::impl::finish_locked(const request_ptr& r, transfer_status st) {
  const auto p = static_cast<std::size_t>(r->priority);
  finished_record rec;
  rec.status = st;
  rec.latency_ns = now_ns() - r->submit_ns;
  rec.error = r->error;
  rec.read_error = r->read_error;
  switch (st) {
    case transfer_status::complete:
      ++classes[p].completed;
      latencies[p].record(static_cast<std::uint64_t>(rec.latency_ns));
      break;
    case transfer_status::cancelled: ++classes[p].cancelled; break;
    default: ++classes[p].failed; break;
  }
  words.release(r->word);
  live.erase(r->id);
  const auto latency_ns = rec.latency_ns;
  history.emplace(r->id, std::move(rec));
  while (history.size() > cfg.history) history.erase(history.begin());
  if (cfg.finished_queue)
    finished.push_back({{r->id}, st, std::chrono::nanoseconds(latency_ns), r->read_error});
  finished_cv.notify_all();
}

void transfer_engine::impl::fail_locked(const request_ptr& r, std::string why,
                                        std::exception_ptr read_error) {
  if (live.count(r->id) == 0) return;  // already finished (e.g. by the completer meanwhile)
  if (!r->failed) {
    r->failed = true;
    r->error = std::move(why);
    r->read_error = std::move(read_error);
    remove_from_queue(lane_of(r->direction), r);
  }
  if (r->done == r->issued) {
    dev.write_value(r->word.word, r->word.generation);  // release streams waiting on it
    finish_locked(r, transfer_status::failed);
  }
}

void transfer_engine::impl::issue_chunk(lane& l, const request_ptr& r,
                                        std::unique_lock<std::mutex>& lock) {
  const std::size_t k = r->issued;
  const auto [off, n] = chunk_span(*r, k, cfg.chunk_bytes);
  const bool last = k + 1 == r->chunk_count;
  int slot = -1;
  char* bounce = nullptr;
  if (r->file && !read_file_chunk(l, r, off, n, bounce, lock)) return;
  const event_ref ev = l.free_events.back();
  bool copy_queued = false;
  const std::uint64_t* sum = nullptr;
  const bool verify = bounce != nullptr && r->chunk_checksums != nullptr && !r->coded;
  try {
    if (k == 0) {
      for (event_ref e : r->after) dev.wait(e, l.stream_);
    }
    if (r->coded) {
      issue_piece(r, k, bounce != nullptr ? bounce : r->src + off, ev, slot);
    } else {
      dev.copy_async(r->dst + off, bounce != nullptr ? bounce : r->src + off, n, r->direction,
                     l.stream_);
      copy_queued = true;
      // A verified chunk completes on the verify stream, after its checksum.
      const stream_ref done_on = verify ? verify_stream->ref() : l.stream_.ref();
      if (verify) sum = queue_chunk_checksum(l, bounce, r->dst + off, n);
      // The word is written before the event is recorded, so when the completer sees the event
      // the word holds its generation and may be reused (see value_word_pool.hpp).
      if (last) dev.write_value_async(r->word.word, r->word.generation, done_on);
      dev.record(ev, done_on);
    }
  } catch (const std::exception& e) {
    copy_queued = copy_queued || slot >= 0;
    std::string why = detail::concat("chunk ", k, " of request ", r->id, " failed: ", e.what());
    if (copy_queued) {
      // The copy is queued but nothing tracks its completion. Reporting the failure now would let
      // the owner free (and someone reuse) memory the copy still reads or writes, so wait for the
      // stream first, without the lock (the completer and submitters keep going meanwhile).
      lock.unlock();
      try {
        dev.synchronize(l.stream_);
        if (slot >= 0) decode_stream->synchronize();
        if (verify) verify_stream->synchronize();
      } catch (...) {  // the stream's own failure; the request fails either way
      }
      lock.lock();
    }
    if (bounce != nullptr) l.bounce_free.push_back(bounce);  // no copy reads it any more
    if (slot >= 0) decode_free.push_back(slot);
    fail_locked(r, std::move(why));
    return;
  }
  l.free_events.pop_back();
  ++r->issued;
  if (last) remove_from_queue(l, r);
  if (l.in_flight.empty()) l.busy_since = now_ns();
  l.in_flight.push_back({ev, r, n, bounce, slot, k, sum});
  if (slot >= 0 && decode_in_flight++ == 0) decode_busy_since = now_ns();
  if (cfg.on_chunk_issued) {
    transfer_chunk_info info;
    info.request_id = r->id;
    info.chunk_index = k;
    info.chunk_count = r->chunk_count;
    info.bytes = n;
    info.priority = r->priority;
    info.direction = r->direction;
    cfg.on_chunk_issued(info);
  }
  l.complete_cv.notify_one();
}

void transfer_engine::impl::issue_piece(const request_ptr& r, std::size_t k, const char* from,
                                        event_ref ev, int& slot) {
  HTP_ASSERT(!decode_free.empty(), "no staging buffer free for a decode piece");
  const coded_piece& p = r->coded->pieces[k];
  const int s = decode_free.back();
  decode_slot& d = decode_slots[static_cast<std::size_t>(s)];
  *d.status = 0;  // a free slot: no device work uses its word (a timing-only sim never writes it)
  const stream_ref copy_stream = lanes[0]->stream_;
  dev.copy_async(d.buf, from, p.wire_bytes, copy_direction::host_to_device, copy_stream);
  decode_free.pop_back();
  slot = s;  // from here the slot is the in-flight chunk's (or returned on failure)
  dev.record(d.copied, copy_stream);
  // The decode stream waits for this piece's copy only: the next piece's copy overlaps it.
  dev.wait(d.copied, *decode_stream);
  dev.record(d.t0, *decode_stream);
  // Verified: the device stores the piece's codec status in the slot's word (never failing the
  // stream); the completer reads it before the slot is reused.
  dev.decode_weights_async(d.buf, p.wire_bytes, r->dst + p.decoded_offset, p.decoded_bytes,
                           cfg.verify_page_ins ? d.status : nullptr, *decode_stream);
  dev.record(d.t1, *decode_stream);
  if (k + 1 == r->chunk_count)
    dev.write_value_async(r->word.word, r->word.generation, *decode_stream);
  dev.record(ev, *decode_stream);
}

void transfer_engine::impl::retire_piece(const in_flight_chunk& c) {
  const decode_slot& d = decode_slots[static_cast<std::size_t>(c.staging)];
  try {
    if (const auto t = dev.elapsed(d.t0, d.t1)) decode_counts.decode_ns += t->count();
  } catch (...) {  // a broken context: the time is lost, the chunk's own error is reported
  }
  const coded_piece& p = c.req->coded->pieces[c.index];
  ++decode_counts.pieces;
  decode_counts.wire_bytes += p.wire_bytes;
  decode_counts.logical_bytes += p.decoded_bytes;
  decode_free.push_back(c.staging);
  if (--decode_in_flight == 0)
    decode_counts.busy_ns += static_cast<std::uint64_t>(now_ns() - decode_busy_since);
}

const std::uint64_t* transfer_engine::impl::queue_chunk_checksum(lane& l, char* bounce,
                                                                 const char* dst, std::size_t n) {
  const event& copied = bounce_copied.at(bounce);
  dev.record(copied, l.stream_);
  dev.wait(copied, *verify_stream);  // the next chunk's copy runs while this one is summed
  auto* sum = reinterpret_cast<std::uint64_t*>(bounce + bounce_sum_offset());
  dev.checksum_async(dst, n, sum, *verify_stream);
  return sum;
}

std::exception_ptr transfer_engine::impl::verification_failure(const in_flight_chunk& c,
                                                               std::string& why) const {
  const request& r = *c.req;
  const std::string source =
      r.file ? detail::concat("of '", r.file->name(), "'") : std::string("of the host copy");
  if (c.sum != nullptr) {
    const std::uint64_t want = (*r.chunk_checksums)[c.index];
    if (*c.sum == want) return nullptr;
    why =
        detail::concat("chunk ", c.index, " of request ", r.id, " (", c.bytes, " bytes at offset ",
                       r.file_offset + c.index * cfg.chunk_bytes, " ", source,
                       ") does not match its checksum (", hex64(*c.sum), " in HBM, ", hex64(want),
                       " when registered): the file changed after registration, or the "
                       "bytes were damaged on their way");
  } else if (c.staging >= 0 && cfg.verify_page_ins && !dev.properties().timing_only) {
    const auto st =
        static_cast<codec::status>(*decode_slots[static_cast<std::size_t>(c.staging)].status);
    if (st == codec::status::ok) return nullptr;
    const coded_piece& p = r.coded->pieces[c.index];
    why = detail::concat("piece ", c.index, " of request ", r.id, " (", p.wire_bytes,
                         " wire bytes at offset ", r.file_offset + p.wire_offset, " ", source,
                         ") failed its check on the device: ", codec::describe(st),
                         "; the bytes changed after registration, or were damaged on their way");
  } else {
    return nullptr;
  }
  return std::make_exception_ptr(corrupt_data(why));
}

bool transfer_engine::impl::read_file_chunk(lane& l, const request_ptr& r, std::size_t off,
                                            std::size_t n, char*& bounce,
                                            std::unique_lock<std::mutex>& lock) {
  // One bounce buffer per chunk in flight: the dispatcher issues only below max_in_flight_chunks.
  HTP_ASSERT(!l.bounce_free.empty(), "no bounce buffer free for a file chunk");
  bounce = l.bounce_free.back();
  l.bounce_free.pop_back();
  std::string error;
  std::exception_ptr read_error;
  lock.unlock();  // a read can take milliseconds: submitters, cancels and the completer go on
  try {
    r->file->read(bounce, n, r->file_offset + off);
  } catch (const io_error& e) {
    error = e.what();
    read_error = std::current_exception();
  } catch (const std::exception& e) {
    error = e.what();
  }
  lock.lock();
  if (!error.empty() || r->failed || live.count(r->id) == 0) {  // failed, or cancelled meanwhile
    l.bounce_free.push_back(bounce);
    bounce = nullptr;
    if (!error.empty())
      fail_locked(r,
                  detail::concat("chunk ", off / cfg.chunk_bytes, " of request ", r->id,
                                 ": reading the file failed: ", error),
                  std::move(read_error));
    return false;
  }
  return true;
}

std::exception_ptr transfer_engine::impl::grow_words(std::unique_lock<std::mutex>& lock) {
  growing_words = true;
  lock.unlock();
  std::uint32_t* block = nullptr;
  std::exception_ptr error;
  try {
    block = words.allocate_block();
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  if (block != nullptr) words.add_block(block);  // another thread may have grown it too: kept
  growing_words = false;
  return error;
}

void transfer_engine::impl::dispatch_loop(lane& l) {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (!stopping && !growing_words && !words_growth_failed &&
        words.free_count() < words_low_water) {
      // Many requests live: more words before a submitter runs out. Without pinned memory the
      // dispatchers stop trying (no busy retry); a submitter that finds none free throws.
      words_growth_failed = grow_words(lock) != nullptr;
      continue;
    }
    request* next = pick(l);
    if (!next) {
      if (l.upstream) l.upstream->withdraw(l.upstream_waiter);  // idle: not waiting on the link
      if (stopping) break;
      l.dispatch_cv.wait(lock);
      continue;
    }
    if (l.in_flight.size() >= cfg.max_in_flight_chunks || l.free_events.empty()) {
      if (l.upstream) l.upstream->withdraw(l.upstream_waiter);
      l.dispatch_cv.wait(lock);
      continue;
    }
    const std::size_t n = chunk_span(*next, next->issued, cfg.chunk_bytes).second;
    if (next->direction == copy_direction::device_to_device) {
      if (l.upstream)
        l.upstream->withdraw(l.upstream_waiter);  // takes no tokens: not waiting on the link
    } else {
      std::int64_t wait = l.bucket.time_until_available(n);
      if (wait > 0 && l.upstream) l.upstream->withdraw(l.upstream_waiter);
      // The own bucket holds the bytes (and only this dispatcher takes from it): now the shared
      // link, which takes its tokens at once when it can, so the two never disagree.
      if (wait == 0 && l.upstream)
        wait = l.upstream->take_or_wait(n, next->priority, l.upstream_waiter);
      if (wait > 0) {
        // Woken early by a submit, cancel or rate change: pick again, a fault may have arrived.
        const std::int64_t t0 = now_ns();
        l.dispatch_cv.wait_for(lock, std::chrono::nanoseconds(wait));
        l.token_wait_ns += static_cast<std::uint64_t>(now_ns() - t0);
        continue;
      }
      const bool took = l.bucket.try_take(n);
      HTP_ASSERT(took, "tokens vanished between time_until_available and try_take");
    }
    const request_ptr r = live.at(next->id);
    issue_chunk(l, r, lock);
  }
  l.dispatcher_done = true;
  l.complete_cv.notify_all();
}

void transfer_engine::impl::complete_loop(lane& l) {
  std::unique_lock lock(mutex_);
  for (;;) {
    l.complete_cv.wait(lock, [&] { return !l.in_flight.empty() || l.dispatcher_done; });
    if (l.in_flight.empty()) break;
    const event_ref ev = l.in_flight.front().ev;
    std::string error;
    lock.unlock();
    try {
      dev.synchronize(ev);  // chunks complete in stream order, so the front completes first
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    in_flight_chunk c = std::move(l.in_flight.front());
    l.in_flight.pop_front();
    std::string corrupt_why;  // read before the chunk's bounce buffer or staging slot is reused
    const std::exception_ptr corrupt =
        error.empty() ? verification_failure(c, corrupt_why) : nullptr;
    if (c.bounce != nullptr) l.bounce_free.push_back(c.bounce);
    if (l.held.count(c.ev.native) != 0) {
      l.deferred.push_back(c.ev);  // a wait_on is enqueueing a wait on it: recycled when it is done
    } else {
      l.free_events.push_back(c.ev);
    }
    const request_ptr& r = c.req;
    ++r->done;
    if (c.staging >= 0) retire_piece(c);
    const std::size_t d = dir_index(r->direction);
    bytes_done[d] += c.bytes;
    ++chunks_done[d];
    if (l.in_flight.empty()) l.busy_ns += static_cast<std::uint64_t>(now_ns() - l.busy_since);
    if (!error.empty()) {
      fail_locked(r, "device error while copying request " + std::to_string(r->id) + ": " + error);
    } else if (corrupt) {
      fail_locked(r, std::move(corrupt_why), corrupt);
    } else if (r->failed) {
      fail_locked(r, r->error, r->read_error);
    } else if (r->done == r->chunk_count) {
      finish_locked(r, transfer_status::complete);
    }
    l.dispatch_cv.notify_one();
  }
}

}  // namespace htp
