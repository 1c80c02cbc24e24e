// GPU presets. HBM size/bandwidth and dense bf16 rates from NVIDIA's datasheets; link rates are
// typical measured pinned cudaMemcpyAsync H2D rates (PCIe Gen4 x16 ~25 GB/s of 32 theoretical,
// Gen5 x16 ~55 of 64, NVLink-C2C ~450 of 450 per direction). See docs/planner.md.
#include "planner/gpu_presets.hpp"

#include <htp/error.hpp>

#include <algorithm>
#include <cctype>

namespace htp::bench {

namespace {

const std::vector<gpu_spec>& table() {
  // Exposed totals as nvidia-smi reports them, in MiB (cudaMemGetInfo's total is the same bytes).
  constexpr double mib = 1048576.0 / 1e9;
  static const std::vector<gpu_spec> t = {
      {"A100-40GB", 40, 40960 * mib, 1555, 312, 25, "PCIe Gen4 x16"},
      {"A100-80GB", 80, 81920 * mib, 2039, 312, 25, "PCIe Gen4 x16"},
      {"H100-SXM", 80, 81559 * mib, 3350, 989, 55, "PCIe Gen5 x16"},
      {"H200", 141, 143771 * mib, 4800, 989, 55, "PCIe Gen5 x16"},
      {"GH200", 96, 97871 * mib, 4000, 989, 450, "NVLink-C2C"},
  };
  return t;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::vector<std::string> gpu_preset_names() {
  std::vector<std::string> names;
  for (const auto& g : table()) names.push_back(g.name);
  return names;
}

gpu_spec gpu_preset(const std::string& name) {
  for (const auto& g : table()) {
    if (lower(g.name) == lower(name)) return g;
  }
  std::string valid;
  for (const auto& g : table()) valid += (valid.empty() ? "" : ", ") + g.name;
  throw htp::invalid_argument("unknown GPU preset '" + name + "'; valid: " + valid +
                              " (or give --hbm-gb, --hbm-gbps, --tflops and --link-gbps)");
}

}  // namespace htp::bench
