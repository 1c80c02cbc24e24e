// Size classes for requests below half a page. Classes are 256, 512, 768 bytes, then four per power
// of two: 2^k * {4, 5, 6, 7} / 4 for k >= 10, up to half a page. A request r gets the smallest
// class >= r, so the block exceeds the request by less than max(256 bytes, r / 4) (see
// docs/slab_allocator.md for the bound including slab tails).
#pragma once

#include <cstddef>
#include <vector>

namespace htp::slab {

class size_classes {
 public:
  explicit size_classes(std::size_t page_bytes);
  std::size_t count() const noexcept { return block_.size(); }
  /// Class index for a request 0 < bytes < page_bytes / 2. O(1), no search.
  std::size_t index_for(std::size_t bytes) const noexcept;
  std::size_t block_bytes(std::size_t cls) const noexcept { return block_[cls]; }
  std::size_t blocks_per_page(std::size_t cls) const noexcept { return page_bytes_ / block_[cls]; }
  /// Bytes a request of `bytes` (> 0) occupies: whole pages from half a page, its class below.
  std::size_t rounded(std::size_t bytes) const noexcept {
    if (bytes * 2 >= page_bytes_) return (bytes + page_bytes_ - 1) / page_bytes_ * page_bytes_;
    return block_bytes(index_for(bytes));
  }

 private:
  std::size_t page_bytes_;
  std::vector<std::size_t> block_;
};

}  // namespace htp::slab
