// The transfer engine's private state, shared by transfer_engine.cpp (construction, the public
// API) and dispatcher.cpp (the dispatcher and completer threads). One mutex guards it all.
#pragma once

#include <htp/shared_link.hpp>
#include <htp/tensor_file.hpp>
#include <htp/transfer_engine.hpp>

#include <htp/detail/check.hpp>
#include <htp/error.hpp>
#include <htp/token_bucket.hpp>

#include "transfer/deadline_queue.hpp"
#include "transfer/value_word_pool.hpp"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace htp {

namespace transfer {

inline std::int64_t now_ns() { return token_bucket::steady_clock_ns(); }

struct request {
  std::uint64_t id = 0;
  char* dst = nullptr;
  const char* src = nullptr;
  std::size_t bytes = 0;
  copy_direction direction = copy_direction::host_to_device;
  transfer_priority priority = transfer_priority::prefetch;
  std::size_t chunk_count = 0;
  std::size_t issued = 0;  // chunks issued
  std::size_t done = 0;    // chunks completed
  bool failed = false;
  std::string error;
  std::exception_ptr read_error;  // the io_error of a failed file read (null for device errors)
  transfer::value_word word;
  std::int64_t submit_ns = 0;
  std::int64_t need_ns = detail::no_need;  // set_need_time; no_need when not said
  detail::deadline_key queue_key;          // its place in its class's queue (Note [Deadline order])
  std::vector<event_ref> after;            // the stream waits on these before the first chunk
  std::shared_ptr<const tensor_file> file;  // the source instead of `src` (submit_from_file)
  std::uint64_t file_offset = 0;
  std::shared_ptr<const coded_layout> coded;  // submit_decode: chunk k is piece k, decoded
  // submit_from_file with verification: htp::checksum of each chunk, compared in complete_loop
  // with the device's checksum of the chunk's bytes in HBM. Null: not verified.
  std::shared_ptr<const std::vector<std::uint64_t>> chunk_checksums;
};
using request_ptr = std::shared_ptr<request>;

struct finished_record {
  transfer_status status = transfer_status::complete;
  std::int64_t latency_ns = 0;
  std::string error;
  std::exception_ptr read_error;  // as request::read_error
};

struct in_flight_chunk {
  event_ref ev;
  request_ptr req;
  std::size_t bytes = 0;
  char* bounce = nullptr;  // a file chunk's pinned bounce buffer, free again once the copy is done
  int staging = -1;        // a decoded piece's staging slot, free again once its decode is done
  std::size_t index = 0;   // the chunk's index in its request
  // A verified file chunk: the pinned word behind its bounce buffer holding the device's checksum
  // of the chunk in HBM (valid once `ev` has completed). Null: not verified.
  const std::uint64_t* sum = nullptr;
};

/// One buffer of the decode staging ring: a piece is copied into `buf` (then `copied` is recorded
/// on the prefetch stream) and decoded from it on the decode stream between `t0` and `t1`.
struct decode_slot {
  char* buf = nullptr;
  event copied;
  event_ref t0;
  event_ref t1;
  std::uint32_t* status = nullptr;  // pinned: the verified decode's codec status (verify_page_ins)
};

/// The source range and size of chunk `k` of `r`: a piece of a decode request, a fixed-size chunk
/// otherwise.
inline std::pair<std::size_t, std::size_t> chunk_span(const request& r, std::size_t k,
                                                      std::size_t chunk_bytes) {
  if (r.coded) return {r.coded->pieces[k].wire_offset, r.coded->pieces[k].wire_bytes};
  const std::size_t off = k * chunk_bytes;
  return {off, std::min(chunk_bytes, r.bytes - off)};
}

inline std::size_t dir_index(copy_direction d) {
  switch (d) {
    case copy_direction::host_to_device: return 0;
    case copy_direction::device_to_host: return 1;
    default: return 2;
  }
}

}  // namespace transfer

using transfer::chunk_span;
using transfer::decode_slot;
using transfer::dir_index;
using transfer::finished_record;
using transfer::in_flight_chunk;
using transfer::now_ns;
using transfer::request;
using transfer::request_ptr;

/// One stream with its dispatcher and completer. Lane 0: prefetch (H2D); lane 1: reduction (D2H,
/// D2D). Everything but the owned objects is guarded by impl::mutex_.
struct lane {
  lane(device& dev, std::uint64_t rate, std::uint64_t burst) : stream_(dev), bucket(rate, burst) {}
  stream stream_;
  token_bucket bucket;  // the host link direction of this lane (D2D chunks take no tokens)
  std::shared_ptr<shared_link> upstream;  // shared with other engines, or null
  shared_link::waiter upstream_waiter;
  // Per priority class, in issue order (Note [Deadline order]): a request stays queued until
  // its last chunk is issued.
  std::array<detail::deadline_queue<request_ptr>, transfer_priority_count> queues;
  std::set<std::uint64_t> queued_ids;  // ids of every queued request: the oldest in O(log n)
  std::deque<in_flight_chunk> in_flight;
  std::vector<event> events;
  std::vector<event_ref> free_events;
  // Chunk events a wait_on is about to enqueue a wait on (outside the lock): not recycled (and
  // so not re-recorded) until the hold is dropped. Completed held events wait in `deferred`.
  std::unordered_map<void*, int> held;
  std::vector<event_ref> deferred;
  std::condition_variable dispatch_cv;
  std::condition_variable complete_cv;
  bool dispatcher_done = false;
  std::int64_t busy_since = 0;
  std::uint64_t busy_ns = 0;
  std::uint64_t token_wait_ns = 0;
  std::uint64_t link_peak = 0;
  std::vector<char*> bounce_free;  // file chunks' pinned bounce buffers not in flight
  std::thread dispatcher;
  std::thread completer;
};

struct transfer_engine::impl {
  impl(device& d, transfer_config c);
  ~impl();

  void dispatch_loop(lane& l);
  void complete_loop(lane& l);
  request* pick(lane& l);
  void issue_chunk(lane& l, const request_ptr& r, std::unique_lock<std::mutex>& lock);
  /// Fails the request with `why`; `read_error`: the io_error of a failed file read, if that was
  /// the cause (wait() then throws an io_error with its path and errno).
  void fail_locked(const request_ptr& r, std::string why, std::exception_ptr read_error = nullptr);
  void finish_locked(const request_ptr& r, transfer_status st);
  void remove_from_queue(lane& l, const request_ptr& r);
  /// Queues `r` in its class under a key from its submission, need time and class (faults ignore
  /// need times: they are all needed now).
  void push_to_queue(lane& l, const request_ptr& r);
  /// Takes a request with chunks still to issue out of its queue, applies `change` (which
  /// returns whether it changed anything) and queues it again under its new key. False for a
  /// finished, failed or fully issued request, or when `change` declines. Takes the lock.
  bool requeue(transfer_ticket t, const std::function<bool(request&)>& change);
  /// Queues a filled-in request (ids, completion word, metrics) on its direction's lane.
  transfer_ticket enqueue(request_ptr r, const char* call);
  lane& lane_of(copy_direction d) {
    return d == copy_direction::host_to_device ? *lanes[0] : *lanes[1];
  }
  lane& link_lane(copy_direction d, const char* what);
  transfer_status status_locked(std::uint64_t id) const;
  /// Refuses a copy end outside the memory the engine was given: device memory for the device
  /// side, pinned host memory (transfer_config::host_memory, add_host_memory) for the host side, so
  /// no cudaMemcpyAsync the dispatcher issues under the lock can turn synchronous on pageable
  /// memory.
  void check_region(const void* ptr, std::size_t bytes, copy_direction d, bool source) const;

  // Memory copies may write into, by start address (O(log n) lookups; host regions come and go
  // as callers lend memory). Guarded by regions_mutex_, never held with mutex_.
  mutable std::mutex regions_mutex_;
  std::map<const char*, std::size_t> device_regions_;
  std::map<const char*, std::size_t> host_regions_;

  device& dev;
  transfer_config cfg;
  std::int64_t start_ns = now_ns();

  mutable std::mutex mutex_;
  std::condition_variable finished_cv;
  bool stopping = false;
  bool growing_words = false;        ///< a dispatcher is pinning another block of value words
  bool words_growth_failed = false;  ///< a dispatcher could not: it stops trying (no busy retry)
  /// Below this many free value words a dispatcher pins another block, with the lock dropped and
  /// outside every caller's lock, so that a submitter (which may hold the pager's lock) almost
  /// never has to.
  static constexpr std::size_t words_low_water = transfer::value_word_pool::block_words / 4;
  /// Pins and adds a block of value words with `lock` dropped meanwhile; returns the device's
  /// error (nothing added) or null. The dispatchers call it ahead of need, enqueue when every word
  /// is live.
  std::exception_ptr grow_words(std::unique_lock<std::mutex>& lock);
  std::uint64_t next_id = 1;
  std::unordered_map<std::uint64_t, request_ptr> live;
  std::map<std::uint64_t, finished_record> history;
  std::vector<finished_transfer> finished;  // for take_finished (cfg.finished_queue)
  transfer::value_word_pool words;
  std::array<std::uint64_t, 3> bytes_done{};
  std::array<std::uint64_t, 3> chunks_done{};
  std::array<transfer_class_metrics, transfer_priority_count> classes{};
  std::array<latency_histogram, transfer_priority_count> latencies{};
  std::array<std::unique_ptr<lane>, 2> lanes;
  // The prefetch lane's bounce buffers for file requests (chunk_bytes each, then a pinned checksum
  // word at bounce_sum_offset()), made on the first submit_from_file outside mutex_ (bounce_mutex_
  // only orders their creation), with an event per buffer recorded after its copy, on which the
  // verify stream waits (a verified chunk is checksummed there, off the copy stream).
  std::mutex bounce_mutex_;
  std::vector<char*> bounce_all;
  std::map<const char*, event> bounce_copied;
  std::unique_ptr<stream> verify_stream;
  std::size_t bounce_sum_offset() const { return (cfg.chunk_bytes + 63) / 64 * 64; }
  std::size_t bounce_alloc_bytes() const { return bounce_sum_offset() + 64; }
  /// Queues the verification of a file chunk just copied from `bounce` into [dst, dst + n): the
  /// copy's event, the verify stream's wait on it, the checksum into the buffer's word. Returns
  /// the word.
  const std::uint64_t* queue_chunk_checksum(lane& l, char* bounce, const char* dst, std::size_t n);
  /// The htp::corrupt_data a completed chunk's verification found (null when it passed or was not
  /// verified), with `why` set to its message. Under the lock, before its buffers are reused.
  std::exception_ptr verification_failure(const in_flight_chunk& c, std::string& why) const;
  /// Reads a file chunk into a bounce buffer with the lock dropped; false when the request was
  /// cancelled or failed meanwhile or the read failed (then the request is failed).
  /// Queues piece k of decode request `r`: its copy from `from` into a staging slot, the decode
  /// on the decode stream, the completion word after the last piece, and `ev` behind it. Sets
  /// `slot` once the copy is queued.
  void issue_piece(const request_ptr& r, std::size_t k, const char* from, event_ref ev, int& slot);
  /// Retires a completed decode piece (frees its slot, counts it). Under the lock.
  void retire_piece(const in_flight_chunk& c);
  /// Shared by submit_decode and submit_decode_from_file: checks `layout` and fills a request.
  request_ptr decode_request(void* dst, const std::shared_ptr<const coded_layout>& layout,
                             transfer_priority priority, std::vector<event_ref> after,
                             const char* call);

  // The decode path (prepare_decode): made once, under decode_mutex_ (creation only).
  std::mutex decode_mutex_;
  std::unique_ptr<stream> decode_stream;
  std::vector<decode_slot> decode_slots;
  std::vector<int> decode_free;                  // slots not in flight (mutex_)
  std::uint32_t* decode_status_words = nullptr;  // one pinned block: decode_slots[i].status
  std::size_t decode_status_bytes = 0;
  transfer_decode_metrics decode_counts;
  std::size_t decode_in_flight = 0;
  std::int64_t decode_busy_since = 0;
  bool read_file_chunk(lane& l, const request_ptr& r, std::size_t off, std::size_t n, char*& bounce,
                       std::unique_lock<std::mutex>& lock);
};

}  // namespace htp
