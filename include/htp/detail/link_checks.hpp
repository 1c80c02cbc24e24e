// Internal (not part of the API): the checks of one link direction's settings, shared by the
// transfer engine (transfer_config) and the pager (pager_config), each naming the field as its
// user set it.
#pragma once

#include <htp/transfer_engine.hpp>

#include <cstddef>
#include <string>

namespace htp::detail {

/// Throws htp::invalid_argument naming `field` (e.g. "pager_config.h2d") and the value when `l`
/// has a zero rate or link peak, or a burst that cannot hold one chunk of `chunk_bytes`
/// (`chunk_field` names that setting).
void check_link_config(const transfer_link_config& l, const std::string& field,
                       std::size_t chunk_bytes, const char* chunk_field);

}  // namespace htp::detail
