#include "transfer/value_word_pool.hpp"

namespace htp::transfer {

value_word_pool::~value_word_pool() {
  for (auto* b : blocks_) {
    try {
      dev_.deallocate(memory_kind::pinned_host, b, block_words * sizeof(std::uint32_t));
    } catch (...) {  // a destructor must not throw; the device reports its own misuse
    }
  }
}

std::uint32_t* value_word_pool::allocate_block() const {
  auto* b = static_cast<std::uint32_t*>(
      dev_.allocate(memory_kind::pinned_host, block_words * sizeof(std::uint32_t)));
  for (std::size_t i = 0; i < block_words; ++i) dev_.write_value(b + i, 0);
  return b;
}

void value_word_pool::add_block(std::uint32_t* b) {
  const std::size_t first = generation_.size();
  blocks_.push_back(b);
  generation_.resize(first + block_words, 0);
  for (std::size_t i = block_words; i-- > 0;) free_.push_back(first + i);
}

void value_word_pool::reserve(std::size_t words) {
  while (generation_.size() < words) add_block(allocate_block());
}

value_word value_word_pool::acquire() {
  const std::size_t slot = free_.back();
  free_.pop_back();
  value_word w;
  w.slot = slot;
  w.word = blocks_[slot / block_words] + slot % block_words;
  w.generation = ++generation_[slot];
  return w;
}

}  // namespace htp::transfer
