// Collectives across sim devices: each rank's call enqueues a host function on its stream; the
// functions of one collective meet at a rendezvous, the last to arrive does every rank's copies
// (and waits the modelled interconnect time), then all of them return. Each sim stream is its own
// worker thread, so the waiting is on those threads, never on the caller's. An abort (called, or
// a rank's wait past the rendezvous timeout) wakes every waiting function: they return without
// copying, and later calls throw.
#include <htp/collectives.hpp>

#include <htp/detail/check.hpp>

#include "log.hpp"
#include "nvtx_range.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

namespace htp {

std::size_t size_of(element_type t) noexcept { return t == element_type::float32 ? 4 : 2; }

namespace {

float bf16_to_float(std::uint16_t v) {
  const std::uint32_t bits = std::uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
std::uint16_t float_to_bf16(float f) {  // round to nearest even
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>(bits >> 16);
}

/// What a collective does (the ranks' calls must agree on it).
enum class op_kind { all_gather, all_reduce, reduce_scatter };

const char* name_of(op_kind k) {
  return k == op_kind::all_gather   ? "all_gather"
         : k == op_kind::all_reduce ? "all_reduce_sum"
                                    : "reduce_scatter_sum";
}

float load_element(const void* base, std::size_t i, element_type t) {
  if (t == element_type::float32) {
    float v;
    std::memcpy(&v, static_cast<const char*>(base) + 4 * i, 4);
    return v;
  }
  std::uint16_t v;
  std::memcpy(&v, static_cast<const char*>(base) + 2 * i, 2);
  return bf16_to_float(v);
}

void store_element(void* base, std::size_t i, element_type t, float f) {
  if (t == element_type::float32) {
    std::memcpy(static_cast<char*>(base) + 4 * i, &f, 4);
  } else {
    const std::uint16_t v = float_to_bf16(f);
    std::memcpy(static_cast<char*>(base) + 2 * i, &v, 2);
  }
}

struct op {
  op_kind kind = op_kind::all_gather;
  std::size_t bytes = 0, count = 0;  // per rank received (reduce_scatter: each rank sends N x)
  element_type type = element_type::float32;
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::vector<bool> here;  // per rank: its host function has arrived
  std::size_t enqueued = 0, arrived = 0, left = 0;
  bool running = false;  // the last to arrive is copying, unlocked: waiters stay until it is done
  bool done = false;
};

using clock_type = std::chrono::steady_clock;

/// What the ranks' host functions share. Held by shared_ptr from each queued function, so a
/// function that runs after the collectives object is gone still finds it (and does nothing).
struct rendezvous {
  std::size_t ranks;
  std::uint64_t rate;
  clock_type::duration timeout;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::uint64_t> calls;  // per rank: collectives issued so far
  std::map<std::uint64_t, op> ops;   // by collective index, until every rank has left
  bool closing = false;              // the object is gone: waiting ranks return, nothing copied
  // abort(): waiting ranks return, nothing copied, calls throw. Set under `mu`; atomic so that
  // aborted() reads it without the lock.
  std::atomic<bool> aborted{false};
  std::string reason;  // the first abort's

  bool timing_only = false;  // the devices hold no bytes: only the modelled time passes
  rendezvous(std::size_t n, std::uint64_t r, clock_type::duration t, bool only)
      : ranks(n), rate(r), timeout(t), calls(n, 0), timing_only(only) {}

  bool stopped() const { return closing || aborted; }

  void abort_locked(const std::string& why) noexcept {
    if (!aborted) {
      aborted = true;
      try {
        reason = why;
        detail::logger().error("sim collectives aborted: {}", why);
      } catch (...) {  // out of memory for the message: the flag is what matters
      }
    }
    cv.notify_all();
  }

  /// Rank `rank`'s host function of collective `id`, on its stream's thread.
  void arrive(std::uint64_t id, std::size_t rank) {
    std::unique_lock lock(mu);
    auto it = ops.find(id);
    if (it == ops.end()) return;
    op& o = it->second;
    o.here[rank] = true;
    if (++o.arrived == ranks && !stopped()) {
      o.running = true;
      lock.unlock();
      copy(o);  // every rank is here: nobody touches o's buffers but this thread until done
      lock.lock();
      // The modelled interconnect time passes here, cut short by an abort.
      cv.wait_for(lock, modelled_time(o), [&] { return stopped(); });
      o.running = false;
      o.done = true;
      cv.notify_all();
    } else {
      const auto deadline = clock_type::now() + timeout;
      while (!o.done && !(stopped() && !o.running)) {
        if (o.arrived == ranks || stopped()) {
          cv.wait(lock);  // all here: the copy is under way and bounded
        } else if (cv.wait_until(lock, deadline) == std::cv_status::timeout && o.arrived < ranks &&
                   !stopped()) {
          abort_locked(late_ranks(id, o, rank));
        }
      }
    }
    if (++o.left == ranks) ops.erase(id);
  }

  /// Why rank `waiter` gave up on collective `id`: the ranks that did not arrive, and why not.
  std::string late_ranks(std::uint64_t id, const op& o, std::size_t waiter) const {
    std::string never, behind;
    for (std::size_t r = 0; r < ranks; ++r) {
      if (o.here[r]) continue;
      std::string& list = o.send[r] == nullptr ? never : behind;
      list += (list.empty() ? "" : ", ") + std::to_string(r);
    }
    const double secs = std::chrono::duration<double>(timeout).count();
    return detail::concat(
        "rank ", waiter, " waited ", secs, " s at collective ", id, " (an ", name_of(o.kind),
        " of ", o.bytes, " bytes) for rank(s) ", never, never.empty() || behind.empty() ? "" : ", ",
        behind, " that did not arrive",
        never.empty() ? "" : detail::concat(" (never called: ", never, ")"),
        behind.empty()
            ? ""
            : detail::concat(" (called, but their streams did not get there: ", behind, ")"),
        "; the rendezvous timeout of make_sim_collectives ran out");
  }

  void copy(op& o) const {
    const std::size_t n = ranks;
    if (timing_only) return;
    if (o.kind == op_kind::all_gather) {
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t k = 0; k < n; ++k) {
          char* dst = static_cast<char*>(o.recv[r]) + k * o.bytes;
          if (dst != o.send[k]) std::memcpy(dst, o.send[k], o.bytes);  // in place: already there
        }
      }
      return;
    }
    // Summed in rank order into a buffer first: every rank gets the same bits, and a result
    // written in place never feeds a later sum.
    const bool scatter = o.kind == op_kind::reduce_scatter;
    const std::size_t total = scatter ? n * o.count : o.count;
    std::vector<float> sum(total, 0.0f);
    for (std::size_t k = 0; k < n; ++k) {
      for (std::size_t i = 0; i < total; ++i) sum[i] += load_element(o.send[k], i, o.type);
    }
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t first = scatter ? r * o.count : 0;
      for (std::size_t i = 0; i < o.count; ++i) store_element(o.recv[r], i, o.type, sum[first + i]);
    }
  }

  /// The modelled interconnect (the sim's clock, as its copy engine models PCIe): a ring moves
  /// (N - 1) / N of the data per rank, twice for an all-reduce (a reduce-scatter and an
  /// all-gather of the result).
  std::chrono::nanoseconds modelled_time(const op& o) const {
    const std::size_t n = ranks;
    if (rate == 0 || n < 2) return std::chrono::nanoseconds(0);
    const double data =
        static_cast<double>(o.kind == op_kind::all_reduce ? 2 * o.bytes : o.bytes * n);
    const double per_rank = data * double(n - 1) / double(n);
    return std::chrono::nanoseconds(static_cast<std::int64_t>(per_rank / double(rate) * 1e9));
  }
};

class sim_collectives final : public collectives {
 public:
  sim_collectives(std::vector<device*> devs, std::uint64_t rate, clock_type::duration timeout)
      : devs_(std::move(devs)),
        rv_(std::make_shared<rendezvous>(devs_.size(), rate, timeout,
                                         devs_.front()->properties().timing_only)) {}
  /// Ranks still waiting in a collective no other rank will complete return (nothing copied).
  ~sim_collectives() override {
    std::lock_guard lock(rv_->mu);
    rv_->closing = true;
    rv_->cv.notify_all();
  }
  std::size_t size() const noexcept override { return devs_.size(); }
  std::string backend_name() const override { return "sim"; }

  void all_gather(std::size_t rank, const void* send, void* recv, std::size_t bytes,
                  stream_ref s) override {
    const detail::nvtx_range range("htp all_gather");
    enqueue(rank, op_kind::all_gather, send, recv, bytes, bytes, element_type::float32, s);
  }
  void all_reduce_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                      element_type type, stream_ref s) override {
    const detail::nvtx_range range("htp all_reduce_sum");
    enqueue(rank, op_kind::all_reduce, send, recv, count * size_of(type), count, type, s);
  }
  void reduce_scatter_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                          element_type type, stream_ref s) override {
    const detail::nvtx_range range("htp reduce_scatter_sum");
    enqueue(rank, op_kind::reduce_scatter, send, recv, count * size_of(type), count, type, s);
  }
  void group_start() override {
    std::lock_guard lock(rv_->mu);
    if (rv_->aborted) throw aborted_error_locked("group_start()");
  }
  void group_end() override {}
  void abort(const std::string& reason) noexcept override {
    std::lock_guard lock(rv_->mu);
    rv_->abort_locked(reason);
  }
  bool aborted() const noexcept override { return rv_->aborted; }

 private:
  /// The error of a call after an abort. Called with rv_->mu held.
  /// `call` names the call, e.g. "all_gather(rank 1)".
  logic_error aborted_error_locked(const std::string& call) const {
    return logic_error(
        detail::concat("collectives::", call, ": the sim collectives were aborted (", rv_->reason,
                       "); no collective runs after an abort: make new collectives"));
  }

  void enqueue(std::size_t rank, op_kind kind, const void* send, void* recv, std::size_t bytes,
               std::size_t count, element_type type, stream_ref s) {
    const char* what = name_of(kind);
    HTP_EXPECTS(rank < devs_.size(), invalid_argument, "collectives::", what, ": rank ", rank,
                " of ", devs_.size());
    HTP_EXPECTS(send != nullptr && recv != nullptr && bytes > 0, invalid_argument,
                "collectives::", what, "(rank ", rank, "): null buffer or zero size");
    rendezvous& rv = *rv_;
    std::uint64_t id;
    {
      std::lock_guard lock(rv.mu);
      if (rv.aborted) throw aborted_error_locked(detail::concat(what, "(rank ", rank, ")"));
      id = rv.calls[rank];
      op& o = rv.ops[id];
      if (o.enqueued == 0) {
        o.kind = kind;
        o.bytes = bytes;
        o.count = count;
        o.type = type;
        o.send.assign(devs_.size(), nullptr);
        o.recv.assign(devs_.size(), nullptr);
        o.here.assign(devs_.size(), false);
      } else {
        HTP_EXPECTS(
            o.kind == kind && o.bytes == bytes && o.type == type, invalid_argument,
            "collectives::", what, "(rank ", rank, "): collective ", id, " is a ", name_of(o.kind),
            " of ", o.bytes,
            " bytes on the other ranks; every rank must make the same calls in the same order");
      }
      o.send[rank] = send;
      o.recv[rank] = recv;
      ++o.enqueued;
      ++rv.calls[rank];
    }
    try {
      devs_[rank]->launch_host_func([rv = rv_, id, rank] { rv->arrive(id, rank); }, s);
    } catch (...) {
      std::lock_guard lock(rv.mu);  // not queued: as if never called
      --rv.calls[rank];
      op& o = rv.ops[id];
      o.send[rank] = nullptr;
      o.recv[rank] = nullptr;
      if (--o.enqueued == 0) rv.ops.erase(id);
      throw;
    }
  }

  std::vector<device*> devs_;
  std::shared_ptr<rendezvous> rv_;
};

}  // namespace

std::unique_ptr<collectives> make_sim_collectives(const std::vector<device*>& devices,
                                                  std::uint64_t interconnect_bytes_per_second,
                                                  std::chrono::milliseconds rendezvous_timeout) {
  HTP_EXPECTS(!devices.empty(), invalid_argument, "make_sim_collectives: no devices");
  HTP_EXPECTS(rendezvous_timeout.count() > 0, invalid_argument,
              "make_sim_collectives: a rendezvous timeout of ", rendezvous_timeout.count(),
              " ms; give a positive one (the default is 120 s)");
  for (std::size_t r = 0; r < devices.size(); ++r) {
    HTP_EXPECTS(devices[r] != nullptr && devices[r]->properties().kind == backend::sim,
                invalid_argument, "make_sim_collectives: device ", r, " is ",
                devices[r] ? "not a sim device" : "null",
                "; use make_nccl_collectives for cuda devices");
  }
  for (std::size_t r = 1; r < devices.size(); ++r) {
    HTP_EXPECTS(devices[r]->properties().timing_only == devices[0]->properties().timing_only,
                invalid_argument, "make_sim_collectives: device ", r, " is ",
                devices[r]->properties().timing_only ? "" : "not ", "timing-only and device 0 is ",
                devices[0]->properties().timing_only ? "" : "not",
                "; make every rank's device the same way");
  }
  return std::make_unique<sim_collectives>(devices, interconnect_bytes_per_second,
                                           rendezvous_timeout);
}

}  // namespace htp
