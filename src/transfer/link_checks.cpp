#include <htp/detail/link_checks.hpp>

#include <htp/detail/check.hpp>
#include <htp/shared_link.hpp>

namespace htp::detail {

void check_link_config(const transfer_link_config& l, const std::string& field,
                       std::size_t chunk_bytes, const char* chunk_field) {
  HTP_EXPECTS(
      !l.rate_bytes_per_second || *l.rate_bytes_per_second > 0, invalid_argument, field,
      ".rate_bytes_per_second is 0: that would never move a byte; leave it unset for 80% of "
      "the calibrated link, or set a positive cap");
  HTP_EXPECTS(!l.link_bytes_per_second || *l.link_bytes_per_second > 0, invalid_argument, field,
              ".link_bytes_per_second is 0; leave it unset to calibrate");
  HTP_EXPECTS(l.burst_bytes == 0 || l.burst_bytes >= chunk_bytes, invalid_argument, field,
              ".burst_bytes is ", l.burst_bytes, "; it must be 0 (two chunks) or at least ",
              chunk_field, " (", chunk_bytes, ")");
  HTP_EXPECTS(!l.upstream || l.upstream->chain_burst() >= chunk_bytes, invalid_argument, field,
              ".upstream ('", l.upstream ? l.upstream->name() : std::string(),
              "') or a link above it has a burst of ", l.upstream ? l.upstream->chain_burst() : 0,
              " bytes; every link must hold one chunk (", chunk_field, " = ", chunk_bytes, ")");
}

}  // namespace htp::detail
