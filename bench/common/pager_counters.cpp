#include "common/pager_counters.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

namespace htp::bench {

std::uint64_t pager_counter(const pager_metrics& m, std::string_view field) {
#define HTP_BENCH_COUNTER(name, kind, help) \
  if (field == #name) return m.name;
  HTP_PAGER_COUNTERS(HTP_BENCH_COUNTER)
#undef HTP_BENCH_COUNTER
  throw invalid_argument(detail::concat("'", field, "' is not a counter of HTP_PAGER_COUNTERS"));
}

void add_pager_counters(nlohmann::json& out, const pager_metrics& m,
                        std::initializer_list<const char*> fields) {
  for (const char* f : fields) out[f] = pager_counter(m, f);
}

}  // namespace htp::bench
