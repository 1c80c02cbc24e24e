// Sim collectives with one rank per process (make_sim_rank_collectives): each call is a host
// function on the caller's sim stream that meets the other processes' calls in a shared-memory
// segment (rank_segment.hpp, Note [Sim collectives across processes]). The functions of one rank
// run in call order (a function waits for the one before it), so the ranks walk the segment's
// pieces in the same order; each rank computes the whole result itself, summing in rank order, so
// every rank gets the same bits.
#include <htp/collectives.hpp>

#include <htp/detail/check.hpp>

#include "nvtx_range.hpp"
#include "rank_segment.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>

namespace htp {

namespace {

float bf16_value(const unsigned char* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  const std::uint32_t bits = std::uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
void store_bf16(unsigned char* p, float f) {  // round to nearest even, as the sim does
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  const auto v = static_cast<std::uint16_t>(bits >> 16);
  std::memcpy(p, &v, 2);
}

/// One call: what the host function does.
struct rank_call {
  std::uint64_t id = 0;  // this rank's call index
  bool reduce = false;
  bool scatter = false;  // a reduce whose rank r keeps block r (bytes / world) of the sum
  element_type type = element_type::float32;
  const unsigned char* send = nullptr;
  unsigned char* recv = nullptr;
  std::size_t bytes = 0;  // per rank sent

  /// The word the ranks compare to find calls that differ.
  std::uint64_t kind() const {
    if (!reduce) return 1;
    return (scatter ? 4 : 2) + (type == element_type::float32 ? 0 : 1);
  }
  std::string name() const {
    return detail::concat(!reduce   ? "all_gather"
                          : scatter ? "reduce_scatter_sum"
                                    : "all_reduce_sum",
                          " #", id);
  }
};

std::string kind_name(std::uint64_t kind, std::uint64_t bytes) {
  const char* k = kind == 1   ? "an all_gather"
                  : kind == 2 ? "a float32 all_reduce_sum"
                  : kind == 3 ? "a bfloat16 all_reduce_sum"
                  : kind == 4 ? "a float32 reduce_scatter_sum"
                              : "a bfloat16 reduce_scatter_sum";
  return detail::concat(k, " of ", bytes, " bytes");
}

/// What the object and its queued host functions share: a function that runs after the object is
/// gone finds it still (and returns at once).
struct rank_world {
  std::unique_ptr<detail::rank_segment> seg;
  std::size_t rank;
  bool timing_only;
  std::atomic<bool> closing{false};
  std::mutex mu;  // the two counts
  std::condition_variable cv;
  std::uint64_t issued = 0;    // calls enqueued
  std::uint64_t finished = 0;  // calls whose host function has returned
  std::uint64_t piece = 0;     // pieces moved so far (host functions only, one at a time)

  /// The host function of call `c`, on the stream's thread. Never throws: a failure aborts.
  void run(const rank_call& c) noexcept {
    try {
      if (wait_turn(c)) exchange(c);
    } catch (const std::exception& e) {
      seg->abort(detail::concat("rank ", rank, " failed in ", c.name(), ": ", e.what()));
    } catch (...) {
      seg->abort(detail::concat("rank ", rank, " failed in ", c.name()));
    }
    {
      std::lock_guard lock(mu);
      finished = std::max(finished, c.id + 1);
    }
    cv.notify_all();
  }

  /// Waits until the calls before `c` have run (they may be on other streams). False: abort.
  bool wait_turn(const rank_call& c) {
    std::unique_lock lock(mu);
    const auto deadline = detail::rank_segment::clock::now() + timeout;
    while (finished != c.id) {
      if (seg->aborted() || closing) return false;
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && finished != c.id) {
        seg->abort(detail::concat("rank ", rank, "'s ", c.name(), " waited past the rendezvous ",
                                  "timeout for its call #", finished, " (on another stream)"));
        return false;
      }
    }
    return !seg->aborted() && !closing;
  }

  /// The pieces of call `c`, in lockstep with the other ranks.
  void exchange(const rank_call& c) {
    const std::size_t elem = c.reduce ? size_of(c.type) : 1;
    const std::size_t most =
        timing_only ? std::max<std::size_t>(c.bytes, 1) : seg->staging() / elem * elem;
    const std::string during = c.name();
    for (std::size_t off = 0; off < c.bytes; off += most) {
      const std::size_t len = std::min(most, c.bytes - off);
      const std::uint64_t q = ++piece;
      if (!seg->wait_all([q](const detail::rank_record& r) { return r.done.load() >= q - 1; },
                         during, closing))
        return;
      detail::rank_record& me = seg->record(rank);
      if (!timing_only) std::memcpy(seg->staging_area(rank), c.send + off, len);
      me.kind.store(c.kind());
      me.bytes.store(c.bytes);
      me.call.store(c.id);
      me.arrived.store(q);
      seg->notify();
      if (!seg->wait_all([q](const detail::rank_record& r) { return r.arrived.load() >= q; },
                         during, closing))
        return;
      if (!same_call(c)) return;
      if (!timing_only) combine(c, off, len);
      me.done.store(q);
      seg->notify();
    }
  }

  /// Whether every rank makes the same call as this one; aborts the world if not.
  bool same_call(const rank_call& c) {
    for (std::size_t r = 0; r < seg->world(); ++r) {
      const detail::rank_record& o = seg->record(r);
      if (o.kind.load() == c.kind() && o.bytes.load() == c.bytes && o.call.load() == c.id) continue;
      seg->abort(detail::concat("collective #", c.id, " is ", kind_name(c.kind(), c.bytes),
                                " on rank ", rank, " but ", kind_name(o.kind, o.bytes), " (#",
                                o.call.load(), ") on rank ", r,
                                "; every rank must make the same calls in the same order"));
      return false;
    }
    return true;
  }

  /// Reads every rank's piece [off, off + len) into c's result.
  void combine(const rank_call& c, std::size_t off, std::size_t len) const {
    const std::size_t n = seg->world();
    if (!c.reduce) {
      for (std::size_t k = 0; k < n; ++k)
        std::memcpy(c.recv + k * c.bytes + off, seg->staging_area(k), len);
      return;
    }
    const std::size_t elem = size_of(c.type);
    // A reduce-scatter sums every piece (the ranks move in lockstep) and keeps its own block.
    const std::size_t block = c.bytes / n, mine = c.scatter ? rank * block : 0;
    for (std::size_t i = 0; i < len / elem; ++i) {
      const std::size_t at = off + i * elem;
      if (c.scatter && (at < mine || at >= mine + block)) continue;
      float sum = 0.0f;  // in rank order: every rank adds the same numbers in the same order
      for (std::size_t k = 0; k < n; ++k) {
        const unsigned char* v = seg->staging_area(k) + i * elem;
        if (c.type == element_type::float32) {
          float f;
          std::memcpy(&f, v, 4);
          sum += f;
        } else {
          sum += bf16_value(v);
        }
      }
      unsigned char* out = c.recv + (at - mine);
      if (c.type == element_type::float32) {
        std::memcpy(out, &sum, 4);
      } else {
        store_bf16(out, sum);
      }
    }
  }

  detail::rank_segment::clock::duration timeout{};
};

class sim_rank_collectives final : public collectives {
 public:
  sim_rank_collectives(device& dev, std::shared_ptr<rank_world> w) : dev_(dev), w_(std::move(w)) {}
  /// Calls still queued return without their result; with calls pending the other ranks
  /// could never complete theirs, so the world aborts.
  ~sim_rank_collectives() override {
    std::uint64_t pending;
    {
      std::lock_guard lock(w_->mu);
      pending = w_->issued - w_->finished;
    }
    if (pending > 0) {
      w_->seg->abort(detail::concat("rank ", w_->rank, "'s collectives were destroyed with ",
                                    pending, " call(s) not yet run"));
    }
    w_->closing = true;
    w_->seg->notify();
    w_->cv.notify_all();
  }
  std::size_t size() const noexcept override { return w_->seg->world(); }
  std::string backend_name() const override { return "sim"; }

  void all_gather(std::size_t rank, const void* send, void* recv, std::size_t bytes,
                  stream_ref s) override {
    const detail::nvtx_range range("htp all_gather");
    rank_call c;
    c.bytes = bytes;
    enqueue("all_gather", rank, send, recv, c, s);
  }
  void all_reduce_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                      element_type type, stream_ref s) override {
    const detail::nvtx_range range("htp all_reduce_sum");
    rank_call c;
    c.reduce = true;
    c.type = type;
    c.bytes = count * size_of(type);
    enqueue("all_reduce_sum", rank, send, recv, c, s);
  }
  void reduce_scatter_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                          element_type type, stream_ref s) override {
    const detail::nvtx_range range("htp reduce_scatter_sum");
    rank_call c;
    c.reduce = c.scatter = true;
    c.type = type;
    c.bytes = count * size_of(type) * w_->seg->world();
    enqueue("reduce_scatter_sum", rank, send, recv, c, s);
  }
  void group_start() override { throw_if_aborted("group_start()"); }
  void group_end() override {}
  void abort(const std::string& reason) noexcept override {
    try {
      w_->seg->abort(detail::concat("rank ", w_->rank, " (pid ", getpid(), ") aborted: ", reason));
    } catch (...) {
      w_->seg->abort("a rank aborted (no memory for its reason)");
    }
  }
  bool aborted() const noexcept override { return w_->seg->aborted(); }

 private:
  void throw_if_aborted(const std::string& call) const {
    if (!w_->seg->aborted()) return;
    throw logic_error(detail::concat("collectives::", call,
                                     ": the sim collectives across processes (", w_->seg->path(),
                                     ") were aborted (", w_->seg->reason(),
                                     "); no collective runs after an abort: make new collectives"));
  }

  void enqueue(const char* what, std::size_t rank, const void* send, void* recv, rank_call c,
               stream_ref s) {
    HTP_EXPECTS(rank == w_->rank, invalid_argument, "collectives::", what, ": rank ", rank,
                " is not this process's rank (", w_->rank, " of ", w_->seg->world(),
                "); each process makes the calls of its own rank only");
    HTP_EXPECTS(send != nullptr && recv != nullptr && c.bytes > 0, invalid_argument,
                "collectives::", what, "(rank ", rank, "): null buffer or zero size");
    throw_if_aborted(detail::concat(what, "(rank ", rank, ")"));
    c.send = static_cast<const unsigned char*>(send);
    c.recv = static_cast<unsigned char*>(recv);
    {
      std::lock_guard lock(w_->mu);  // one call index per queued function, in call order
      c.id = w_->issued++;
    }
    try {
      dev_.launch_host_func([w = w_, c] { w->run(c); }, s);  // not under mu: it may block
    } catch (...) {
      std::unique_lock lock(w_->mu);
      if (w_->issued == c.id + 1) {
        --w_->issued;  // not queued: as if never called
      } else {         // a later call has its index: the numbers would no longer match
        lock.unlock();
        abort(detail::concat(what, " #", c.id, " could not be queued"));
      }
      throw;
    }
  }

  device& dev_;
  std::shared_ptr<rank_world> w_;
};

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
  });
}

}  // namespace

std::unique_ptr<collectives> make_sim_rank_collectives(
    const std::string& name, std::size_t rank, std::size_t world_size, device& dev,
    std::chrono::milliseconds rendezvous_timeout) {
  HTP_EXPECTS(valid_name(name), invalid_argument, "make_sim_rank_collectives: the name \"", name,
              "\" is not 1 to 200 of the characters A-Z a-z 0-9 . _ - (not starting with '.')");
  HTP_EXPECTS(world_size > 0 && rank < world_size, invalid_argument,
              "make_sim_rank_collectives: rank ", rank, " of a world of ", world_size,
              "; the rank must be below the world size");
  HTP_EXPECTS(world_size <= 4096, invalid_argument, "make_sim_rank_collectives: a world of ",
              world_size, " ranks; at most 4096");
  HTP_EXPECTS(rendezvous_timeout.count() > 0, invalid_argument,
              "make_sim_rank_collectives: a rendezvous timeout of ", rendezvous_timeout.count(),
              " ms; give a positive one (the default is 60 s)");
  HTP_EXPECTS(dev.properties().kind == backend::sim, invalid_argument,
              "make_sim_rank_collectives: the device is not a sim device; use "
              "make_nccl_rank_collectives or join_nccl_comm for cuda devices");
  auto w = std::make_shared<rank_world>();
  w->rank = rank;
  w->timing_only = dev.properties().timing_only;
  w->timeout = rendezvous_timeout;
  w->seg = std::make_unique<detail::rank_segment>(name, rank, world_size, rendezvous_timeout);
  w->seg->wait_joined();  // throws: the segment is left by w's destruction
  return std::make_unique<sim_rank_collectives>(dev, std::move(w));
}

}  // namespace htp
