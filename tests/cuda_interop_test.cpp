// cuda_interop.hpp: the program's stream and event used as htp refs, native handles back, a cuda
// device for a GPU the program initialised, and the program's current device unchanged by htp.
// The handle conversions run everywhere; the GPU cases skip without a GPU.
#include "pager_fixture.hpp"

#include <htp/cuda_interop.hpp>

#include <cuda_runtime.h>

namespace htp::test {
namespace {

TEST(cuda_interop, handles_round_trip_and_the_default_and_per_thread_streams_are_refused) {
  auto fake_stream = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x1234});
  EXPECT_EQ(native_stream(wrap_stream(fake_stream)), fake_stream);
  EXPECT_THROW(wrap_stream(nullptr), invalid_argument);
  EXPECT_THROW(wrap_stream(cudaStreamLegacy), invalid_argument);
  EXPECT_THROW(wrap_stream(cudaStreamPerThread), invalid_argument);
  auto fake_event = reinterpret_cast<cudaEvent_t>(std::uintptr_t{0x5678});
  EXPECT_EQ(native_event(wrap_event(fake_event)), fake_event);
  EXPECT_THROW(wrap_event(nullptr), invalid_argument);
}

TEST(cuda_interop, make_cuda_device_without_a_gpu_throws_cuda_error) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(make_cuda_device(0), cuda_error);
}

TEST(cuda_interop, the_programs_stream_carries_a_pager_and_its_current_device_is_kept) {
  std::string why;
  const int gpus = cuda_device_count(&why);
  if (gpus == 0) GTEST_SKIP() << "no GPU here (" << why << "); runs on a machine with one";
  const int mine = gpus - 1;  // the program's current device; htp works on GPU 0
  ASSERT_EQ(cudaSetDevice(mine), cudaSuccess);
  cudaStream_t s0 = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(mine), cudaSuccess);
  cudaEvent_t done = nullptr;
  {
    auto dev = make_cuda_device(0);
    pager p(*dev, small_pager_config(8));
    const auto h = p.register_tensor("t", 3 * slab, tensor_kind::weight);
    const device_span sp = p.acquire(h, wrap_stream(s0));
    dev->fill_pattern_async(sp.data, sp.bytes, 11, wrap_stream(s0));  // "the program's kernel"
    p.release(h, wrap_stream(s0), /*dirty=*/false);
    int current = -1;
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, mine) << "htp changed the calling thread's current device";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(mine), cudaSuccess);
    dev->record(wrap_event(done), wrap_stream(s0));
    dev->synchronize(wrap_event(done));
    EXPECT_EQ(cudaEventQuery(done), cudaSuccess);
    p.synchronize();
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, mine);
  }
  cudaEventDestroy(done);
  cudaStreamDestroy(s0);
}

}  // namespace
}  // namespace htp::test
