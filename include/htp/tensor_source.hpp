// htp::tensor_source: where a paged tensor's authoritative bytes are, and how they are stored.
// One value, made when the tensor is registered, says it: in the pager's pinned host tier, in
// caller memory lent to the pager (pager::add_host_region, register_tensor_at), or in a file
// (register_file_tensor, a companion file); stored raw, or coded as a chunk-frame sequence
// (codec.hpp) that a page-in decodes on the device. transfer_engine::submit_load takes it and
// picks the copy (a plain copy, a file read through bounce buffers, a decode of either), so no
// policy of the pager asks which kind a tensor is: it asks the source what it can do
// (raw_host(), wire_bytes()).
#pragma once

#include <htp/codec.hpp>
#include <htp/tensor_file.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace htp {

/// Where a tensor's authoritative bytes live.
enum class source_place : std::uint8_t {
  none,           ///< no host copy: a device-resident tensor (pager::register_resident)
  pinned_tier,    ///< the pager's pinned host tier (its allocator owns `host`)
  caller_memory,  ///< memory the caller lent (never copied nor freed by the pager)
  file,           ///< a file, read on every page-in (no host copy)
};

/// A value type; thread-safe to read from several threads (its shared parts are immutable).
struct tensor_source {
  source_place place = source_place::none;
  void* host = nullptr;                     ///< pinned tier or caller memory: the stored bytes
  std::size_t host_bytes = 0;               ///< what `host` holds (the wire bytes when coded)
  std::shared_ptr<const tensor_file> file;  ///< place == file
  std::uint64_t file_offset = 0;
  std::size_t bytes = 0;  ///< the tensor's bytes in HBM (decoded)
  /// Coded: a chunk-frame sequence of this layout is what is stored; null: stored raw.
  std::shared_ptr<const coded_layout> coded;
  /// A raw file source verified on each page-in: htp::checksum of each engine chunk of its bytes
  /// (transfer_engine::submit_from_file). Null: unverified.
  std::shared_ptr<const std::vector<std::uint64_t>> chunk_checksums;

  /// `bytes` raw bytes at `host` of the pager's pinned tier (`host_bytes` reserved there).
  static tensor_source in_pinned_tier(void* host, std::size_t host_bytes, std::size_t bytes) {
    tensor_source s;
    s.place = source_place::pinned_tier;
    s.host = host;
    s.host_bytes = host_bytes;
    s.bytes = bytes;
    return s;
  }
  /// `bytes` raw bytes at `host`, caller memory lent to the pager.
  static tensor_source in_caller_memory(void* host, std::size_t bytes) {
    tensor_source s = in_pinned_tier(host, bytes, bytes);
    s.place = source_place::caller_memory;
    return s;
  }
  /// `bytes` raw bytes of `file` at `offset`.
  static tensor_source in_file(std::shared_ptr<const tensor_file> file, std::uint64_t offset,
                               std::size_t bytes) {
    tensor_source s;
    s.place = source_place::file;
    s.file = std::move(file);
    s.file_offset = offset;
    s.bytes = bytes;
    return s;
  }
  /// The same place, holding the chunk-frame sequence of `layout` (its decoded bytes).
  tensor_source coded_as(std::shared_ptr<const coded_layout> layout) const {
    tensor_source s = *this;
    s.bytes = layout->decoded_bytes;
    s.coded = std::move(layout);
    return s;
  }

  bool is_coded() const noexcept { return coded != nullptr; }
  /// Bytes a page-in moves over the link: the chunk-frame sequence when coded.
  std::size_t wire_bytes() const noexcept { return coded ? coded->wire_bytes : bytes; }
  /// The tensor's own bytes in host memory, raw, where kernels may read them in place (degraded
  /// mode) and a write-back may write them; null when there are none (a file, coded bytes, or no
  /// host copy).
  void* raw_host() const noexcept {
    return (place == source_place::pinned_tier || place == source_place::caller_memory) && !coded
               ? host
               : nullptr;
  }
};

}  // namespace htp
