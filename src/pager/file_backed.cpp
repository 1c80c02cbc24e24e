// File-backed tensors (pager::register_file_tensor): weights with no host copy, read from their
// file on every page-in through the transfer engine's bounce buffers (start_load), dropped on
// eviction. See docs/pager.md, "File-backed tensors".
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

#include "transfer/file_checks.hpp"

namespace htp {

tensor_handle pager::register_file_tensor(std::string name, std::size_t bytes,
                                          std::shared_ptr<const tensor_file> file,
                                          std::uint64_t offset) {
  auto& p = *impl_;
  HTP_EXPECTS(bytes <= p.hbm->max_request_bytes(), invalid_argument, "register_file_tensor('", name,
              "', ", bytes, " bytes): larger than the largest HBM extent (",
              p.hbm->max_request_bytes(),
              " bytes; pager_config.hbm_budget_bytes = ", p.config.hbm_budget_bytes,
              "). A file-backed tensor has no host copy to serve in degraded mode, so it must fit "
              "in HBM; split it");
  detail::check_file_source(
      file.get(), offset, bytes, p.dev.properties().timing_only,
      "register_file_tensor('" + name + "', " + std::to_string(bytes) + " bytes)");
  // The engine's bounce buffers: pinned, slow to allocate, so here and not on a page-in under the
  // lock.
  p.engine->prepare_file_reads();
  std::lock_guard lock(p.mutex);
  return p.tensors.add(
      detail::tensor_spec::in_file(std::move(name), bytes, std::move(file), offset));
}

}  // namespace htp
