// NCCL behind htp::collectives, loaded at run time (dlopen) so that htp builds, links and runs
// without NCCL. Only NCCL's stable C ABI is declared here (the enum values of nccl.h, and
// cudaStream_t / ncclComm_t as opaque pointers), so this file needs neither nccl.h nor CUDA
// headers.
#include <htp/collectives.hpp>

#include <htp/detail/check.hpp>
#include <htp/detail/cuda_backend.hpp>

#include "log.hpp"
#include "nvtx_range.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace htp {

namespace {

using nccl_result = int;                                            // ncclResult_t; ncclSuccess = 0
using nccl_comm = void*;                                            // ncclComm_t
constexpr int nccl_uint8 = 1, nccl_float32 = 7, nccl_bfloat16 = 9;  // ncclDataType_t
constexpr int nccl_sum = 0;                                         // ncclRedOp_t
constexpr std::size_t nccl_unique_id_bytes = 128;                   // NCCL_UNIQUE_ID_BYTES
/// ncclUniqueId: a struct of 128 bytes, passed by value to ncclCommInitRank.
struct nccl_id {
  char internal[nccl_unique_id_bytes];
};

struct nccl_api {
  nccl_result (*comm_init_all)(nccl_comm*, int, const int*) = nullptr;
  nccl_result (*get_unique_id)(nccl_id*) = nullptr;
  nccl_result (*comm_init_rank)(nccl_comm*, int, nccl_id, int) = nullptr;
  nccl_result (*comm_destroy)(nccl_comm) = nullptr;
  nccl_result (*all_gather)(const void*, void*, std::size_t, int, nccl_comm, void*) = nullptr;
  nccl_result (*all_reduce)(const void*, void*, std::size_t, int, int, nccl_comm, void*) = nullptr;
  nccl_result (*reduce_scatter)(const void*, void*, std::size_t, int, int, nccl_comm,
                                void*) = nullptr;
  nccl_result (*group_start)() = nullptr;
  nccl_result (*group_end)() = nullptr;
  const char* (*error_string)(nccl_result) = nullptr;
  // Optional (absent from old NCCL): abort() and asynchronous error checks need them.
  nccl_result (*comm_abort)(nccl_comm) = nullptr;                          // NCCL >= 2.4
  nccl_result (*comm_get_async_error)(nccl_comm, nccl_result*) = nullptr;  // NCCL >= 2.4
  // Optional: join_nccl_comm checks the communicator's rank and size with them when present.
  nccl_result (*comm_count)(nccl_comm, int*) = nullptr;
  nccl_result (*comm_user_rank)(nccl_comm, int*) = nullptr;
  std::string why;  // empty when loaded
};

/// Loads libnccl.so.2 once: $HTP_NCCL_LIBRARY, the loader's path, then the CUDA toolkit's.
const nccl_api& api() {
  static const nccl_api a = [] {
    nccl_api r;
    std::vector<std::string> names;
    if (const char* env = std::getenv("HTP_NCCL_LIBRARY")) names.emplace_back(env);
    names.insert(names.end(), {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                               "/usr/local/cuda/lib/libnccl.so.2"});
    void* lib = nullptr;
    std::string tried;
    for (const std::string& n : names) {
      lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      tried += (tried.empty() ? "" : ", ") + n;
    }
    if (!lib) {
      r.why = "NCCL is not installed or not found (tried " + tried +
              "); install libnccl2 or set HTP_NCCL_LIBRARY to its path";
      return r;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && r.why.empty())
        r.why = std::string("libnccl.so.2 has no ") + name + "; it is too old";
    };
    sym(r.comm_init_all, "ncclCommInitAll");
    sym(r.get_unique_id, "ncclGetUniqueId");
    sym(r.comm_init_rank, "ncclCommInitRank");
    sym(r.comm_destroy, "ncclCommDestroy");
    sym(r.all_gather, "ncclAllGather");
    sym(r.all_reduce, "ncclAllReduce");
    sym(r.reduce_scatter, "ncclReduceScatter");
    sym(r.group_start, "ncclGroupStart");
    sym(r.group_end, "ncclGroupEnd");
    sym(r.error_string, "ncclGetErrorString");
    const auto optional = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    };
    optional(r.comm_abort, "ncclCommAbort");
    optional(r.comm_get_async_error, "ncclCommGetAsyncError");
    optional(r.comm_count, "ncclCommCount");
    optional(r.comm_user_rank, "ncclCommUserRank");
    return r;  // the library stays loaded for the life of the process
  }();
  return a;
}

/// NCCL errors travel as htp::cuda_error: code = the ncclResult_t (-1: NCCL could not be loaded).
[[noreturn]] void throw_nccl(int code, const char* call, std::string detail) {
  throw cuda_error(code, code < 0 ? "ncclNotLoaded" : "ncclError", call, __FILE__, __LINE__,
                   std::move(detail));
}

const nccl_api& loaded_api(const char* call) {
  const nccl_api& a = api();
  if (!a.why.empty()) throw_nccl(-1, call, a.why);
  return a;
}

void check(nccl_result r, const char* what) {
  if (r != 0)
    throw_nccl(r, what, detail::concat("NCCL ", what, " failed: ", api().error_string(r)));
}

constexpr nccl_result nccl_in_progress = 7;  // ncclInProgress: not an error

/// Note [Aborting NCCL communicators]
/// ncclCommAbort frees a communicator, so it must not run while a thread is inside an NCCL call on
/// it, or while a group holding calls on it is open (ncclGroupEnd would launch them on freed
/// state). Each call pins its rank's communicator (pins_) and an open group pins them all
/// (open_groups_), under mu_, which is never held across an NCCL call. abort() marks the object
/// aborted (no new pins) and aborts the communicators nobody pins; the last unpin of each of the
/// others aborts it. So abort never waits for a thread blocked in NCCL (it would wait for the rank
/// that failed), and a blocked thread that NCCL releases (a peer's abort closes its connections)
/// aborts its own communicator on the way out.
///
/// One object holds the communicators of the ranks [first_, first_ + comms_.size()) of a world of
/// world_ ranks: all of them (make_nccl_collectives, wrap_nccl_comms), or this process's one
/// (make_nccl_rank_collectives, join_nccl_comm).
class nccl_collectives final : public collectives {
 public:
  nccl_collectives(std::vector<nccl_comm> comms, bool owned)
      : nccl_collectives(std::move(comms), owned, 0, 0) {}
  /// The communicators of ranks first, first + 1, ... of a world of `world` ranks (0: as many
  /// as there are communicators).
  nccl_collectives(std::vector<nccl_comm> comms, bool owned, std::size_t first, std::size_t world)
      : comms_(std::move(comms)), owned_(owned), first_(first),
        world_(world == 0 ? comms_.size() : world), pins_(comms_.size(), 0),
        gone_(comms_.size(), false) {}
  ~nccl_collectives() override {
    // No call is in flight now (the caller's contract): what an abort left pinned goes now.
    abort_comms(abortable());
    if (aborted_) return;  // aborted communicators are freed by ncclCommAbort: never destroyed
    if (!owned_) return;
    // One group: newer NCCL finalizes inside destroy, which waits for the other ranks.
    api().group_start();
    for (nccl_comm c : comms_)
      api().comm_destroy(c);  // errors ignored: nothing to do about them here
    api().group_end();
  }
  std::size_t size() const noexcept override { return world_; }
  std::string backend_name() const override { return "nccl"; }
  void all_gather(std::size_t rank, const void* send, void* recv, std::size_t bytes,
                  stream_ref s) override {
    const detail::nvtx_range range("htp all_gather");
    check_args(rank, send, recv, bytes, "all_gather");
    call(rank, "ncclAllGather",
         [&](nccl_comm c) { return api().all_gather(send, recv, bytes, nccl_uint8, c, s.native); });
  }
  void all_reduce_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                      element_type type, stream_ref s) override {
    const detail::nvtx_range range("htp all_reduce_sum");
    check_args(rank, send, recv, count, "all_reduce_sum");
    const int t = type == element_type::float32 ? nccl_float32 : nccl_bfloat16;
    call(rank, "ncclAllReduce", [&](nccl_comm c) {
      return api().all_reduce(send, recv, count, t, nccl_sum, c, s.native);
    });
  }
  void reduce_scatter_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                          element_type type, stream_ref s) override {
    const detail::nvtx_range range("htp reduce_scatter_sum");
    check_args(rank, send, recv, count, "reduce_scatter_sum");
    const int t = type == element_type::float32 ? nccl_float32 : nccl_bfloat16;
    call(rank, "ncclReduceScatter", [&](nccl_comm c) {
      return api().reduce_scatter(send, recv, count, t, nccl_sum, c, s.native);
    });
  }
  void group_start() override {
    {
      std::lock_guard lock(mu_);
      if (aborted_) throw aborted_error_locked("group_start()");
      ++open_groups_;
    }
    const nccl_result r = api().group_start();
    if (r != 0) {
      close_group();
      check(r, "ncclGroupStart");
    }
    ++thread_groups()[this];
  }
  void group_end() override {
    auto& mine = thread_groups();
    const auto it = mine.find(this);
    if (it ==
        mine.end()) {  // no group of this thread is open here (its group_start threw, or none)
      if (aborted_) {
        std::lock_guard lock(mu_);
        throw aborted_error_locked("group_end()");
      }
      check(api().group_end(), "ncclGroupEnd");  // NCCL's own answer to an unmatched end
      return;
    }
    if (--it->second == 0) mine.erase(it);
    const nccl_result r = api().group_end();  // closes NCCL's group even after an abort
    close_group();
    if (r != 0 && r != nccl_in_progress) fail(r, "ncclGroupEnd", "group_end()");
  }
  void abort(const std::string& reason) noexcept override {
    {
      std::lock_guard lock(mu_);
      if (!aborted_) {
        aborted_ = true;
        try {
          reason_ = reason;
          detail::logger().error("NCCL collectives aborted: {}", reason);
        } catch (...) {  // out of memory for the message: the flag is what matters
        }
      }
    }
    abort_comms(abortable());
  }
  bool aborted() const noexcept override { return aborted_; }

 private:
  /// Rank `rank`'s communicator, held for one NCCL call (see Note [Aborting NCCL communicators]).
  class pin {
   public:
    pin(nccl_collectives& c, std::size_t i, const char* call) : c_(c), rank_(i) {
      std::lock_guard lock(c_.mu_);
      if (c_.aborted_)
        throw c_.aborted_error_locked(detail::concat(call, "(rank ", c_.first_ + i, ")"));
      ++c_.pins_[rank_];
    }
    ~pin() {
      {
        std::lock_guard lock(c_.mu_);
        --c_.pins_[rank_];
      }
      c_.abort_comms(c_.abortable());
    }
    pin(const pin&) = delete;
    pin& operator=(const pin&) = delete;

   private:
    nccl_collectives& c_;
    std::size_t rank_;
  };

  /// One NCCL enqueue on rank's communicator, pinned; a communicator with an asynchronous error
  /// or a refused call aborts the object (the other ranks' calls could never complete), then
  /// throws.
  template <class F>
  void call(std::size_t rank, const char* what, F&& enqueue) {
    const detail::restore_current_device keep;
    const std::size_t i = rank - first_;  // check_args made sure it is one of ours
    const pin held(*this, i, what);
    if (api().comm_get_async_error) {
      nccl_result async = 0;
      if (api().comm_get_async_error(comms_[i], &async) == 0 && async != 0 &&
          async != nccl_in_progress) {
        fail(async, what, detail::concat("rank ", rank, "'s communicator (an asynchronous error)"));
      }
    }
    const nccl_result r = enqueue(comms_[i]);
    if (r != 0 && r != nccl_in_progress) fail(r, what, detail::concat("rank ", rank));
  }

  /// Aborts the object for NCCL's error `r` of `what` on `where`, then throws it as cuda_error.
  [[noreturn]] void fail(nccl_result r, const char* what, const std::string& where) {
    const std::string msg =
        detail::concat("NCCL ", what, " failed on ", where, ": ", api().error_string(r));
    abort(msg + "; the other ranks' collectives could not complete");
    throw_nccl(r, what, msg + "; the collectives are aborted: make new ones");
  }

  /// This thread's open groups, per object (NCCL's groups are per thread).
  static std::map<const nccl_collectives*, std::size_t>& thread_groups() {
    thread_local std::map<const nccl_collectives*, std::size_t> open;
    return open;
  }

  void close_group() noexcept {
    {
      std::lock_guard lock(mu_);
      if (open_groups_ > 0) --open_groups_;
    }
    abort_comms(abortable());
  }

  /// Once aborted: the ranks whose communicators nobody pins and that are not aborted yet, marked
  /// as aborted (the caller aborts them). Empty otherwise.
  std::vector<std::size_t> abortable() noexcept {
    std::vector<std::size_t> out;
    std::lock_guard lock(mu_);
    if (!aborted_ || open_groups_ > 0) return out;
    try {
      for (std::size_t r = 0; r < comms_.size(); ++r) {
        if (!gone_[r] && pins_[r] == 0) {
          out.push_back(r);
          gone_[r] = true;
        }
      }
    } catch (...) {  // out of memory: the ranks not listed stay unmarked, for the next unpin
      for (std::size_t r : out) gone_[r] = false;
      out.clear();
    }
    return out;
  }

  /// ncclCommAbort on these ranks' communicators, outside mu_. Errors are ignored: the
  /// communicator is gone either way. Without ncclCommAbort (old NCCL) they are left alone.
  void abort_comms(const std::vector<std::size_t>& ranks) const noexcept {
    if (ranks.empty() || api().comm_abort == nullptr) return;
    const detail::restore_current_device keep;  // NCCL switches to each communicator's device
    for (std::size_t r : ranks) api().comm_abort(comms_[r]);
  }

  /// The error of a call after an abort. Called with mu_ held.
  logic_error aborted_error_locked(const std::string& call) const {
    return logic_error(
        detail::concat("collectives::", call, ": the NCCL collectives were aborted (", reason_,
                       "); no collective runs after an abort: make new collectives"));
  }

  void check_args(std::size_t rank, const void* send, const void* recv, std::size_t n,
                  const char* what) const {
    HTP_EXPECTS(rank < world_, invalid_argument, "collectives::", what, ": rank ", rank, " of ",
                world_);
    HTP_EXPECTS(rank >= first_ && rank - first_ < comms_.size(), invalid_argument,
                "collectives::", what, ": rank ", rank, " is not this process's rank (", first_,
                " of ", world_, "); each process makes the calls of its own rank only");
    HTP_EXPECTS(send && recv && n > 0, invalid_argument, "collectives::", what, "(rank ", rank,
                "): null buffer or zero size");
  }
  std::vector<nccl_comm> comms_;
  bool owned_;
  std::size_t first_;              // the rank of comms_[0]
  std::size_t world_;              // size(): ranks over all processes
  mutable std::mutex mu_;          // everything below
  std::vector<std::size_t> pins_;  // per rank: NCCL calls in flight on its communicator
  std::vector<bool> gone_;         // per rank: its communicator is aborted (or being aborted)
  std::size_t open_groups_ = 0;    // group_start()s not yet ended, over all threads (each
                                   // thread's own count is in thread_groups())
  std::string reason_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

bool nccl_available(std::string* why) {
  const nccl_api& a = api();
  if (why) *why = a.why;
  return a.why.empty();
}

std::unique_ptr<collectives> make_nccl_collectives(const std::vector<device*>& devices) {
  HTP_EXPECTS(!devices.empty(), invalid_argument, "make_nccl_collectives: no devices");
  std::vector<int> ordinals;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    HTP_EXPECTS(devices[r] != nullptr && devices[r]->properties().kind == backend::cuda,
                invalid_argument, "make_nccl_collectives: device ", r, " is ",
                devices[r] ? "not a cuda device" : "null",
                "; use make_sim_collectives for sim devices");
    ordinals.push_back(devices[r]->properties().ordinal);
    for (std::size_t q = 0; q < r; ++q) {
      HTP_EXPECTS(ordinals[q] != ordinals[r], invalid_argument, "make_nccl_collectives: devices ",
                  q, " and ", r, " are both GPU ", ordinals[r], "; each rank needs its own GPU");
    }
  }
  const nccl_api& a = loaded_api("make_nccl_collectives");
  std::vector<nccl_comm> comms(devices.size(), nullptr);
  // Blocking set-up (it starts NCCL's threads and proxy); no htp lock is held here.
  const detail::restore_current_device keep;  // NCCL switches devices to initialise each rank
  check(a.comm_init_all(comms.data(), static_cast<int>(comms.size()), ordinals.data()),
        "ncclCommInitAll");
  return std::make_unique<nccl_collectives>(std::move(comms), true);
}

std::unique_ptr<collectives> wrap_nccl_comms(const std::vector<void*>& nccl_comms) {
  HTP_EXPECTS(!nccl_comms.empty(), invalid_argument, "wrap_nccl_comms: no communicators");
  for (std::size_t r = 0; r < nccl_comms.size(); ++r) {
    HTP_EXPECTS(nccl_comms[r] != nullptr, invalid_argument, "wrap_nccl_comms: communicator ", r,
                " is null");
  }
  (void)loaded_api("wrap_nccl_comms");
  return std::make_unique<nccl_collectives>(nccl_comms, false);
}

std::vector<std::uint8_t> nccl_unique_id() {
  const nccl_api& a = loaded_api("nccl_unique_id");
  nccl_id id{};
  check(a.get_unique_id(&id), "ncclGetUniqueId");
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(id.internal);
  return std::vector<std::uint8_t>(bytes, bytes + nccl_unique_id_bytes);
}

std::unique_ptr<collectives> make_nccl_rank_collectives(const std::vector<std::uint8_t>& unique_id,
                                                        std::size_t rank, std::size_t world_size,
                                                        device& dev) {
  HTP_EXPECTS(unique_id.size() == nccl_unique_id_bytes, invalid_argument,
              "make_nccl_rank_collectives: a unique id of ", unique_id.size(), " bytes; NCCL's is ",
              nccl_unique_id_bytes, " (make it with nccl_unique_id on rank 0)");
  HTP_EXPECTS(world_size > 0 && rank < world_size, invalid_argument,
              "make_nccl_rank_collectives: rank ", rank, " of a world of ", world_size,
              "; the rank must be below the world size");
  HTP_EXPECTS(world_size <= std::size_t{1} << 30, invalid_argument,
              "make_nccl_rank_collectives: a world of ", world_size, " ranks is too large");
  HTP_EXPECTS(dev.properties().kind == backend::cuda, invalid_argument,
              "make_nccl_rank_collectives: the device is not a cuda device; use "
              "make_sim_rank_collectives for sim devices");
  const nccl_api& a = loaded_api("make_nccl_rank_collectives");
  nccl_id id{};
  std::memcpy(id.internal, unique_id.data(), nccl_unique_id_bytes);
  nccl_comm comm = nullptr;
  {
    // Blocking: NCCL waits here for every rank to join. No htp lock is held.
    const detail::restore_current_device keep;
    detail::make_current_device(dev.properties().ordinal);  // NCCL's rank lives on the current GPU
    check(a.comm_init_rank(&comm, static_cast<int>(world_size), id, static_cast<int>(rank)),
          "ncclCommInitRank");
  }
  return std::make_unique<nccl_collectives>(std::vector<nccl_comm>{comm}, true, rank, world_size);
}

std::unique_ptr<collectives> join_nccl_comm(void* nccl_comm, std::size_t rank,
                                            std::size_t world_size) {
  HTP_EXPECTS(nccl_comm != nullptr, invalid_argument, "join_nccl_comm: a null communicator");
  HTP_EXPECTS(world_size > 0 && rank < world_size, invalid_argument, "join_nccl_comm: rank ", rank,
              " of a world of ", world_size, "; the rank must be below the world size");
  const nccl_api& a = loaded_api("join_nccl_comm");
  // What NCCL says of the communicator, where this NCCL can say it (ncclCommCount and
  // ncclCommUserRank): a caller's rank or size that disagrees would hang the first collective.
  int n = 0, r = 0;
  if (a.comm_count && a.comm_count(nccl_comm, &n) == 0) {
    HTP_EXPECTS(static_cast<std::size_t>(n) == world_size, invalid_argument,
                "join_nccl_comm: the communicator has ", n, " ranks, not ", world_size,
                "; pass the size of the engine's communicator");
  }
  if (a.comm_user_rank && a.comm_user_rank(nccl_comm, &r) == 0) {
    HTP_EXPECTS(static_cast<std::size_t>(r) == rank, invalid_argument,
                "join_nccl_comm: this process is rank ", r, " of the communicator, not ", rank,
                "; pass the engine's rank of this process");
  }
  return std::make_unique<nccl_collectives>(std::vector<void*>{nccl_comm}, false, rank, world_size);
}

}  // namespace htp
