// Reads the measured numbers out of a stream bench or htp-bandwidth JSON (contract in the header).
#include "planner/bench_json.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <nlohmann/json.hpp>

#include <fstream>

namespace htp::bench {

namespace {

/// The number at `ptr` in `j`, 0 when absent; throws when present but not a positive number.
double positive_at(const nlohmann::json& j, const char* ptr, const std::string& path) {
  const nlohmann::json::json_pointer p(ptr);
  if (!j.contains(p) || j.at(p).is_null()) return 0;
  const auto& v = j.at(p);
  HTP_EXPECTS(v.is_number() && v.get<double>() > 0, htp::invalid_argument, "bench JSON '", path,
              "': ", ptr, " is ", v.dump(), "; it must be a positive number");
  return v.get<double>();
}

}  // namespace

measured_run read_bench_json(const std::string& path, const std::string& node_mode) {
  std::ifstream in(path);
  HTP_EXPECTS(in.good(), htp::invalid_argument, "bench JSON '", path,
              "' cannot be opened; pass the --json output of htp-bandwidth or the stream bench");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw htp::invalid_argument("bench JSON '" + path + "' is not valid JSON (" + e.what() + ")");
  }
  HTP_EXPECTS(j.is_object(), htp::invalid_argument, "bench JSON '", path, "' is not a JSON object");
  measured_run m;
  m.source = path;
  m.h2d_gbps = positive_at(j, "/measured/h2d_gbps", path);
  m.step_ms_p50 = positive_at(j, "/measured/step_ms_p50", path);
  if (m.step_ms_p50 == 0) {  // a node-only run: its first mode that ran
    const nlohmann::json nodes =
        j.contains("node") && j["node"].is_array() ? j["node"] : nlohmann::json::array();
    for (const auto& r : nodes) {
      if (!r.is_object() || (r.contains("skipped") && r["skipped"] == true)) continue;
      if (!node_mode.empty() && !(r.contains("mode") && r["mode"] == node_mode)) continue;
      if (r.contains("step_ms_p50") && r["step_ms_p50"].is_number()) {
        m.step_ms_p50 = r["step_ms_p50"].get<double>();
        break;
      }
    }
  }
  m.link_peak_gbps = positive_at(j, "/config/link_peak_bytes_per_second", path) / 1e9;
  if (m.h2d_gbps == 0) m.h2d_gbps = positive_at(j, "/fits/pinned_H2D/peak_gb_per_s", path);
  HTP_EXPECTS(
      m.h2d_gbps > 0 || m.step_ms_p50 > 0, htp::invalid_argument, "bench JSON '", path,
      "' has none of /measured/h2d_gbps, /measured/step_ms_p50 or "
      "/fits/pinned_H2D/peak_gb_per_s; pass the --json of htp-bandwidth or the stream bench");
  return m;
}

}  // namespace htp::bench
