// Pinned 32-bit words that streams write and wait on (device::write_value_async /
// wait_value_async), handed out with a generation number that only grows per word.
//
// Why reuse is safe: a word is returned only after its last write has executed (the engine records
// the last chunk's event after the write), so the word already holds the generation g. The next
// user writes g + 1; a late waiter for g is satisfied by g + 1 because comparisons are wrap-safe
// ("reached" means (int32_t)(word - value) >= 0). Not thread-safe: the engine guards it.
#pragma once

#include <htp/device.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace htp::transfer {

struct value_word {
  std::uint32_t* word = nullptr;
  std::uint32_t generation = 0;  ///< the value that means "done"
  std::size_t slot = 0;
};

class value_word_pool {
 public:
  static constexpr std::size_t block_words = 1024;

  explicit value_word_pool(device& dev) : dev_(dev) {}
  ~value_word_pool();
  value_word_pool(const value_word_pool&) = delete;
  value_word_pool& operator=(const value_word_pool&) = delete;

  /// Allocates pinned blocks until `words` words exist. Pinning is slow and may synchronize the
  /// device, so the engine does this at construction, not under its lock on a request path.
  void reserve(std::size_t words);
  /// True when acquire() has a word to give without allocating.
  bool has_free() const noexcept { return !free_.empty(); }
  /// Words acquire() can give without allocating.
  std::size_t free_count() const noexcept { return free_.size(); }
  /// A new pinned block of block_words zeroed words, for add_block. Touches no pool state, so the
  /// engine calls it without its lock (pinning is slow and may synchronise the device).
  /// @throws htp::out_of_memory / htp::cuda_error from the device.
  std::uint32_t* allocate_block() const;
  /// Adds a block from allocate_block (under the engine's lock).
  void add_block(std::uint32_t* block);
  /// A free word with its next generation. @pre has_free() (the engine grows the pool first).
  value_word acquire();
  /// Returns a word whose generation has been written.
  void release(const value_word& w) { free_.push_back(w.slot); }

 private:
  device& dev_;
  std::vector<std::uint32_t*> blocks_;
  std::vector<std::uint32_t> generation_;  // per slot: last generation handed out
  std::vector<std::size_t> free_;
};

}  // namespace htp::transfer
