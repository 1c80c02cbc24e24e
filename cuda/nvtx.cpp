// NVTX3 behind src/common/nvtx_range.hpp: ranges in a domain named "htp".
#include "nvtx_range.hpp"

#include <nvtx3/nvToolsExt.h>

namespace htp::detail {
namespace {

nvtxDomainHandle_t domain() noexcept {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("htp");
  return d;
}

}  // namespace

void nvtx_push(const char* name) noexcept {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(domain(), &a);
}

void nvtx_pop() noexcept { nvtxDomainRangePop(domain()); }

}  // namespace htp::detail
