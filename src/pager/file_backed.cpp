// File-backed tensors (pager::register_file_tensor): weights with no host copy, read from their
// file on every page-in through the transfer engine's bounce buffers (start_load), dropped on
// eviction. See docs/pager.md, "File-backed tensors".
#include "pager/pager_impl.hpp"

#include <htp/checksum.hpp>
#include <htp/detail/check.hpp>
#include <htp/error.hpp>
#include <htp/tensor_file.hpp>

#include <algorithm>

#include <htp/detail/file_checks.hpp>

namespace htp {
namespace {

/// htp::checksum of each `chunk`-byte piece of `file` at [offset, offset + bytes), as the
/// transfer engine cuts a submit_from_file request: read once, a chunk at a time through one
/// buffer. @throws htp::io_error (the path and errno) if a read fails.
std::shared_ptr<const std::vector<std::uint64_t>> chunk_checksums(const tensor_file& file,
                                                                  std::uint64_t offset,
                                                                  std::size_t bytes,
                                                                  std::size_t chunk,
                                                                  const std::string& what) {
  auto sums = std::make_shared<std::vector<std::uint64_t>>();
  sums->reserve((bytes + chunk - 1) / chunk);
  std::vector<unsigned char> buf(std::min(chunk, bytes));
  for (std::size_t at = 0; at < bytes; at += chunk) {
    const std::size_t n = std::min(chunk, bytes - at);
    try {
      file.read(buf.data(), n, offset + at);
    } catch (const io_error& e) {
      throw io_error(
          detail::concat(what, ": reading the file for its checksums failed: ", e.what()), e.path(),
          e.error_number());
    }
    sums->push_back(checksum(buf.data(), n));
  }
  return sums;
}

}  // namespace

tensor_handle pager::register_file_tensor(std::string name, std::size_t bytes,
                                          std::shared_ptr<const tensor_file> file,
                                          std::uint64_t offset) {
  auto& p = *impl_;
  HTP_EXPECTS(bytes <= p.tiers.hbm->max_request_bytes(), invalid_argument, "register_file_tensor('",
              name, "', ", bytes, " bytes): larger than the largest HBM extent (",
              p.tiers.hbm->max_request_bytes(),
              " bytes; pager_config.hbm_budget_bytes = ", p.config.hbm_budget_bytes,
              "). A file-backed tensor has no host copy to serve in degraded mode, so it must fit "
              "in HBM; split it");
  detail::check_file_source(
      file.get(), offset, bytes, p.dev.properties().timing_only,
      "register_file_tensor('" + name + "', " + std::to_string(bytes) + " bytes)");
  // The engine's bounce buffers: pinned, slow to allocate, so here and not on a page-in under the
  // lock.
  p.tiers.engine->prepare_file_reads();
  tensor_source source = tensor_source::in_file(file, offset, bytes);
  if (p.config.verify_page_ins && !p.dev.properties().timing_only) {
    source.chunk_checksums =
        chunk_checksums(*file, offset, bytes, p.tiers.engine->config().chunk_bytes,
                        "register_file_tensor('" + name + "')");
  }
  auto spec = detail::tensor_spec::of(std::move(name), tensor_kind::weight, std::move(source));
  std::lock_guard lock(p.mutex);
  return p.tensors.add(std::move(spec));
}

}  // namespace htp
