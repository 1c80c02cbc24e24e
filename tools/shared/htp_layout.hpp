// How htp lays a model out in HBM, as the benches do it and the planner's htp model predicts it:
// one definition of each rule, so the prediction and the run cannot drift apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace htp::bench {

/// HBM a tensor of `bytes` takes in htp with pages of `page` bytes: whole pages, or a size-class
/// bin block for one under half a page (bins round up by at most a quarter, plus bookkeeping).
std::uint64_t htp_tensor_bytes(std::uint64_t bytes, std::uint64_t page) noexcept;

/// Layers whose shards stay device-resident (htp-stream-bench --resident) when `budget` bytes of
/// HBM must also keep a window of three paged layers and four slabs free: each layer counted as
/// `shard_layer_bytes` plus a page per tensor for rounding. At most `layers`; 0 when the window
/// alone does not fit. `window` false: no window (everything resident that fits).
int resident_layers(std::uint64_t budget, std::uint64_t shard_layer_bytes,
                    std::size_t tensors_per_layer, std::uint64_t page, std::uint64_t slab,
                    int layers, bool window = true) noexcept;

/// Which of `layers` layers are paged when `resident` of them stay resident: the paged ones spread
/// evenly among the resident ones (each prefetched while the resident layers before it compute).
/// All paged when resident is 0.
std::vector<bool> paged_layers(int layers, int resident);

}  // namespace htp::bench
