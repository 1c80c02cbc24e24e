// Stand-in when htp is built without CUDA.
#include "compute.hpp"

#include <htp/error.hpp>

namespace htp::bench {

std::unique_ptr<layer_compute> make_cuda_compute(device&, dtype, int, std::uint64_t,
                                                 std::uint64_t) {
  throw invalid_argument(
      "this build has no CUDA: the cuda compute (cuBLAS GEMMs) is not available");
}

}  // namespace htp::bench
