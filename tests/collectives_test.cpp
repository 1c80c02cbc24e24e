// Collectives: the sim implementation across N sim devices (exact results, stream order, errors,
// abort and the rendezvous timeout), and the NCCL one where a GPU and libnccl exist (skipped with
// a message otherwise).
//
// The same file, built with HTP_FAKE_NCCL_LIBRARY, is a stand-in libnccl.so.2 (no GPU: it records
// what htp asks of it), and built with HTP_FAKE_NCCL_TEST, the tests of htp's NCCL collectives
// against that stand-in (HTP_NCCL_LIBRARY names it): abort, its pins and deferred aborts.
#if defined(HTP_FAKE_NCCL_LIBRARY) || defined(HTP_FAKE_NCCL_TEST)
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

/// What the stand-in NCCL saw, per communicator (communicator r is the pointer value r + 1).
struct htp_fake_nccl_state {
  static constexpr int max_comms = 8;
  std::mutex mu;
  std::condition_variable cv;
  int calls[max_comms] = {};          // all-gathers and all-reduces
  int aborts[max_comms] = {};         // ncclCommAbort
  int destroys[max_comms] = {};       // ncclCommDestroy
  int async_error[max_comms] = {};    // what ncclCommGetAsyncError reports
  int enqueue_error[max_comms] = {};  // what a collective returns
  bool block[max_comms] = {};         // a collective blocks until release
  int inside[max_comms] = {};         // threads blocked in a collective now
  bool release = false;
  int open_groups = 0;
  int aborted_while_inside = 0;   // a communicator freed under a thread: must stay 0
  int aborted_in_open_group = 0;  // freed while a group could still launch on it: must stay 0
  int count[max_comms] = {};      // what ncclCommCount reports
  int user_rank[max_comms] = {};  // what ncclCommUserRank reports
  int info_error = 0;             // what both return (non-zero: they fail)
  int unique_ids = 0;             // ncclGetUniqueId calls
};
#endif

#if defined(HTP_FAKE_NCCL_LIBRARY)
// The stand-in libnccl.so.2: the symbols htp's dlopen looks for, with NCCL's C signatures
// (ncclComm_t and cudaStream_t as pointers, the enums as int).
namespace {
htp_fake_nccl_state state;
int index_of(void* comm) { return static_cast<int>(reinterpret_cast<std::uintptr_t>(comm)) - 1; }
int collective(void* comm) {
  const int r = index_of(comm);
  std::unique_lock lock(state.mu);
  ++state.calls[r];
  if (state.enqueue_error[r] != 0) return state.enqueue_error[r];
  if (state.block[r]) {
    ++state.inside[r];
    state.cv.notify_all();
    state.cv.wait_for(lock, std::chrono::seconds(60), [] { return state.release; });
    --state.inside[r];
  }
  return 0;
}
}  // namespace

extern "C" {
htp_fake_nccl_state* htp_fake_nccl(int reset);
int ncclCommInitAll(void**, int, const int*);
struct fake_unique_id {
  char internal[128];
};
int ncclGetUniqueId(fake_unique_id*);
int ncclCommInitRank(void**, int, fake_unique_id, int);
int ncclCommCount(void*, int*);
int ncclCommUserRank(void*, int*);
int ncclCommDestroy(void*);
int ncclCommAbort(void*);
int ncclCommGetAsyncError(void*, int*);
int ncclAllGather(const void*, void*, std::size_t, int, void*, void*);
int ncclAllReduce(const void*, void*, std::size_t, int, int, void*, void*);
int ncclReduceScatter(const void*, void*, std::size_t, int, int, void*, void*);
int ncclGroupStart();
int ncclGroupEnd();
const char* ncclGetErrorString(int);

/// The state, emptied first when `reset` is non-zero.
htp_fake_nccl_state* htp_fake_nccl(int reset) {
  if (reset != 0) {
    std::lock_guard lock(state.mu);
    for (int r = 0; r < htp_fake_nccl_state::max_comms; ++r) {
      state.calls[r] = state.aborts[r] = state.destroys[r] = state.async_error[r] =
          state.enqueue_error[r] = 0;
      state.block[r] = false;
      state.count[r] = state.user_rank[r] = 0;
    }
    state.info_error = state.unique_ids = 0;
    state.release = false;
    state.open_groups = state.aborted_while_inside = state.aborted_in_open_group = 0;
  }
  return &state;
}
int ncclCommInitAll(void**, int, const int*) { return 5; }  // ncclInvalidUsage: no GPUs here
/// Byte i of the id is i * 3 + 1.
int ncclGetUniqueId(fake_unique_id* id) {
  std::lock_guard lock(state.mu);
  ++state.unique_ids;
  for (int i = 0; i < 128; ++i) id->internal[i] = static_cast<char>(i * 3 + 1);
  return 0;
}
int ncclCommInitRank(void**, int, fake_unique_id, int) { return 5; }  // no GPUs here either
int ncclCommCount(void* comm, int* count) {
  std::lock_guard lock(state.mu);
  *count = state.count[index_of(comm)];
  return state.info_error;
}
int ncclCommUserRank(void* comm, int* rank) {
  std::lock_guard lock(state.mu);
  *rank = state.user_rank[index_of(comm)];
  return state.info_error;
}
int ncclCommDestroy(void* comm) {
  std::lock_guard lock(state.mu);
  ++state.destroys[index_of(comm)];
  return 0;
}
int ncclCommAbort(void* comm) {
  std::lock_guard lock(state.mu);
  const int r = index_of(comm);
  ++state.aborts[r];
  if (state.inside[r] > 0) ++state.aborted_while_inside;
  if (state.open_groups > 0) ++state.aborted_in_open_group;
  return 0;
}
int ncclCommGetAsyncError(void* comm, int* result) {
  std::lock_guard lock(state.mu);
  *result = state.async_error[index_of(comm)];
  return 0;
}
int ncclAllGather(const void*, void*, std::size_t, int, void* comm, void*) {
  return collective(comm);
}
int ncclAllReduce(const void*, void*, std::size_t, int, int, void* comm, void*) {
  return collective(comm);
}
int ncclReduceScatter(const void*, void*, std::size_t, int, int, void* comm, void*) {
  return collective(comm);
}
int ncclGroupStart() {
  std::lock_guard lock(state.mu);
  ++state.open_groups;
  return 0;
}
int ncclGroupEnd() {
  std::lock_guard lock(state.mu);
  if (state.open_groups == 0) return 5;
  --state.open_groups;
  return 0;
}
const char* ncclGetErrorString(int) { return "fake NCCL error"; }
}  // extern "C"

#elif defined(HTP_FAKE_NCCL_TEST)
#include "deadline.hpp"

#include <htp/collectives.hpp>
#include <htp/error.hpp>
#include <htp/sim_device.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace htp::test {
namespace {

/// The stand-in's state, reset; null (and the test skipped) when htp did not load the stand-in.
htp_fake_nccl_state* fake() {
  std::string why;
  if (!nccl_available(&why)) return nullptr;
  const char* path = std::getenv("HTP_NCCL_LIBRARY");
  void* lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;  // the library htp loaded
  auto* get =
      lib ? reinterpret_cast<htp_fake_nccl_state* (*)(int)>(dlsym(lib, "htp_fake_nccl")) : nullptr;
  return get ? get(1) : nullptr;
}
#define HTP_FAKE_OR_SKIP(f)        \
  htp_fake_nccl_state* f = fake(); \
  if (f == nullptr)                \
  GTEST_SKIP() << "HTP_NCCL_LIBRARY does not name the stand-in NCCL (ctest sets it)"

std::vector<void*> comms(int n) {
  std::vector<void*> v;
  for (int r = 0; r < n; ++r)
    v.push_back(reinterpret_cast<void*>(static_cast<std::uintptr_t>(r + 1)));
  return v;
}

int locked(htp_fake_nccl_state* f, const int& v) {
  std::lock_guard lock(f->mu);
  return v;
}

TEST(nccl_abort, aborts_every_communicator_once_never_destroys_them_and_later_calls_throw) {
  HTP_FAKE_OR_SKIP(f);
  auto c = wrap_nccl_comms(comms(3));
  char buf[64] = {};
  c->all_gather(0, buf, buf, 64, stream_ref{});
  EXPECT_EQ(locked(f, f->calls[0]), 1);
  EXPECT_FALSE(c->aborted());
  returns_or_die([&] { c->abort("rank 2's thread failed (test)"); }, "abort()");
  EXPECT_TRUE(c->aborted());
  for (int r = 0; r < 3; ++r) EXPECT_EQ(locked(f, f->aborts[r]), 1) << "communicator " << r;
  try {
    c->all_reduce_sum(1, buf, buf, 16, element_type::float32, stream_ref{});
    ADD_FAILURE() << "a call after abort() was accepted";
  } catch (const logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2's thread failed (test)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(locked(f, f->calls[1]), 0) << "nothing reached NCCL";
  EXPECT_THROW(c->group_start(), logic_error);
  EXPECT_THROW(c->group_end(), logic_error);
  c->abort("again");
  c.reset();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(locked(f, f->aborts[r]), 1) << "communicator " << r << " aborted once";
    EXPECT_EQ(locked(f, f->destroys[r]), 0)
        << "communicator " << r << ": an aborted one is never destroyed";
  }
}

// A thread blocked inside NCCL on communicator 1 (waiting for a peer that failed): abort() does
// not wait for it and does not free communicator 1 under it; the thread's return aborts it.
TEST(nccl_abort, a_communicator_a_thread_is_inside_is_aborted_when_the_call_returns) {
  HTP_FAKE_OR_SKIP(f);
  auto c = wrap_nccl_comms(comms(3));
  {
    std::lock_guard lock(f->mu);
    f->block[1] = true;
  }
  char buf[64] = {};
  std::thread inside([&] { c->all_gather(1, buf, buf, 64, stream_ref{}); });
  {
    std::unique_lock lock(f->mu);
    ASSERT_TRUE(f->cv.wait_for(lock, hang_limit, [&] { return f->inside[1] == 1; }))
        << "the all-gather entering NCCL: not so after " << hang_limit.count() << " s (a hang)";
  }
  returns_or_die([&] { c->abort("test"); }, "abort() with a thread inside NCCL");
  EXPECT_EQ(locked(f, f->aborts[0]), 1);
  EXPECT_EQ(locked(f, f->aborts[1]), 0) << "a thread is inside communicator 1";
  EXPECT_EQ(locked(f, f->aborts[2]), 1);
  {
    std::lock_guard lock(f->mu);
    f->release = true;
  }
  f->cv.notify_all();
  inside.join();
  EXPECT_EQ(locked(f, f->aborts[1]), 1) << "aborted once the call returned";
  EXPECT_EQ(locked(f, f->aborted_while_inside), 0);
}

// An open group may still launch its calls at group_end: the abort waits for group_end.
TEST(nccl_abort, an_open_group_defers_the_abort_until_group_end) {
  HTP_FAKE_OR_SKIP(f);
  auto c = wrap_nccl_comms(comms(2));
  char buf[64] = {};
  c->group_start();
  c->all_gather(0, buf, buf, 32, stream_ref{});
  c->abort("test");
  EXPECT_THROW(c->all_gather(1, buf, buf, 32, stream_ref{}), logic_error);
  EXPECT_EQ(locked(f, f->aborts[0]) + locked(f, f->aborts[1]), 0) << "the group is open";
  c->group_end();
  EXPECT_EQ(locked(f, f->aborts[0]), 1);
  EXPECT_EQ(locked(f, f->aborts[1]), 1);
  EXPECT_EQ(locked(f, f->aborted_in_open_group), 0);
  EXPECT_EQ(locked(f, f->open_groups), 0) << "NCCL's group was closed";
}

// A communicator with an asynchronous error, or a call NCCL refuses: the other ranks' calls
// could never complete, so the object aborts itself and the call throws cuda_error.
TEST(nccl_abort, an_asynchronous_error_or_a_refused_call_aborts_the_object) {
  HTP_FAKE_OR_SKIP(f);
  char buf[64] = {};
  {
    auto c = wrap_nccl_comms(comms(3));
    {
      std::lock_guard lock(f->mu);
      f->async_error[2] = 6;  // ncclRemoteError
    }
    EXPECT_THROW(c->all_gather(2, buf, buf, 64, stream_ref{}), cuda_error);
    EXPECT_TRUE(c->aborted());
    for (int r = 0; r < 3; ++r) EXPECT_EQ(locked(f, f->aborts[r]), 1) << "communicator " << r;
    EXPECT_EQ(locked(f, f->calls[2]), 0) << "not enqueued on a failed communicator";
  }
  f = fake();
  auto c = wrap_nccl_comms(comms(2));
  {
    std::lock_guard lock(f->mu);
    f->enqueue_error[0] = 4;  // ncclInvalidArgument
  }
  try {
    c->all_reduce_sum(0, buf, buf, 16, element_type::bfloat16, stream_ref{});
    ADD_FAILURE() << "a refused call did not throw";
  } catch (const cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("fake NCCL error"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(c->aborted());
  EXPECT_EQ(locked(f, f->aborts[0]), 1);
  EXPECT_EQ(locked(f, f->aborts[1]), 1);
}

TEST(nccl_rank, the_unique_id_is_ncclGetUniqueId_s_128_bytes) {
  HTP_FAKE_OR_SKIP(f);
  const std::vector<std::uint8_t> id = nccl_unique_id();
  ASSERT_EQ(id.size(), 128u);
  for (std::size_t i = 0; i < id.size(); ++i)
    ASSERT_EQ(id[i], static_cast<std::uint8_t>(i * 3 + 1)) << "byte " << i;
  EXPECT_EQ(locked(f, f->unique_ids), 1);
}

// The engine's communicator of this process (rank 2 of 4): calls of rank 2 reach it, other ranks
// are refused before NCCL sees them, abort() aborts it (never destroyed: not ours).
TEST(nccl_rank, a_joined_communicator_takes_this_rank_s_calls_only_and_aborts) {
  HTP_FAKE_OR_SKIP(f);
  void* comm = comms(2)[1];  // the stand-in's communicator 1
  {
    std::lock_guard lock(f->mu);
    f->count[1] = 4;
    f->user_rank[1] = 2;
  }
  auto c = join_nccl_comm(comm, 2, 4);
  EXPECT_EQ(c->size(), 4u);
  EXPECT_EQ(c->backend_name(), "nccl");
  char buf[256] = {};
  c->all_gather(2, buf, buf, 64, stream_ref{});
  c->all_reduce_sum(2, buf, buf, 16, element_type::bfloat16, stream_ref{});
  EXPECT_EQ(locked(f, f->calls[1]), 2);
  for (std::size_t wrong : {0, 1, 3, 4}) {
    try {
      c->all_gather(wrong, buf, buf, 64, stream_ref{});
      ADD_FAILURE() << "rank " << wrong << "'s call was accepted";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(wrong)), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(locked(f, f->calls[1]), 2) << "nothing reached NCCL";
  c->abort("rank 0's process died (test)");
  EXPECT_EQ(locked(f, f->aborts[1]), 1);
  try {
    c->all_gather(2, buf, buf, 64, stream_ref{});
    ADD_FAILURE() << "a call after abort() was accepted";
  } catch (const logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0's process died (test)"), std::string::npos)
        << e.what();
  }
  c.reset();
  EXPECT_EQ(locked(f, f->aborts[1]), 1);
  EXPECT_EQ(locked(f, f->destroys[1]), 0);
}

TEST(nccl_rank, joining_checks_the_communicator_s_rank_and_size_when_nccl_can_say) {
  HTP_FAKE_OR_SKIP(f);
  void* comm = comms(1)[0];
  {
    std::lock_guard lock(f->mu);
    f->count[0] = 3;
    f->user_rank[0] = 1;
  }
  try {
    join_nccl_comm(comm, 1, 4);
    ADD_FAILURE() << "a world size NCCL contradicts was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("has 3 ranks, not 4"), std::string::npos) << e.what();
  }
  try {
    join_nccl_comm(comm, 2, 3);
    ADD_FAILURE() << "a rank NCCL contradicts was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 of the communicator, not 2"), std::string::npos)
        << e.what();
  }
  EXPECT_NE(join_nccl_comm(comm, 1, 3), nullptr);
  {
    std::lock_guard lock(f->mu);
    f->info_error = 5;  // NCCL cannot say: the caller's word is taken
  }
  EXPECT_EQ(join_nccl_comm(comm, 3, 8)->size(), 8u);
  EXPECT_THROW(join_nccl_comm(nullptr, 0, 1), invalid_argument);
  EXPECT_THROW(join_nccl_comm(comm, 1, 1), invalid_argument);
  EXPECT_THROW(join_nccl_comm(comm, 0, 0), invalid_argument);
  EXPECT_EQ(locked(f, f->destroys[0]), 0) << "the engine's communicator is never destroyed";
}

TEST(nccl_rank, a_new_rank_communicator_checks_its_arguments_first) {
  HTP_FAKE_OR_SKIP(f);
  auto sim = make_sim_device();
  const std::vector<std::uint8_t> id = nccl_unique_id();
  EXPECT_THROW(make_nccl_rank_collectives(std::vector<std::uint8_t>(127), 0, 2, *sim),
               invalid_argument);
  EXPECT_THROW(make_nccl_rank_collectives(id, 2, 2, *sim), invalid_argument);
  EXPECT_THROW(make_nccl_rank_collectives(id, 0, 0, *sim), invalid_argument);
  try {
    make_nccl_rank_collectives(id, 0, 2, *sim);
    ADD_FAILURE() << "a sim device was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not a cuda device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace htp::test

#else
#include "deadline.hpp"
#include "sim_gpus.hpp"

#include <htp/collectives.hpp>
#include <htp/error.hpp>
#include <htp/sim_device.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace htp::test {
namespace {

TEST(collectives, sim_all_gather_puts_every_ranks_bytes_in_rank_order_on_every_rank) {
  sim_gpus g(4);
  auto c = make_sim_collectives(g.ptrs);
  EXPECT_EQ(c->size(), 4u);
  EXPECT_EQ(c->backend_name(), "sim");
  const std::size_t bytes = 1000;
  std::vector<std::vector<unsigned char>> send(4, std::vector<unsigned char>(bytes)),
      recv(4, std::vector<unsigned char>(4 * bytes));
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t i = 0; i < bytes; ++i) send[r][i] = static_cast<unsigned char>(r * 37 + i);
  }
  // One thread per rank, as an engine with a thread per GPU calls it.
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < 4; ++r) {
    ts.emplace_back(
        [&, r] { c->all_gather(r, send[r].data(), recv[r].data(), bytes, *g.streams[r]); });
  }
  for (auto& t : ts) t.join();
  for (auto& s : g.streams) s->synchronize();
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(std::memcmp(recv[r].data() + k * bytes, send[k].data(), bytes), 0)
          << "rank " << r << " block " << k;
    }
  }
}

TEST(collectives, sim_all_reduce_sums_float32_and_bfloat16_and_runs_in_stream_order) {
  sim_gpus g(3);
  auto c = make_sim_collectives(g.ptrs, 100'000'000'000);  // a modelled 100 GB/s interconnect
  std::vector<std::vector<float>> f(3, std::vector<float>(64));
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t i = 0; i < 64; ++i) f[r][i] = float(r + 1) * float(i);
  }
  // bf16: 1.0, 2.0 and 4.0 are exact.
  std::vector<std::vector<std::uint16_t>> b(3, std::vector<std::uint16_t>(8));
  const std::uint16_t ones[3] = {0x3f80, 0x4000, 0x4080};
  for (std::size_t r = 0; r < 3; ++r) std::fill(b[r].begin(), b[r].end(), ones[r]);
  std::vector<int> order;
  std::mutex m;
  c->group_start();  // one thread issues all ranks
  for (std::size_t r = 0; r < 3; ++r) {
    c->all_reduce_sum(r, f[r].data(), f[r].data(), 64, element_type::float32, *g.streams[r]);
    c->all_reduce_sum(r, b[r].data(), b[r].data(), 8, element_type::bfloat16, *g.streams[r]);
    g.devs[r]->launch_host_func(
        [&, r] {
          std::lock_guard l(m);
          order.push_back(int(r));
        },
        *g.streams[r]);
  }
  c->group_end();
  for (auto& s : g.streams) s->synchronize();
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t i = 0; i < 64; ++i)
      ASSERT_EQ(f[r][i], 6.0f * float(i)) << "rank " << r << " element " << i;
    for (std::uint16_t v : b[r]) ASSERT_EQ(v, 0x40e0) << "7.0 in bfloat16";
  }
  EXPECT_EQ(order.size(), 3u) << "work queued after the collectives ran after them";
}

TEST(collectives, sim_reduce_scatter_leaves_each_rank_its_block_of_the_sum_in_place_or_not) {
  sim_gpus g(3);
  auto c = make_sim_collectives(g.ptrs, 100'000'000'000);
  const std::size_t count = 5;  // per rank received; each rank sends 3 x 5
  std::vector<std::vector<float>> send(3, std::vector<float>(3 * count));
  std::vector<std::vector<float>> recv(3, std::vector<float>(count, -1.0f));
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t i = 0; i < 3 * count; ++i) send[r][i] = float(r + 1) * float(i);
  }
  auto inplace = send;  // rank r's result lands on its own block of its send buffer
  // bf16, in place: 1.0 + 2.0 + 4.0 = 7.0 exactly.
  const std::uint16_t ones[3] = {0x3f80, 0x4000, 0x4080};
  std::vector<std::vector<std::uint16_t>> b(3, std::vector<std::uint16_t>(3 * 4));
  for (std::size_t r = 0; r < 3; ++r) std::fill(b[r].begin(), b[r].end(), ones[r]);
  c->group_start();
  for (std::size_t r = 0; r < 3; ++r) {
    c->reduce_scatter_sum(r, send[r].data(), recv[r].data(), count, element_type::float32,
                          *g.streams[r]);
    c->reduce_scatter_sum(r, inplace[r].data(), inplace[r].data() + r * count, count,
                          element_type::float32, *g.streams[r]);
    c->reduce_scatter_sum(r, b[r].data(), b[r].data() + r * 4, 4, element_type::bfloat16,
                          *g.streams[r]);
  }
  c->group_end();
  for (auto& s : g.streams) s->synchronize();
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      const float want = 6.0f * float(r * count + i);  // (1 + 2 + 3) x element r * count + i
      ASSERT_EQ(recv[r][i], want) << "rank " << r << " element " << i;
      ASSERT_EQ(inplace[r][r * count + i], want) << "in place, rank " << r << " element " << i;
    }
    for (std::size_t i = 0; i < 4; ++i) ASSERT_EQ(b[r][r * 4 + i], 0x40e0) << "7.0 in bfloat16";
  }
}

TEST(collectives, a_reduce_scatter_against_an_all_reduce_of_the_same_size_is_named) {
  sim_gpus g(2);
  auto c = make_sim_collectives(g.ptrs);
  std::vector<float> a(8), r(8);
  c->all_reduce_sum(0, a.data(), r.data(), 4, element_type::float32, *g.streams[0]);
  try {
    c->reduce_scatter_sum(1, a.data(), r.data(), 4, element_type::float32, *g.streams[1]);
    FAIL() << "a reduce_scatter_sum matched an all_reduce_sum";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is a all_reduce_sum"), std::string::npos) << e.what();
  }
  c->all_reduce_sum(1, a.data(), r.data(), 4, element_type::float32, *g.streams[1]);
  for (auto& s : g.streams) s->synchronize();
}

TEST(collectives, mismatched_calls_and_bad_arguments_are_named) {
  sim_gpus g(2);
  auto c = make_sim_collectives(g.ptrs);
  std::vector<unsigned char> a(64), r(128);
  c->all_gather(0, a.data(), r.data(), 64, *g.streams[0]);
  try {
    c->all_gather(1, a.data(), r.data(), 32, *g.streams[1]);
    FAIL() << "a size mismatch was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("same calls in the same order"), std::string::npos)
        << e.what();
  }
  c->all_gather(1, a.data(), r.data(), 64, *g.streams[1]);  // the matching call completes it
  for (auto& s : g.streams) s->synchronize();
  EXPECT_THROW(c->all_gather(2, a.data(), r.data(), 64, *g.streams[0]), invalid_argument);
  EXPECT_THROW(c->all_gather(0, nullptr, r.data(), 64, *g.streams[0]), invalid_argument);
  EXPECT_THROW(make_sim_collectives({}), invalid_argument);
  EXPECT_THROW(make_nccl_collectives(g.ptrs), invalid_argument) << "sim devices are not NCCL ranks";
}

TEST(collectives, one_rank_collectives_copy_on_the_stream_and_refuse_other_ranks) {
  sim_gpus g(1);
  device& d = *g.devs[0];
  stream& s = *g.streams[0];
  auto c = make_one_rank_collectives(d);
  EXPECT_EQ(c->size(), 1u);
  const std::size_t bytes = 3000;
  auto* send = static_cast<unsigned char*>(d.allocate(memory_kind::device, bytes));
  auto* recv = static_cast<unsigned char*>(d.allocate(memory_kind::device, bytes));
  for (std::size_t i = 0; i < bytes; ++i)
    send[i] = static_cast<unsigned char>(i * 13);  // sim memory is host memory
  std::memset(recv, 0, bytes);
  c->all_gather(0, send, recv, bytes, s);
  s.synchronize();
  EXPECT_EQ(std::memcmp(recv, send, bytes), 0);
  std::memset(recv, 0, bytes);
  c->all_reduce_sum(0, send, recv, bytes / 2, element_type::bfloat16, s);
  c->all_reduce_sum(0, recv, recv, bytes / 2, element_type::bfloat16, s);  // in place: unchanged
  s.synchronize();
  EXPECT_EQ(std::memcmp(recv, send, bytes), 0);
  std::memset(recv, 0, bytes);
  c->reduce_scatter_sum(0, send, recv, bytes / 4, element_type::float32, s);  // one block: a copy
  s.synchronize();
  EXPECT_EQ(std::memcmp(recv, send, bytes), 0);
  EXPECT_THROW(c->all_gather(1, send, recv, 1, s), invalid_argument);
  EXPECT_THROW(c->all_reduce_sum(0, nullptr, recv, 2, element_type::float32, s), invalid_argument);
  d.deallocate(memory_kind::device, send, bytes);
  d.deallocate(memory_kind::device, recv, bytes);
}

/// Waits for streams `ranks` of `g` on another thread, with a deadline: a stream that never
/// drains is a hang, reported and ended (the waiting threads cannot be joined).
void drain_or_die(sim_gpus& g, const std::vector<std::size_t>& ranks, const char* what) {
  returns_or_die(
      [&] {
        for (std::size_t r : ranks) g.streams[r]->synchronize();
      },
      std::string(what) + ": draining the streams");
}

/// The message of the htp::logic_error `f` throws ("" and a failure if it throws none).
template <class F>
std::string logic_error_of(F&& f) {
  try {
    f();
  } catch (const logic_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no htp::logic_error";
  return "";
}

// Ranks 0 and 1 wait in an all-gather rank 2 never joins (its thread "failed"); abort() from
// another thread releases them without copying, and every later call says why.
TEST(collectives, sim_abort_releases_ranks_waiting_for_one_that_never_calls) {
  sim_gpus g(3);
  auto c = make_sim_collectives(g.ptrs);
  std::vector<std::vector<unsigned char>> send(3, std::vector<unsigned char>(64, 7)),
      recv(3, std::vector<unsigned char>(192, 0));
  c->all_gather(0, send[0].data(), recv[0].data(), 64, *g.streams[0]);
  c->all_gather(1, send[1].data(), recv[1].data(), 64, *g.streams[1]);
  EXPECT_FALSE(c->aborted());
  std::thread([&] { c->abort("rank 2's thread failed (test)"); }).join();
  EXPECT_TRUE(c->aborted());
  drain_or_die(g, {0, 1}, "after abort()");
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(recv[r], std::vector<unsigned char>(192, 0))
        << "rank " << r << ": nothing is copied after an abort";
  }
  for (std::size_t r = 0; r < 3; ++r) {
    const std::string msg = logic_error_of(
        [&] { c->all_gather(r, send[r].data(), recv[r].data(), 64, *g.streams[r]); });
    EXPECT_NE(msg.find("rank 2's thread failed (test)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("make new collectives"), std::string::npos) << msg;
  }
  EXPECT_THROW(c->all_reduce_sum(0, send[0].data(), send[0].data(), 32, element_type::bfloat16,
                                 *g.streams[0]),
               logic_error);
  EXPECT_THROW(c->group_start(), logic_error);
  c->abort("a second reason");  // idempotent: the first reason stays
  EXPECT_EQ(logic_error_of([&] {
              c->all_gather(0, send[0].data(), recv[0].data(), 64, *g.streams[0]);
            }).find("second"),
            std::string::npos);
}

// A collective every rank enqueued, but whose last rank's stream is held back until after the
// abort: when that rank gets there, nothing is copied, and every stream goes on.
TEST(collectives, sim_collectives_enqueued_before_an_abort_complete_without_copying) {
  sim_gpus g(3);
  auto c = make_sim_collectives(g.ptrs);
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  g.devs[2]->launch_host_func([opened] { (void)opened.wait_for(std::chrono::seconds(60)); },
                              *g.streams[2]);
  std::vector<std::vector<unsigned char>> send(3, std::vector<unsigned char>(64, 9)),
      recv(3, std::vector<unsigned char>(192, 0));
  for (std::size_t r = 0; r < 3; ++r)
    c->all_gather(r, send[r].data(), recv[r].data(), 64, *g.streams[r]);
  c->abort("test");
  open.set_value();
  drain_or_die(g, {0, 1, 2}, "after abort() and the gate");
  for (std::size_t r = 0; r < 3; ++r)
    EXPECT_EQ(recv[r], std::vector<unsigned char>(192, 0)) << "rank " << r;
}

// Nobody calls abort: the ranks waiting at the rendezvous give up after its timeout, abort the
// object, and the reason names the rank that never came.
TEST(collectives, sim_rendezvous_timeout_aborts_and_names_the_ranks_that_did_not_arrive) {
  sim_gpus g(3);
  auto c = make_sim_collectives(g.ptrs, 0, std::chrono::milliseconds(20));
  std::vector<float> a(16, 1.0f), b(16, 1.0f);
  c->all_reduce_sum(0, a.data(), a.data(), 16, element_type::float32, *g.streams[0]);
  c->all_reduce_sum(1, b.data(), b.data(), 16, element_type::float32, *g.streams[1]);
  drain_or_die(g, {0, 1}, "the rendezvous timeout");
  EXPECT_TRUE(c->aborted());
  EXPECT_EQ(a, std::vector<float>(16, 1.0f)) << "nothing summed";
  const std::string msg = logic_error_of(
      [&] { c->all_reduce_sum(2, a.data(), a.data(), 16, element_type::float32, *g.streams[2]); });
  EXPECT_NE(msg.find("for rank(s) 2 that did not arrive"), std::string::npos) << msg;
  EXPECT_NE(msg.find("never called: 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rendezvous timeout"), std::string::npos) << msg;
  EXPECT_THROW(make_sim_collectives(g.ptrs, 0, std::chrono::milliseconds(0)), invalid_argument);
}

// Collectives that complete are untouched by a long timeout, and one rank's collectives abort too.
TEST(collectives, a_completed_collective_needs_no_timeout_and_one_rank_collectives_abort) {
  sim_gpus g(2);
  auto c = make_sim_collectives(g.ptrs, 0, std::chrono::hours(1));
  std::vector<unsigned char> s0(8, 1), s1(8, 2), r0(16, 0), r1(16, 0);
  c->all_gather(0, s0.data(), r0.data(), 8, *g.streams[0]);
  c->all_gather(1, s1.data(), r1.data(), 8, *g.streams[1]);
  drain_or_die(g, {0, 1}, "a matched all-gather");
  EXPECT_FALSE(c->aborted());
  EXPECT_EQ(r0[0], 1);
  EXPECT_EQ(r1[8], 2);
  auto one = make_one_rank_collectives(*g.devs[0]);
  one->abort("test");
  EXPECT_TRUE(one->aborted());
  EXPECT_NE(logic_error_of([&] {
              one->all_gather(0, s0.data(), r0.data(), 8, *g.streams[0]);
            }).find("test"),
            std::string::npos);
}

TEST(collectives, nccl_loads_at_run_time_or_says_why_not) {
  std::string why;
  if (!nccl_available(&why)) {
    EXPECT_FALSE(why.empty());
    EXPECT_NE(why.find("HTP_NCCL_LIBRARY"), std::string::npos) << why;
    EXPECT_THROW(wrap_nccl_comms({reinterpret_cast<void*>(1)}), cuda_error);
    GTEST_SKIP() << "NCCL not loadable here: " << why;
  }
  EXPECT_TRUE(why.empty());
  EXPECT_THROW(wrap_nccl_comms({nullptr}), invalid_argument);
  const int gpus = cuda_device_count();
  if (gpus < 1) GTEST_SKIP() << "NCCL loaded, but no GPU to run a collective on";
  auto dev = make_device(backend::cuda, 0);
  auto c = make_nccl_collectives({dev.get()});
  stream s(*dev);
  void* buf = dev->allocate(memory_kind::device, 4096);
  c->all_gather(0, buf, buf, 4096, s);  // one rank: in place
  s.synchronize();
  dev->deallocate(memory_kind::device, buf, 4096);
  EXPECT_EQ(c->backend_name(), "nccl");
}

}  // namespace
}  // namespace htp::test

#endif  // the sim and real-NCCL tests
