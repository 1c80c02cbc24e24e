// Compressed weights (docs/pager.md, "Compressed weights"): registered as a chunk-frame sequence
// (codec.hpp) in the host tier or a companion file; each page-in copies the pieces into the
// transfer engine's HBM staging ring and decodes them into the tensor's extent
// (transfer_engine::submit_decode, called from start_load). Nothing else in the pager knows.
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

#include <htp/detail/file_checks.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

namespace htp {

namespace {

/// Pieces must fit one engine chunk (its staging buffers and bounce buffers are chunk_bytes, and
/// a piece takes its wire bytes from the bucket at once): a codec chunk plus the 56-byte piece
/// header of a chunk stored raw.
constexpr std::size_t piece_header_bytes = 56;

std::size_t codec_chunk_for(const pager_config& c, const std::string& name) {
  const std::size_t chunk = piece_chunk_bytes(c.chunk_bytes);
  HTP_EXPECTS(chunk >= 4096, invalid_argument, "register_tensor('", name,
              "', compressed): pager_config.chunk_bytes = ", c.chunk_bytes,
              " is too small to carry a codec chunk (4096 bytes at least) and its ",
              piece_header_bytes, "-byte header; use 4152 or more");
  return chunk;
}

}  // namespace

tensor_handle pager::register_tensor(std::string name, std::size_t bytes, tensor_kind kind,
                                     const void* source, weight_format format) {
  auto& p = *impl_;
  HTP_EXPECTS(kind == tensor_kind::weight, invalid_argument, "register_tensor('", name,
              "', compressed as ", to_string(format),
              "): only weights can be stored compressed; a mutable tensor is written by kernels "
              "and would have to be re-encoded at every write-back. Register it uncompressed");
  HTP_EXPECTS(bytes > 0 && bytes <= p.tiers.hbm->max_request_bytes(), invalid_argument,
              "register_tensor('", name, "', ", bytes,
              " bytes, compressed): it must have bytes "
              "and fit in the largest HBM extent (",
              p.tiers.hbm->max_request_bytes(),
              " bytes). A compressed tensor has no raw host copy to serve in degraded mode; split "
              "it or register it uncompressed");
  HTP_EXPECTS(element_bytes(format) != 0, invalid_argument, "register_tensor('", name,
              "'): unknown weight_format ", static_cast<int>(format));
  const std::size_t chunk = codec_chunk_for(p.config, name);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint8_t> wire;
  coded_layout layout;
  if (p.dev.properties().timing_only) {
    layout = model_chunk_frames(bytes, format, chunk, p.config.modelled_compression_ratio);
  } else {
    std::vector<std::uint8_t> zeros;
    if (source == nullptr) zeros.assign(bytes, 0);
    codec_options o;
    o.chunk_bytes = chunk;
    o.threads = 0;  // a large weight on every core: a model is registered at start-up
    const auto frame = encode_weights(source != nullptr ? source : zeros.data(), bytes, format, o);
    wire = split_frame(parse_frame(frame.data(), frame.size()));
    layout = verify_chunk_frames(wire.data(), wire.size());
  }
  const auto encode_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  if (layout.wire_bytes >= bytes) return register_tensor(std::move(name), bytes, kind, source);
  p.tiers.engine->prepare_decode();  // slow (device memory): here, not on a page-in under the lock
  const tensor_handle h =
      register_tensor(name, layout.wire_bytes, kind, wire.empty() ? nullptr : wire.data());
  // The host extent now holds the wire bytes: make the record say what they are.
  std::lock_guard lock(p.mutex);
  p.observe.all.encoded(encode_ns);
  return p.adopt_coded(h, std::make_shared<const coded_layout>(std::move(layout)));
}

tensor_handle pager::register_compressed_file_tensor(std::string name,
                                                     std::shared_ptr<const tensor_file> file,
                                                     std::uint64_t offset, std::size_t wire_bytes) {
  auto& p = *impl_;
  const std::string what = detail::concat("register_compressed_file_tensor('", name, "')");
  HTP_EXPECTS(!p.dev.properties().timing_only, invalid_argument, what,
              ": a timing-only device stores no bytes, so a companion cannot be verified or "
              "decoded there; use register_tensor with a weight_format, which models the wire "
              "size (pager_config::modelled_compression_ratio)");
  detail::check_file_source(file.get(), offset, wire_bytes, false, what);
  std::vector<std::uint8_t> wire(wire_bytes);
  file->read(wire.data(), wire_bytes, offset);
  auto layout = std::make_shared<coded_layout>(verify_chunk_frames(wire.data(), wire.size()));
  HTP_EXPECTS(
      layout->decoded_bytes > 0 && layout->decoded_bytes <= p.tiers.hbm->max_request_bytes(),
      invalid_argument, what, ": ", layout->decoded_bytes,
      " decoded bytes; it must have bytes and fit in the largest HBM extent (",
      p.tiers.hbm->max_request_bytes(),
      " bytes): a compressed tensor has no raw host copy to serve in degraded mode");
  for (const coded_piece& c : layout->pieces) {
    HTP_EXPECTS(c.wire_bytes <= p.config.chunk_bytes, invalid_argument, what, ": a piece of ",
                c.wire_bytes, " bytes is larger than pager_config.chunk_bytes (",
                p.config.chunk_bytes,
                "); write the companion for this pager: htp-compress --pager-chunk-bytes ",
                p.config.chunk_bytes);
  }
  p.tiers.engine->prepare_file_reads();
  p.tiers.engine->prepare_decode();
  std::lock_guard lock(p.mutex);
  const tensor_source source =
      tensor_source::in_file(std::move(file), offset, wire_bytes).coded_as(std::move(layout));
  return p.tensors.add(detail::tensor_spec::of(std::move(name), tensor_kind::weight, source));
}

tensor_handle pager::register_compressed_tensor_at(std::string name, void* host_ptr,
                                                   std::shared_ptr<const coded_layout> layout) {
  auto& p = *impl_;
  const std::string what = detail::concat("register_compressed_tensor_at('", name, "')");
  HTP_EXPECTS(layout != nullptr && !layout->pieces.empty() && layout->decoded_bytes > 0 &&
                  layout->decoded_bytes <= p.tiers.hbm->max_request_bytes(),
              invalid_argument, what,
              ": needs a layout of at least one piece whose decoded size fits in the largest HBM "
              "extent (",
              p.tiers.hbm->max_request_bytes(),
              " bytes): a compressed tensor has no raw host copy to serve in degraded mode");
  for (const coded_piece& c : layout->pieces) {
    HTP_EXPECTS(c.wire_bytes <= p.config.chunk_bytes, invalid_argument, what, ": a piece of ",
                c.wire_bytes, " bytes is larger than pager_config.chunk_bytes (",
                p.config.chunk_bytes, "); cut the codec chunks with piece_chunk_bytes(",
                p.config.chunk_bytes, ")");
  }
  if (!p.dev.properties().timing_only) {
    HTP_EXPECTS(host_ptr != nullptr, invalid_argument, what, ": null host pointer");
    const coded_layout seen = verify_chunk_frames(host_ptr, layout->wire_bytes);
    HTP_EXPECTS(
        seen.decoded_bytes == layout->decoded_bytes && seen.pieces.size() == layout->pieces.size(),
        invalid_argument, what, ": the layout says ", layout->pieces.size(), " pieces of ",
        layout->decoded_bytes, " bytes, the memory holds ", seen.pieces.size(), " of ",
        seen.decoded_bytes);
  }
  p.tiers.engine->prepare_decode();
  const tensor_handle h =
      register_tensor_at(name, layout->wire_bytes, tensor_kind::weight, host_ptr);
  std::lock_guard lock(p.mutex);
  return p.adopt_coded(h, std::move(layout));
}

tensor_handle pager::impl::adopt_coded(tensor_handle h,
                                       std::shared_ptr<const coded_layout> layout) {
  // Re-registered under the same slot's successor: the record made by register_tensor held the
  // wire bytes as a plain tensor; its source now says they are coded.
  const detail::tensor_record& t = tensors.get(h);
  const std::uint32_t slot = h.index;
  auto spec =
      detail::tensor_spec::of(t.name, tensor_kind::weight, t.source.coded_as(std::move(layout)));
  tensors.remove(slot);
  return tensors.add(std::move(spec));
}

void pager::impl::decode_to_host(const coded_layout& layout, const std::uint8_t* wire, void* dst) {
  const std::vector<coded_piece>& pieces = layout.pieces;
  std::atomic<std::size_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  const auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < pieces.size();) {
      const coded_piece& c = pieces[i];
      try {
        decode_weights(wire + c.wire_offset, c.wire_bytes,
                       static_cast<char*>(dst) + c.decoded_offset, c.decoded_bytes);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(pieces.size());  // the others stop at their next piece
      }
    }
  };
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> helpers;
  try {
    for (std::size_t k = 1; k < std::min(cores, pieces.size()); ++k) helpers.emplace_back(work);
  } catch (const std::system_error&) {  // no more threads: this one and those started do it all
  }
  work();
  for (auto& h : helpers) h.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace htp
