// Observability: the "htp" logger (level, the caller's sink), reset_metrics, the Prometheus text
// exposition (parsed line by line against the format's rules) and the bounded trace ring.
#include "pager_fixture.hpp"

#include <htp/log.hpp>
#include <htp/prometheus.hpp>
#include <htp/version.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace htp::test {
namespace {

/// Captures htp's log messages for one test, then restores stderr and the level.
struct captured_log {
  std::vector<std::pair<log_level, std::string>> lines;
  log_level before = get_log_level();
  captured_log() {
    set_log_sink(
        [this](log_level l, std::string_view m) { lines.emplace_back(l, std::string(m)); });
  }
  ~captured_log() {
    set_log_sink({});
    set_log_level(before);
  }
  captured_log(const captured_log&) = delete;
  captured_log& operator=(const captured_log&) = delete;
};

TEST(log, the_callers_sink_gets_messages_at_or_above_the_level) {
  captured_log log;
  set_log_level(log_level::info);
  (void)make_device(backend::sim);  // logs the choice at info
  ASSERT_EQ(log.lines.size(), 1u);
  EXPECT_EQ(log.lines[0].first, log_level::info);
  EXPECT_NE(log.lines[0].second.find("sim backend"), std::string::npos) << log.lines[0].second;
  set_log_level(log_level::warn);
  EXPECT_EQ(get_log_level(), log_level::warn);
  (void)make_device(backend::sim);
  EXPECT_EQ(log.lines.size(), 1u) << "an info message passed a warn level";
}

TEST(log, level_names_parse_and_unknown_ones_are_refused_by_name) {
  for (auto l : {log_level::trace, log_level::debug, log_level::info, log_level::warn,
                 log_level::error, log_level::critical, log_level::off}) {
    EXPECT_EQ(parse_log_level(to_string(l)), l);
  }
  EXPECT_EQ(parse_log_level("warning"), log_level::warn);
  try {
    parse_log_level("loud");
    FAIL() << "accepted 'loud'";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'loud'"), std::string::npos) << e.what();
  }
}

TEST(version, the_library_and_the_headers_agree) {
  EXPECT_STREQ(version(), HTP_VERSION_STRING);
  EXPECT_EQ(HTP_VERSION, HTP_VERSION_MAJOR * 10000 + HTP_VERSION_MINOR * 100 + HTP_VERSION_PATCH);
}

/// A pager that has faulted, prefetched and evicted.
pager_metrics exercised_metrics(pager& p, device& dev) {
  stream compute(dev);
  std::vector<tensor_handle> hs;
  for (int i = 0; i < 6; ++i)
    hs.push_back(p.register_tensor("t" + std::to_string(i), 2 * slab, tensor_kind::weight));
  for (int step = 0; step < 2; ++step) {
    for (auto h : hs) {
      p.acquire(h, compute);
      p.release(h, compute);
    }
  }
  compute.synchronize();
  p.synchronize();
  return p.metrics();
}

struct parsed_exposition {
  std::map<std::string, std::string> type;                            // family -> type
  std::vector<std::tuple<std::string, std::string, double>> samples;  // name, labels, value
};

/// Parses the text format strictly: HELP then TYPE once per family before its samples, every
/// family's samples together, names and labels well formed, values numbers.
parsed_exposition parse(const std::string& text) {
  parsed_exposition out;
  const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  const std::regex type(
      R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\})? (\S+))");
  std::string current;
  std::set<std::string> finished;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, help)) {
      EXPECT_EQ(finished.count(m[1]), 0u) << "family " << m[1] << " appears twice";
      if (!current.empty()) finished.insert(current);
      current = m[1];
    } else if (std::regex_match(line, m, type)) {
      EXPECT_EQ(m[1], current) << "TYPE without its HELP: " << line;
      out.type[m[1]] = m[2];
    } else if (std::regex_match(line, m, sample)) {
      const std::string name = m[1];
      const std::string& t = out.type[current];
      const bool ok =
          name == current ||
          (t == "histogram" &&
           (name == current + "_bucket" || name == current + "_sum" || name == current + "_count"));
      EXPECT_TRUE(ok) << "sample " << name << " outside its family (" << current << ")";
      std::size_t used = 0;
      const double v = std::stod(m[4].str(), &used);
      EXPECT_EQ(used, m[4].str().size()) << line;
      out.samples.emplace_back(name, m[3].str(), v);
    } else {
      ADD_FAILURE() << "not a line of the text format: '" << line << "'";
    }
  }
  return out;
}

double value_of(const parsed_exposition& e, const std::string& name,
                const std::string& labels = "") {
  for (const auto& [n, l, v] : e.samples) {
    if (n == name && l == labels) return v;
  }
  ADD_FAILURE() << "no sample " << name << "{" << labels << "}";
  return -1;
}

TEST(prometheus, a_pagers_exposition_is_well_formed_and_carries_its_metrics) {
  auto dev = small_sim_device();
  pager p(*dev, small_pager_config(8));
  const pager_metrics m = exercised_metrics(p, *dev);
  ASSERT_GT(m.faults, 0u);
  const parsed_exposition e = parse(to_prometheus(m));
  for (const auto& [family, t] : e.type) {
    if (t == "counter") {
      EXPECT_EQ(family.substr(family.size() - 6), "_total") << family;
    }
    EXPECT_EQ(family.rfind("htp_", 0), 0u) << family;
  }
  EXPECT_EQ(e.type.at("htp_fault_wait_seconds"), "histogram");
  EXPECT_EQ(value_of(e, "htp_faults_total"), static_cast<double>(m.faults));
  EXPECT_EQ(value_of(e, "htp_acquires_total"), static_cast<double>(m.acquires));
  EXPECT_EQ(value_of(e, "htp_evictions_total"), static_cast<double>(m.evictions));
  EXPECT_EQ(value_of(e, "htp_tier_capacity_bytes", "tier=\"hbm\""),
            static_cast<double>(m.hbm.capacity_bytes));
  EXPECT_EQ(value_of(e, "htp_transfer_bytes_total", "direction=\"h2d\""),
            static_cast<double>(m.transfers.h2d.bytes));
  // The histogram: cumulative, ending at +Inf with the count.
  double previous = 0;
  for (const auto& [n, l, v] : e.samples) {
    if (n != "htp_fault_wait_seconds_bucket") continue;
    EXPECT_GE(v, previous) << l;
    previous = v;
  }
  EXPECT_EQ(value_of(e, "htp_fault_wait_seconds_bucket", "le=\"+Inf\""),
            static_cast<double>(m.fault_wait.count));
  EXPECT_EQ(value_of(e, "htp_fault_wait_seconds_count"), static_cast<double>(m.fault_wait.count));
  EXPECT_NEAR(value_of(e, "htp_fault_wait_seconds_sum"), m.fault_wait.sum_ms / 1e3, 1e-9);
}

TEST(prometheus, a_nodes_exposition_labels_each_gpu_and_escapes_link_names) {
  node_metrics nm;
  nm.per_gpu.resize(2);
  nm.per_gpu[1].faults = 7;
  node_link_metrics l;
  l.name = "odd \"name\"\\";
  l.h2d_bytes = 42;
  nm.links.push_back(l);
  const parsed_exposition e = parse(to_prometheus(nm));
  EXPECT_EQ(value_of(e, "htp_faults_total", "gpu=\"0\""), 0);
  EXPECT_EQ(value_of(e, "htp_faults_total", "gpu=\"1\""), 7);
  EXPECT_EQ(value_of(e, "htp_node_link_bytes_total", R"(link="odd \"name\"\\",direction="h2d")"),
            42);
}

TEST(prometheus, a_gradient_reducers_exposition_splits_its_seconds_and_takes_labels) {
  gradient_reduction_metrics m;
  m.all_reduces = 3;
  m.reduce_scatters = 5;
  m.bytes = 1024;
  m.steps = 2;
  m.reduction_ms = 10;
  m.exposed_ms = 2.5;
  m.hidden_ms = 7.5;
  const parsed_exposition e = parse(to_prometheus(m, "gpu=\"1\""));
  EXPECT_EQ(value_of(e, "htp_gradient_reductions_total", R"(gpu="1",kind="reduce_scatter")"), 5);
  EXPECT_EQ(value_of(e, "htp_gradient_reductions_total", R"(gpu="1",kind="all_reduce")"), 3);
  EXPECT_EQ(value_of(e, "htp_gradient_reduction_bytes_total", R"(gpu="1")"), 1024);
  EXPECT_EQ(value_of(e, "htp_gradient_reduction_seconds_total", R"(gpu="1",part="exposed")"),
            0.0025);
  EXPECT_EQ(value_of(e, "htp_gradient_reduction_seconds_total", R"(gpu="1",part="hidden")"),
            0.0075);
  EXPECT_EQ(e.type.at("htp_gradient_reduction_seconds_total"), "counter");
  EXPECT_EQ(value_of(parse(to_prometheus(m)), "htp_gradient_reduction_steps_total"), 2);
}

TEST(reset_metrics, counters_start_afresh_and_the_exposition_follows) {
  auto dev = small_sim_device();
  pager p(*dev, small_pager_config(8));
  ASSERT_GT(exercised_metrics(p, *dev).faults, 0u);
  p.reset_metrics();
  const pager_metrics m = p.metrics();
  EXPECT_EQ(m.faults, 0u);
  EXPECT_EQ(m.acquires, 0u);
  EXPECT_EQ(m.fault_wait.count, 0u);
  EXPECT_EQ(m.registered_tensors, 6u) << "states survive";
  const parsed_exposition e = parse(to_prometheus(m));
  EXPECT_EQ(value_of(e, "htp_faults_total"), 0);
  EXPECT_EQ(value_of(e, "htp_fault_wait_seconds_bucket", "le=\"+Inf\""), 0);
}

TEST(trace, the_trace_is_a_ring_of_the_configured_size) {
  auto dev = small_sim_device();
  auto c = small_pager_config(8);
  c.trace = true;
  c.trace_capacity = 3;
  pager p(*dev, c);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) p.trace_compute_span("span" + std::to_string(i), t0, t0);
  const std::string path = ::testing::TempDir() + "htp_trace_ring.json";
  p.write_trace(path);
  std::ifstream f(path);
  const auto j = nlohmann::json::parse(f);
  std::vector<std::string> names;
  for (const auto& ev : j.at("traceEvents")) {
    if (ev.at("ph") == "X") names.push_back(ev.at("name"));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"span2", "span3", "span4"}))
      << "the newest three, oldest first";
  EXPECT_EQ(j.at("otherData").at("dropped_spans"), 2);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace htp::test
