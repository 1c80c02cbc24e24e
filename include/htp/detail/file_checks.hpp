// Internal (not part of the API): the checks of a file-backed copy's source, shared by the transfer
// engine (submit_from_file) and the pager (register_file_tensor, which checks at registration what
// every page-in will need).
#pragma once

#include <htp/tensor_file.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace htp::detail {

/// Throws htp::invalid_argument, starting with `call`, when `file` is null, [offset, offset +
/// bytes) is empty or runs past its end, or the file and the device do not match: a modelled file
/// holds no bytes (only a timing-only device may read it), and a timing-only device stores none
/// (it may read only a modelled file).
void check_file_source(const tensor_file* file, std::uint64_t offset, std::size_t bytes,
                       bool timing_only, const std::string& call);

}  // namespace htp::detail
