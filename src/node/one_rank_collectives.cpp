// Collectives of one rank, on any backend: an all-gather, all-reduce or reduce-scatter over one
// GPU is a copy (or nothing, in place), queued on the caller's stream. So code written for N GPUs
// (tensor parallelism, swap-and-shard) runs unchanged on one GPU without NCCL.
#include <htp/collectives.hpp>

#include <htp/detail/check.hpp>

#include <atomic>
#include <mutex>

namespace htp {

namespace {

class one_rank_collectives final : public collectives {
 public:
  explicit one_rank_collectives(device& d) : dev_(d) {}
  std::size_t size() const noexcept override { return 1; }
  std::string backend_name() const override { return "one-rank"; }

  void all_gather(std::size_t rank, const void* send, void* recv, std::size_t bytes,
                  stream_ref s) override {
    copy(rank, send, recv, bytes, bytes, "all_gather", s);
  }
  void all_reduce_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                      element_type type, stream_ref s) override {
    copy(rank, send, recv, count, count * size_of(type), "all_reduce_sum", s);
  }
  void reduce_scatter_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                          element_type type, stream_ref s) override {
    copy(rank, send, recv, count, count * size_of(type), "reduce_scatter_sum", s);
  }
  void group_start() override { throw_if_aborted("group_start"); }
  void group_end() override {}
  /// Nothing waits for another rank here: queued copies complete, later calls throw.
  void abort(const std::string& reason) noexcept override {
    std::lock_guard lock(mu_);
    if (aborted_) return;
    try {
      reason_ = reason;
    } catch (...) {  // out of memory for the message: the flag is what matters
    }
    aborted_ = true;
  }
  bool aborted() const noexcept override { return aborted_; }

 private:
  /// Every collective of one rank: `bytes` from send to recv (nothing in place), after the checks
  /// (`n`: the call's size, bytes or elements).
  void copy(std::size_t rank, const void* send, void* recv, std::size_t n, std::size_t bytes,
            const char* what, stream_ref s) {
    check(rank, send, recv, n, what);
    throw_if_aborted(what);
    if (send != recv) dev_.copy_async(recv, send, bytes, copy_direction::device_to_device, s);
  }
  void throw_if_aborted(const char* what) const {
    if (!aborted_) return;
    std::lock_guard lock(mu_);
    throw logic_error(detail::concat("collectives::", what,
                                     ": the one-rank collectives were aborted (", reason_,
                                     "); no collective runs after an abort: make new collectives"));
  }
  static void check(std::size_t rank, const void* send, void* recv, std::size_t n,
                    const char* what) {
    HTP_EXPECTS(rank == 0, invalid_argument, what, ": rank ", rank,
                " of a one-rank group; the only rank is 0");
    HTP_EXPECTS(send != nullptr && recv != nullptr && n > 0, invalid_argument, what,
                ": null buffer or empty size; give both buffers and at least one element");
  }
  device& dev_;
  mutable std::mutex mu_;  // reason_
  std::string reason_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<collectives> make_one_rank_collectives(device& dev) {
  return std::make_unique<one_rank_collectives>(dev);
}

}  // namespace htp
