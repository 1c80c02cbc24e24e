// NCCL behind htp::collectives, loaded at run time (dlopen) so that htp builds, links and runs
// without NCCL. Only NCCL's stable C ABI is declared here (the enum values of nccl.h, and
// cudaStream_t / ncclComm_t as opaque pointers), so this file needs neither nccl.h nor CUDA headers.
#include <htp/collectives.hpp>

#include <htp/detail/check.hpp>
#include <htp/detail/cuda_backend.hpp>

#include "nvtx_range.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>
#include <mutex>

namespace htp {

namespace {

using nccl_result = int;  // ncclResult_t; ncclSuccess = 0
using nccl_comm = void*;  // ncclComm_t
constexpr int nccl_uint8 = 1, nccl_float32 = 7, nccl_bfloat16 = 9;  // ncclDataType_t
constexpr int nccl_sum = 0;                                           // ncclRedOp_t

struct nccl_api {
  nccl_result (*comm_init_all)(nccl_comm*, int, const int*) = nullptr;
  nccl_result (*comm_destroy)(nccl_comm) = nullptr;
  nccl_result (*all_gather)(const void*, void*, std::size_t, int, nccl_comm, void*) = nullptr;
  nccl_result (*all_reduce)(const void*, void*, std::size_t, int, int, nccl_comm, void*) = nullptr;
  nccl_result (*group_start)() = nullptr;
  nccl_result (*group_end)() = nullptr;
  const char* (*error_string)(nccl_result) = nullptr;
  std::string why;  // empty when loaded
};

/// Loads libnccl.so.2 once: $HTP_NCCL_LIBRARY, the loader's path, then the CUDA toolkit's.
const nccl_api& api() {
  static const nccl_api a = [] {
    nccl_api r;
    std::vector<std::string> names;
    if (const char* env = std::getenv("HTP_NCCL_LIBRARY")) names.emplace_back(env);
    names.insert(names.end(), {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2"});
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
      if (!fn && r.why.empty()) r.why = std::string("libnccl.so.2 has no ") + name + "; it is too old";
    };
    sym(r.comm_init_all, "ncclCommInitAll");
    sym(r.comm_destroy, "ncclCommDestroy");
    sym(r.all_gather, "ncclAllGather");
    sym(r.all_reduce, "ncclAllReduce");
    sym(r.group_start, "ncclGroupStart");
    sym(r.group_end, "ncclGroupEnd");
    sym(r.error_string, "ncclGetErrorString");
    return r;  // the library stays loaded for the life of the process
  }();
  return a;
}

/// NCCL errors travel as htp::cuda_error: code = the ncclResult_t (-1: NCCL could not be loaded).
[[noreturn]] void throw_nccl(int code, const char* call, std::string detail) {
  throw cuda_error(code, code < 0 ? "ncclNotLoaded" : "ncclError", call, __FILE__, __LINE__, std::move(detail));
}

const nccl_api& loaded_api(const char* call) {
  const nccl_api& a = api();
  if (!a.why.empty()) throw_nccl(-1, call, a.why);
  return a;
}

void check(nccl_result r, const char* what) {
  if (r != 0) throw_nccl(r, what, detail::concat("NCCL ", what, " failed: ", api().error_string(r)));
}

class nccl_collectives final : public collectives {
 public:
  nccl_collectives(std::vector<nccl_comm> comms, bool owned) : comms_(std::move(comms)), owned_(owned) {}
  ~nccl_collectives() override {
    if (!owned_) return;
    // One group: newer NCCL finalizes inside destroy, which waits for the other ranks.
    api().group_start();
    for (nccl_comm c : comms_) api().comm_destroy(c);  // errors ignored: nothing to do about them here
    api().group_end();
  }
  std::size_t size() const noexcept override { return comms_.size(); }
  std::string backend_name() const override { return "nccl"; }
  void all_gather(std::size_t rank, const void* send, void* recv, std::size_t bytes, stream_ref s) override {
    const detail::nvtx_range range("htp all_gather");
    const detail::restore_current_device keep;
    check_args(rank, send, recv, bytes, "all_gather");
    check(api().all_gather(send, recv, bytes, nccl_uint8, comms_[rank], s.native), "ncclAllGather");
  }
  void all_reduce_sum(std::size_t rank, const void* send, void* recv, std::size_t count, element_type type,
                      stream_ref s) override {
    const detail::nvtx_range range("htp all_reduce_sum");
    const detail::restore_current_device keep;
    check_args(rank, send, recv, count, "all_reduce_sum");
    const int t = type == element_type::float32 ? nccl_float32 : nccl_bfloat16;
    check(api().all_reduce(send, recv, count, t, nccl_sum, comms_[rank], s.native), "ncclAllReduce");
  }
  void group_start() override { check(api().group_start(), "ncclGroupStart"); }
  void group_end() override { check(api().group_end(), "ncclGroupEnd"); }

 private:
  void check_args(std::size_t rank, const void* send, const void* recv, std::size_t n, const char* what) const {
    HTP_EXPECTS(rank < comms_.size(), invalid_argument, "collectives::", what, ": rank ", rank, " of ", comms_.size());
    HTP_EXPECTS(send && recv && n > 0, invalid_argument, "collectives::", what, "(rank ", rank,
                "): null buffer or zero size");
  }
  std::vector<nccl_comm> comms_;
  bool owned_;
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
    HTP_EXPECTS(devices[r] != nullptr && devices[r]->properties().kind == backend::cuda, invalid_argument,
                "make_nccl_collectives: device ", r, " is ", devices[r] ? "not a cuda device" : "null",
                "; use make_sim_collectives for sim devices");
    ordinals.push_back(devices[r]->properties().ordinal);
    for (std::size_t q = 0; q < r; ++q) {
      HTP_EXPECTS(ordinals[q] != ordinals[r], invalid_argument, "make_nccl_collectives: devices ", q, " and ", r,
                  " are both GPU ", ordinals[r], "; each rank needs its own GPU");
    }
  }
  const nccl_api& a = loaded_api("make_nccl_collectives");
  std::vector<nccl_comm> comms(devices.size(), nullptr);
  // Blocking set-up (it starts NCCL's threads and proxy); no htp lock is held here.
  const detail::restore_current_device keep;  // NCCL switches devices to initialise each rank
  check(a.comm_init_all(comms.data(), static_cast<int>(comms.size()), ordinals.data()), "ncclCommInitAll");
  return std::make_unique<nccl_collectives>(std::move(comms), true);
}

std::unique_ptr<collectives> wrap_nccl_comms(const std::vector<void*>& nccl_comms) {
  HTP_EXPECTS(!nccl_comms.empty(), invalid_argument, "wrap_nccl_comms: no communicators");
  for (std::size_t r = 0; r < nccl_comms.size(); ++r) {
    HTP_EXPECTS(nccl_comms[r] != nullptr, invalid_argument, "wrap_nccl_comms: communicator ", r, " is null");
  }
  (void)loaded_api("wrap_nccl_comms");
  return std::make_unique<nccl_collectives>(nccl_comms, false);
}

}  // namespace htp
