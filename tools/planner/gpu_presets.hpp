// GPU presets for the capacity planner: HBM size and bandwidth, dense tensor-core rate, and a
// typical measured pinned host->device bandwidth. The link numbers are typical measurements, not
// specifications; a --bench-json from htp-bandwidth or the stream bench replaces them. Sources:
// docs/planner.md.
#pragma once

#include <string>
#include <vector>

namespace htp::bench {

/// The numbers the planner uses for one GPU.
struct gpu_spec {
  std::string name;
  double hbm_gb = 0;          // HBM capacity, GB (1e9 bytes), as the datasheet names it
  double hbm_exposed_gb = 0;  // what the device reports as its total (nvidia-smi, cudaMemGetInfo)
  double hbm_gbps = 0;        // HBM bandwidth, GB/s (datasheet peak)
  double dense_tflops = 0;    // dense bf16/fp16 tensor-core peak, TFLOP/s (no sparsity)
  double link_gbps = 0;       // typical measured pinned host->device copy rate, GB/s
  std::string link;           // what the link is, e.g. "PCIe Gen5 x16"
};

/// The names gpu_preset() accepts, in a stable order.
std::vector<std::string> gpu_preset_names();

/// The preset called `name` (case-insensitive): "A100-40GB", "A100-80GB", "H100-SXM", "H200",
/// "GH200". Throws htp::invalid_argument naming the value and listing the valid names.
gpu_spec gpu_preset(const std::string& name);

}  // namespace htp::bench
