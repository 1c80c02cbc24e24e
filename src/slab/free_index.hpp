// The index of free runs of pages: segregated lists in two-level buckets (16 per power of two,
// exact below 32 pages), so insert, remove and a good-fit search are O(1) with no heap allocation.
// The lists are intrusive, threaded through the runs' first-page records. Not thread-safe; the
// allocator locks.
#pragma once

#include "slab/page_record.hpp"

#include <array>
#include <cstdint>
#include <vector>

namespace htp::slab {

class free_index {
 public:
  static constexpr std::uint32_t none = UINT32_MAX;

  explicit free_index(std::vector<page_record>& pages) : pages_(pages) { heads_.fill(none); }

  /// Adds the free run [start, start + len): writes its first and last page records.
  void insert(std::uint32_t start, std::uint32_t len) noexcept;
  /// Removes the free run that starts at `start` (its first-page record gives the length).
  void remove(std::uint32_t start) noexcept;
  /// A free run of at least n pages, or none. Good fit: the smallest-bucket run that fits, after
  /// looking at up to eight runs of n's own bucket for the tightest.
  std::uint32_t find(std::uint32_t n) const noexcept;
  /// The length of the longest free run (0 when none). O(runs in the top bucket).
  std::uint32_t longest() const noexcept;
  std::uint32_t runs() const noexcept { return runs_; }
  /// Calls f(start, len) for every free run (any order).
  template <class F>
  void for_each(F&& f) const {
    for (std::uint32_t h : heads_) {
      for (std::uint32_t s = h; s != none; s = pages_[s].b) f(s, pages_[s].len);
    }
  }

 private:
  static constexpr unsigned sl_bits = 4;    // 16 buckets per power of two
  static constexpr unsigned fl_count = 29;  // lengths up to 2^32 - 1 pages
  static constexpr unsigned bucket_count = fl_count << sl_bits;
  static unsigned bucket_of(std::uint32_t len) noexcept;
  /// The first non-empty bucket strictly above b, or bucket_count.
  unsigned next_nonempty_above(unsigned b) const noexcept;

  std::vector<page_record>& pages_;
  std::array<std::uint32_t, bucket_count> heads_{};
  std::uint32_t fl_mask_ = 0;                      // bit f: some bucket of level f is non-empty
  std::array<std::uint16_t, fl_count> sl_mask_{};  // bit s: bucket (f, s) is non-empty
  std::uint32_t runs_ = 0;
};

// ---- the hot paths, inline ------------------------------------------------------------------

inline unsigned free_index::bucket_of(std::uint32_t len) noexcept {
  // Level 0 holds lengths 1..15 exactly; level f >= 1 holds [2^(f+3), 2^(f+4)) in 16 equal parts,
  // which is also exact for 16..31.
  if (len < 16) return len;
  const unsigned k = 31u - static_cast<unsigned>(__builtin_clz(len));  // 2^k <= len, k >= 4
  return ((k - 3) << sl_bits) | ((len >> (k - 4)) & 15u);
}

inline void free_index::insert(std::uint32_t start, std::uint32_t len) noexcept {
  const unsigned b = bucket_of(len);
  page_record& first = pages_[start];
  first.len = len;
  first.b = heads_[b];
  first.c = none;
  first.kind = page_kind::free;
  first.flags = 0;
  if (heads_[b] != none) pages_[heads_[b]].c = start;
  heads_[b] = start;
  fl_mask_ |= 1u << (b >> sl_bits);
  sl_mask_[b >> sl_bits] = static_cast<std::uint16_t>(sl_mask_[b >> sl_bits] | (1u << (b & 15u)));
  if (len > 1) {
    page_record& last = pages_[start + len - 1];
    last.len = len;
    last.kind = page_kind::free;
    last.flags = 0;
  }
  ++runs_;
}

inline void free_index::remove(std::uint32_t start) noexcept {
  const page_record& r = pages_[start];
  const unsigned b = bucket_of(r.len);
  if (r.c != none) {
    pages_[r.c].b = r.b;
  } else {
    heads_[b] = r.b;
  }
  if (r.b != none) pages_[r.b].c = r.c;
  if (heads_[b] == none) {
    const unsigned f = b >> sl_bits;
    sl_mask_[f] = static_cast<std::uint16_t>(sl_mask_[f] & ~(1u << (b & 15u)));
    if (sl_mask_[f] == 0) fl_mask_ &= ~(1u << f);
  }
  --runs_;
}

inline std::uint32_t free_index::find(std::uint32_t n) const noexcept {
  const unsigned b = bucket_of(n);
  // n's own bucket holds lengths from below n to above it (exact below 32 pages): look at a few.
  std::uint32_t best = none;
  int looked = 0;
  for (std::uint32_t s = heads_[b]; s != none && looked < 8; s = pages_[s].b, ++looked) {
    if (pages_[s].len >= n && (best == none || pages_[s].len < pages_[best].len)) {
      best = s;
      if (pages_[s].len == n) break;
    }
  }
  if (best != none) return best;
  const unsigned above = next_nonempty_above(b);
  if (above != bucket_count) return heads_[above];  // every run there is longer than n
  // Nothing longer elsewhere: a fitting run may still sit deeper in n's own list.
  for (std::uint32_t s = heads_[b]; s != none; s = pages_[s].b) {
    if (pages_[s].len >= n) return s;
  }
  return none;
}

}  // namespace htp::slab
