// Length-limited Huffman code lengths (see huffman.hpp).
#include "codec/huffman.hpp"

#include <htp/detail/codec_format.hpp>

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

namespace htp::codec {
namespace {

/// Depth of every used symbol in a Huffman tree of `freq` (0 for unused ones).
std::array<std::uint8_t, 256> huffman_depths(const std::array<std::uint64_t, 256>& freq) {
  using item = std::pair<std::uint64_t, int>;  // (weight, node): ties go to the lower node
  std::priority_queue<item, std::vector<item>, std::greater<item>> heap;
  std::vector<int> parent(511, -1);
  for (int s = 0; s < 256; ++s) {
    if (freq[s] != 0) heap.emplace(freq[s], s);
  }
  std::array<std::uint8_t, 256> depth{};
  if (heap.size() == 1) {
    depth[heap.top().second] = 1;  // a lone symbol still needs one bit a code
    return depth;
  }
  int next = 256;
  while (heap.size() > 1) {
    const item a = heap.top();
    heap.pop();
    const item b = heap.top();
    heap.pop();
    parent[a.second] = parent[b.second] = next;
    heap.emplace(a.first + b.first, next++);
  }
  for (int s = 0; s < 256; ++s) {
    if (freq[s] == 0) continue;
    int d = 0;
    for (int n = s; parent[n] != -1; n = parent[n]) ++d;
    depth[s] = static_cast<std::uint8_t>(std::min(d, 255));
  }
  return depth;
}

}  // namespace

std::array<std::uint8_t, 256> limited_code_lengths(const std::array<std::uint64_t, 256>& freq) {
  std::array<std::uint64_t, 256> f = freq;
  for (;;) {
    const std::array<std::uint8_t, 256> lengths = huffman_depths(f);
    if (*std::max_element(lengths.begin(), lengths.end()) <= max_code_bits) return lengths;
    for (auto& c : f) c = c == 0 ? 0 : (c + 1) / 2;
  }
}

}  // namespace htp::codec
