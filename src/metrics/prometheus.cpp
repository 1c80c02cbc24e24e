// The Prometheus text exposition of pager and node metrics (include/htp/prometheus.hpp).
#include <htp/prometheus.hpp>

#include <fmt/format.h>

#include <functional>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace htp {
namespace {

/// A label value with \, " and newline escaped as the text format requires.
std::string escape(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

/// Writes families: each one's HELP and TYPE once, then all of its samples.
class exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                   type);
  }
  /// A sample; `labels` is the inside of {...} without braces (empty: none).
  void sample(std::string_view name, std::string_view labels, double value) {
    if (labels.empty()) {
      fmt::format_to(std::back_inserter(out_), "{} {}\n", name, value);
    } else {
      fmt::format_to(std::back_inserter(out_), "{}{{{}}} {}\n", name, labels, value);
    }
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string join(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  return fmt::format("{},{}", a, b);
}

double u(std::uint64_t v) { return static_cast<double>(v); }

/// A pager family: its name, type, help and how to write one pager's samples of it.
struct pager_family {
  std::string name;
  const char* type;
  const char* help;
  std::function<void(exposition&, const char* name, const std::string& labels,
                     const pager_metrics&)>
      write;
};

pager_family scalar(std::string name, const char* type, const char* help,
                    double (*get)(const pager_metrics&)) {
  return {std::move(name), type, help,
          [get](exposition& e, const char* n, const std::string& l, const pager_metrics& m) {
            e.sample(n, l, get(m));
          }};
}

pager_family per_tier(const char* name, const char* help, double (*get)(const tier_occupancy&)) {
  return {name, "gauge", help,
          [get](exposition& e, const char* n, const std::string& l, const pager_metrics& m) {
            e.sample(n, join(l, "tier=\"hbm\""), get(m.hbm));
            e.sample(n, join(l, "tier=\"host\""), get(m.host));
          }};
}

pager_family per_direction(const char* name, const char* type, const char* help,
                           double (*get)(const transfer_direction_metrics&)) {
  return {name, type, help,
          [get](exposition& e, const char* n, const std::string& l, const pager_metrics& m) {
            e.sample(n, join(l, "direction=\"h2d\""), get(m.transfers.h2d));
            e.sample(n, join(l, "direction=\"d2h\""), get(m.transfers.d2h));
            e.sample(n, join(l, "direction=\"d2d\""), get(m.transfers.d2d));
          }};
}

/// The family of one counter of HTP_PAGER_COUNTERS: a gauge named htp_<field> for a level, a
/// counter htp_<field>_total for a count, htp_<field less _ns>_seconds_total for nanoseconds.
pager_family counter_family(const char* field, counter_kind kind, const char* help,
                            double (*get)(const pager_metrics&)) {
  std::string name = std::string("htp_") + field;
  if (kind == counter_kind::level) return scalar(std::move(name), "gauge", help, get);
  if (kind == counter_kind::count) return scalar(name + "_total", "counter", help, get);
  name.resize(name.size() - 3);  // "_ns"
  pager_family f = scalar(name + "_seconds_total", "counter", help, get);
  f.write = [get](exposition& e, const char* n, const std::string& l, const pager_metrics& m) {
    e.sample(n, l, get(m) / 1e9);
  };
  return f;
}

const std::vector<pager_family>& pager_families() {
  static const std::vector<pager_family> families = [] {
    std::vector<pager_family> out;
#define HTP_COUNTER_FAMILY(field, kind, help)                    \
  out.push_back(counter_family(#field, counter_kind::kind, help, \
                               [](const pager_metrics& m) { return u(m.field); }));
    HTP_PAGER_COUNTERS(HTP_COUNTER_FAMILY)
#undef HTP_COUNTER_FAMILY
    out.push_back({"htp_oom_ladder_total", "counter",
                   "Uses of each rung of the out-of-memory ladder.",
                   [](exposition& e, const char* n, const std::string& l, const pager_metrics& m) {
#define HTP_RUNG_SAMPLE(field, help) e.sample(n, join(l, "rung=\"" #field "\""), u(m.oom.field));
                     HTP_OOM_LADDER_RUNGS(HTP_RUNG_SAMPLE)
#undef HTP_RUNG_SAMPLE
                   }});
    std::vector<pager_family> rest = {
        per_tier("htp_tier_capacity_bytes", "Capacity of the memory tier.",
                 [](const tier_occupancy& t) { return u(t.capacity_bytes); }),
        per_tier("htp_tier_used_bytes", "Bytes of live extents in the tier.",
                 [](const tier_occupancy& t) { return u(t.used_bytes); }),
        per_tier("htp_tier_occupancy_ratio", "Used over capacity, 0..1.",
                 [](const tier_occupancy& t) { return t.occupancy_pct / 100; }),
        per_tier("htp_tier_fragmentation_ratio", "Combined fragmentation of the tier, 0..1.",
                 [](const tier_occupancy& t) { return t.fragmentation_pct / 100; }),
        per_tier("htp_tier_largest_free_extent_bytes", "Largest free extent in the tier.",
                 [](const tier_occupancy& t) { return u(t.largest_free_extent_bytes); }),
        {"htp_fault_wait_seconds", "histogram",
         "Page-fault wait: from the acquire call to the bytes being usable (faults and late "
         "prefetches).",
         [](exposition& e, const char* n, const std::string& l, const pager_metrics& m) {
           const std::string bucket = std::string(n) + "_bucket";
           const auto& w = m.fault_wait;
           for (std::size_t b = 0; b < w.bucket_counts.size(); ++b) {
             e.sample(
                 bucket,
                 join(l, fmt::format("le=\"{}\"", fault_wait_summary::bucket_bounds_ms[b] / 1e3)),
                 u(w.bucket_counts[b]));
           }
           e.sample(bucket, join(l, "le=\"+Inf\""), u(w.count));
           e.sample(std::string(n) + "_sum", l, w.sum_ms / 1e3);
           e.sample(std::string(n) + "_count", l, u(w.count));
         }},
        scalar("htp_prefetch_timely_ratio", "gauge",
               "Share of prefetched tensors complete before their first acquire, 0..1.",
               [](const pager_metrics& m) { return m.prefetch_timely_share; }),
        {"htp_prefetch_lateness_seconds", "gauge",
         "How late late prefetches were, first acquire to the load's completion: quantiles over "
         "the late prefetches (their number is htp_late_prefetches_total).",
         [](exposition& e, const char* n, const std::string& l, const pager_metrics& m) {
           const auto& s = m.prefetch_lateness;
           e.sample(n, join(l, "quantile=\"0.5\""), u(s.p50_ns) / 1e9);
           e.sample(n, join(l, "quantile=\"0.99\""), u(s.p99_ns) / 1e9);
           e.sample(n, join(l, "quantile=\"1\""), u(s.max_ns) / 1e9);
         }},
        per_direction("htp_transfer_bytes_total", "counter", "Bytes whose copy chunks completed.",
                      [](const transfer_direction_metrics& d) { return u(d.bytes); }),
        per_direction("htp_transfer_token_wait_seconds_total", "counter",
                      "Time the dispatcher waited for token-bucket tokens.",
                      [](const transfer_direction_metrics& d) { return u(d.token_wait_ns) / 1e9; }),
        per_direction(
            "htp_transfer_rate_cap_bytes_per_second", "gauge",
            "The direction's rate cap (0: not capped).",
            [](const transfer_direction_metrics& d) { return u(d.rate_cap_bytes_per_second); }),
        {"htp_transfer_queue_depth", "gauge",
         "Transfer requests queued or partly issued, per class.",
         [](exposition& e, const char* n, const std::string& l, const pager_metrics& m) {
           for (std::size_t c = 0; c < transfer_priority_count; ++c) {
             e.sample(
                 n,
                 join(l, fmt::format("class=\"{}\"", to_string(static_cast<transfer_priority>(c)))),
                 u(m.transfers.classes[c].queue_depth));
           }
         }},
        {"htp_transfer_requests_total", "counter",
         "Transfer requests finished, per class and outcome.",
         [](exposition& e, const char* n, const std::string& l, const pager_metrics& m) {
           for (std::size_t c = 0; c < transfer_priority_count; ++c) {
             const auto& k = m.transfers.classes[c];
             const char* cls = to_string(static_cast<transfer_priority>(c));
             const std::pair<const char*, std::uint64_t> outcomes[] = {
                 {"completed", k.completed}, {"cancelled", k.cancelled}, {"failed", k.failed}};
             for (const auto& [outcome, v] : outcomes) {
               e.sample(n, join(l, fmt::format("class=\"{}\",outcome=\"{}\"", cls, outcome)), u(v));
             }
           }
         }},
    };
    for (auto& f : rest) out.push_back(std::move(f));
    return out;
  }();
  return families;
}

/// The pager families for `pagers`, each labelled with its entry of `labels`.
void write_pagers(exposition& e, const std::vector<const pager_metrics*>& pagers,
                  const std::vector<std::string>& labels) {
  for (const pager_family& f : pager_families()) {
    e.family(f.name, f.type, f.help);
    for (std::size_t i = 0; i < pagers.size(); ++i)
      f.write(e, f.name.c_str(), labels[i], *pagers[i]);
  }
}

}  // namespace

std::string to_prometheus(const pager_metrics& m) {
  exposition e;
  write_pagers(e, {&m}, {""});
  return e.take();
}

std::string to_prometheus(const gradient_reduction_metrics& m, const std::string& labels) {
  exposition e;
  e.family("htp_gradient_reductions_total", "counter",
           "Gradient reductions queued on the reduction stream, by kind.");
  e.sample("htp_gradient_reductions_total", join(labels, "kind=\"all_reduce\""), u(m.all_reduces));
  e.sample("htp_gradient_reductions_total", join(labels, "kind=\"reduce_scatter\""),
           u(m.reduce_scatters));
  e.family("htp_gradient_reduction_bytes_total", "counter",
           "Gradient bytes handed to the collectives (send side).");
  e.sample("htp_gradient_reduction_bytes_total", labels, u(m.bytes));
  e.family("htp_gradient_reduction_steps_total", "counter",
           "Joined steps whose reduction timing is in the seconds below.");
  e.sample("htp_gradient_reduction_steps_total", labels, u(m.steps));
  e.family("htp_gradient_reduction_seconds_total", "counter",
           "Reduction time on the reduction stream: total, hidden under compute, exposed.");
  e.sample("htp_gradient_reduction_seconds_total", join(labels, "part=\"total\""),
           m.reduction_ms / 1e3);
  e.sample("htp_gradient_reduction_seconds_total", join(labels, "part=\"hidden\""),
           m.hidden_ms / 1e3);
  e.sample("htp_gradient_reduction_seconds_total", join(labels, "part=\"exposed\""),
           m.exposed_ms / 1e3);
  return e.take();
}

std::string to_prometheus(const node_metrics& m) {
  exposition e;
  std::vector<const pager_metrics*> pagers;
  std::vector<std::string> labels;
  for (std::size_t g = 0; g < m.per_gpu.size(); ++g) {
    pagers.push_back(&m.per_gpu[g]);
    labels.push_back(fmt::format("gpu=\"{}\"", g));
  }
  write_pagers(e, pagers, labels);
  e.family("htp_node_host_capacity_bytes", "gauge", "Capacity of the node's host tiers together.");
  e.sample("htp_node_host_capacity_bytes", "", u(m.host_capacity_bytes));
  e.family("htp_node_host_used_bytes", "gauge", "Bytes of every node tensor's host copies.");
  e.sample("htp_node_host_used_bytes", "", u(m.host_used_bytes));
  e.family("htp_node_tensors", "gauge", "Tensors registered with the node.");
  e.sample("htp_node_tensors", "", u(m.tensors));
  e.family("htp_node_link_bytes_total", "counter", "Bytes that crossed each shared link.");
  for (const node_link_metrics& l : m.links) {
    const std::string link = fmt::format("link=\"{}\"", escape(l.name));
    e.sample("htp_node_link_bytes_total", join(link, "direction=\"h2d\""), u(l.h2d_bytes));
    e.sample("htp_node_link_bytes_total", join(link, "direction=\"d2h\""), u(l.d2h_bytes));
    e.sample("htp_node_link_bytes_total", join(link, "direction=\"combined\""),
             u(l.combined_bytes));
  }
  return e.take();
}

}  // namespace htp
