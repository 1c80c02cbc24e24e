// The release points of one tensor: usually one (a tensor is released on one stream), so the
// first lives inline in the tensor's record and only further ones (other streams) go to the
// heap. A release at 10^6 tensors then writes no cold heap line (a vector's storage cost one cache
// miss per release, most of the record's cost at that scale: htp-pager-bench flat_per_call).
// Unordered: erase moves the last point into the hole. Not thread-safe.
#pragma once

#include <htp/device.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

namespace htp::detail {

/// A release point: an event recorded on the stream that released the tensor. A later release on
/// the same stream supersedes it (streams run in order), so a tensor holds at most one per stream.
struct release_point {
  event_ref event;  // held (event_pool reference) while the point is
  stream_ref stream;
  std::uint64_t seq = 0;  // release number, to match the stream's retirement queue
};

class release_points {
 public:
  template <typename P, typename R>
  class basic_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = release_point;
    using difference_type = std::ptrdiff_t;
    using pointer = R*;
    using reference = R&;
    basic_iterator(P* points, std::size_t i) : points_(points), i_(i) {}
    reference operator*() const { return points_->at(i_); }
    pointer operator->() const { return &points_->at(i_); }
    basic_iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const basic_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const basic_iterator& o) const { return i_ != o.i_; }
    std::size_t index() const { return i_; }

   private:
    P* points_;
    std::size_t i_;
  };
  using iterator = basic_iterator<release_points, release_point>;
  using const_iterator = basic_iterator<const release_points, const release_point>;

  release_points() = default;
  release_points(release_points&&) noexcept = default;
  release_points& operator=(release_points&&) noexcept = default;

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  release_point& at(std::size_t i) { return i == 0 ? first_ : (*more_)[i - 1]; }
  const release_point& at(std::size_t i) const { return i == 0 ? first_ : (*more_)[i - 1]; }
  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size_}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

  void push_back(const release_point& p) {
    if (size_ > 0) {
      if (!more_) more_ = std::make_unique<std::vector<release_point>>();
      more_->push_back(p);
    } else {
      first_ = p;
    }
    ++size_;
  }
  /// Removes the point at `it` (the last point takes its place).
  void erase(iterator it) {
    release_point& hole = at(it.index());
    if (size_ > 1) {
      hole = more_->back();
      more_->pop_back();
    }
    --size_;
  }
  /// Removes every point for which `drop(point)` is true.
  template <typename F>
  void remove_if(F&& drop) {
    for (std::size_t i = 0; i < size_;) {
      if (drop(at(i))) {
        erase(iterator(this, i));
      } else {
        ++i;
      }
    }
  }
  void clear() {
    size_ = 0;
    if (more_) more_->clear();
  }

 private:
  release_point first_;
  std::size_t size_ = 0;
  std::unique_ptr<std::vector<release_point>> more_;  // points 1.. (other streams), rarely
};

}  // namespace htp::detail
