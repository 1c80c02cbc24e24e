// Collectives across sim devices: each rank's call enqueues a host function on its stream; the
// functions of one collective meet at a rendezvous, the last to arrive does every rank's copies
// (and sleeps the modelled interconnect time), then all of them return. Each sim stream is its own
// worker thread, so the waiting is on those threads, never on the caller's.
#include <htp/collectives.hpp>

#include <htp/detail/check.hpp>

#include "nvtx_range.hpp"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

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

struct op {
  bool reduce = false;
  std::size_t bytes = 0, count = 0;
  element_type type = element_type::float32;
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::size_t enqueued = 0, arrived = 0, left = 0;
  bool done = false;
};

/// What the ranks' host functions share. Held by shared_ptr from each queued function, so a
/// function that runs after the collectives object is gone still finds it (and does nothing).
struct rendezvous {
  std::size_t ranks;
  std::uint64_t rate;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::uint64_t> calls;   // per rank: collectives issued so far
  std::map<std::uint64_t, op> ops;    // by collective index, until every rank has left
  bool closing = false;               // the object is gone: waiting ranks return, nothing copied

  bool timing_only = false;  // the devices hold no bytes: only the modelled time passes
  rendezvous(std::size_t n, std::uint64_t r, bool t) : ranks(n), rate(r), calls(n, 0), timing_only(t) {}

  void arrive(std::uint64_t id) {
    std::unique_lock lock(mu);
    auto it = ops.find(id);
    if (it == ops.end()) return;
    op& o = it->second;
    if (++o.arrived == ranks && !closing) {
      lock.unlock();
      run(o);  // every rank is here: nobody touches o but this thread until done
      lock.lock();
      o.done = true;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return o.done || closing; });
    }
    if (++o.left == ranks) ops.erase(id);
  }

  void run(op& o) const {
    const std::size_t n = ranks;
    if (timing_only) {
    } else if (!o.reduce) {
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t k = 0; k < n; ++k) {
          char* dst = static_cast<char*>(o.recv[r]) + k * o.bytes;
          if (dst != o.send[k]) std::memcpy(dst, o.send[k], o.bytes);  // in place: already there
        }
      }
    } else {
      std::vector<float> sum(o.count, 0.0f);
      for (std::size_t k = 0; k < n; ++k) {
        for (std::size_t i = 0; i < o.count; ++i) {
          if (o.type == element_type::float32) {
            float v;
            std::memcpy(&v, static_cast<const char*>(o.send[k]) + 4 * i, 4);
            sum[i] += v;
          } else {
            std::uint16_t v;
            std::memcpy(&v, static_cast<const char*>(o.send[k]) + 2 * i, 2);
            sum[i] += bf16_to_float(v);
          }
        }
      }
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < o.count; ++i) {
          if (o.type == element_type::float32) {
            std::memcpy(static_cast<char*>(o.recv[r]) + 4 * i, &sum[i], 4);
          } else {
            const std::uint16_t v = float_to_bf16(sum[i]);
            std::memcpy(static_cast<char*>(o.recv[r]) + 2 * i, &v, 2);
          }
        }
      }
    }
    if (rate > 0 && n > 1) {
      // The modelled interconnect (the sim's clock, as its copy engine models PCIe): a ring moves
      // (N - 1) / N of the data per rank, twice for an all-reduce.
      const double per_rank = static_cast<double>(o.reduce ? 2 * o.bytes : o.bytes * n) * double(n - 1) / double(n);
      std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<std::int64_t>(per_rank / double(rate) * 1e9)));
    }
  }
};

class sim_collectives final : public collectives {
 public:
  sim_collectives(std::vector<device*> devs, std::uint64_t rate)
      : devs_(std::move(devs)),
        rv_(std::make_shared<rendezvous>(devs_.size(), rate, devs_.front()->properties().timing_only)) {}
  /// Ranks still waiting in a collective no other rank will complete return (nothing copied).
  ~sim_collectives() override {
    std::lock_guard lock(rv_->mu);
    rv_->closing = true;
    rv_->cv.notify_all();
  }
  std::size_t size() const noexcept override { return devs_.size(); }
  std::string backend_name() const override { return "sim"; }

  void all_gather(std::size_t rank, const void* send, void* recv, std::size_t bytes, stream_ref s) override {
    const detail::nvtx_range range("htp all_gather");
    enqueue(rank, "all_gather", send, recv, bytes, bytes, element_type::float32, false, s);
  }
  void all_reduce_sum(std::size_t rank, const void* send, void* recv, std::size_t count, element_type type,
                      stream_ref s) override {
    const detail::nvtx_range range("htp all_reduce_sum");
    enqueue(rank, "all_reduce_sum", send, recv, count * size_of(type), count, type, true, s);
  }
  void group_start() override {}
  void group_end() override {}

 private:
  void enqueue(std::size_t rank, const char* what, const void* send, void* recv, std::size_t bytes,
               std::size_t count, element_type type, bool reduce, stream_ref s) {
    HTP_EXPECTS(rank < devs_.size(), invalid_argument, "collectives::", what, ": rank ", rank, " of ",
                devs_.size());
    HTP_EXPECTS(send != nullptr && recv != nullptr && bytes > 0, invalid_argument, "collectives::", what,
                "(rank ", rank, "): null buffer or zero size");
    rendezvous& rv = *rv_;
    std::uint64_t id;
    {
      std::lock_guard lock(rv.mu);
      id = rv.calls[rank];
      op& o = rv.ops[id];
      if (o.enqueued == 0) {
        o.reduce = reduce;
        o.bytes = bytes;
        o.count = count;
        o.type = type;
        o.send.assign(devs_.size(), nullptr);
        o.recv.assign(devs_.size(), nullptr);
      } else {
        HTP_EXPECTS(o.reduce == reduce && o.bytes == bytes && o.type == type, invalid_argument,
                    "collectives::", what, "(rank ", rank, "): collective ", id, " is a ",
                    o.reduce ? "all_reduce_sum" : "all_gather", " of ", o.bytes,
                    " bytes on the other ranks; every rank must make the same calls in the same order");
      }
      o.send[rank] = send;
      o.recv[rank] = recv;
      ++o.enqueued;
      ++rv.calls[rank];
    }
    try {
      devs_[rank]->launch_host_func([rv = rv_, id] { rv->arrive(id); }, s);
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
                                                  std::uint64_t interconnect_bytes_per_second) {
  HTP_EXPECTS(!devices.empty(), invalid_argument, "make_sim_collectives: no devices");
  for (std::size_t r = 0; r < devices.size(); ++r) {
    HTP_EXPECTS(devices[r] != nullptr && devices[r]->properties().kind == backend::sim, invalid_argument,
                "make_sim_collectives: device ", r, " is ", devices[r] ? "not a sim device" : "null",
                "; use make_nccl_collectives for cuda devices");
  }
  for (std::size_t r = 1; r < devices.size(); ++r) {
    HTP_EXPECTS(devices[r]->properties().timing_only == devices[0]->properties().timing_only, invalid_argument,
                "make_sim_collectives: device ", r, " is ", devices[r]->properties().timing_only ? "" : "not ",
                "timing-only and device 0 is ", devices[0]->properties().timing_only ? "" : "not",
                "; make every rank's device the same way");
  }
  return std::make_unique<sim_collectives>(devices, interconnect_bytes_per_second);
}

}  // namespace htp
