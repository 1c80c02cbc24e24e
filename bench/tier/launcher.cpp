// htp-tier-bench's launcher: makes the weights and their checksums, opens the node's tier (so it
// outlives every rank, and a killed rank's slot is reclaimed while it is watched), spawns the
// ranks, kills one when asked, and reports host bytes per node, each rank's steps and the link's
// split.
#include "tier/tier_bench.hpp"

#include <htp/checksum.hpp>
#include <htp/error.hpp>
#include <htp/shared_tier.hpp>
#include <htp/token_bucket.hpp>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace htp::bench::tier {

namespace {
/// Writes the weights file layer by layer (one layer of private memory) and the checksums.
void make_weights(const options& o) {
  const std::string path = o.dir + "/weights.bin";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw io_error("htp-tier-bench: cannot create " + path, path, errno);
  std::vector<char> layer(o.layer_bytes);
  nlohmann::json sums = nlohmann::json::array();
  for (std::size_t i = 0; i < layers_of(o); ++i) {
    const std::size_t n = bytes_of(o, i);
    fill_pattern(layer.data(), n, seed_of(i));
    sums.push_back(checksum(layer.data(), n));
    if (std::fwrite(layer.data(), 1, n, f) != n) {
      std::fclose(f);
      throw io_error("htp-tier-bench: cannot write " + path, path, errno);
    }
  }
  // Written back, so its pages are clean: a rank that copied it into the tier can drop them.
  ::fsync(::fileno(f));
  std::fclose(f);
  write_json(sums, o.dir + "/checksums.json");
}

/// Kills o.kill_rank once its progress file says it has begun o.kill_at_step.
std::function<void()> killer(const options& o, const std::vector<int>& pids, bool& killed) {
  return [&o, &pids, &killed] {
    if (killed || o.kill_rank < 0 || o.kill_rank >= static_cast<int>(pids.size())) return;
    std::ifstream f(o.dir + "/rank-" + std::to_string(o.kill_rank) + ".progress");
    int step = 0;
    if (f >> step && step >= o.kill_at_step) {
      ::kill(pids[static_cast<std::size_t>(o.kill_rank)], SIGKILL);
      killed = true;
    }
  };
}

/// Each rank's step p50 against its bound: its bytes paged per step over its share of the link
/// (the smaller of its GPU's own link and the shared link split N ways). Sim only: on cuda the
/// GPU's link is not known here (0).
nlohmann::json steps_against_bound(const options& o, const std::vector<nlohmann::json>& ranks) {
  double share_gbps = o.device.sim_link_gbps;
  if (o.shared_link_gbps > 0) {
    const double split = o.shared_link_gbps / o.processes;
    share_gbps = share_gbps > 0 ? std::min(share_gbps, split) : split;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : ranks) {
    if (!r.contains("step_ms")) continue;
    std::vector<double> ms = r["step_ms"].get<std::vector<double>>();
    std::sort(ms.begin(), ms.end());
    const double p50 = ms[ms.size() / 2];
    const double bytes = static_cast<double>(r.value("page_in_bytes", std::uint64_t{0})) / o.steps;
    const double bound = share_gbps > 0 ? bytes / (share_gbps * 1e9) * 1e3 : 0;
    out.push_back({{"rank", r["rank"]},
                   {"step_p50_ms", p50},
                   {"bound_ms", bound},
                   {"p50_over_bound", bound > 0 ? p50 / bound : 0}});
  }
  return out;
}

nlohmann::json summary(const options& o, const std::vector<nlohmann::json>& ranks,
                       const shared_tier_listing& tier) {
  std::uint64_t anonymous = 0, link_total = 0, checked = 0, bad = 0;
  nlohmann::json split = nlohmann::json::array();
  for (const auto& r : ranks) {
    // On sim, a rank's "HBM" is its own anonymous memory: the GPU's, not a host copy.
    anonymous += r.value("anonymous_bytes", std::uint64_t{0}) -
                 std::min(r.value("anonymous_bytes", std::uint64_t{0}),
                          r.value("sim_hbm_bytes", std::uint64_t{0}));
    link_total += r.value("page_in_bytes", std::uint64_t{0});
    checked += r.value("page_ins_checked", std::uint64_t{0});
    bad += r.value("checksum_mismatches", std::uint64_t{0});
  }
  for (const auto& r : ranks)
    split.push_back(link_total ? static_cast<double>(r.value("page_in_bytes", std::uint64_t{0})) /
                                     static_cast<double>(link_total)
                               : 0.0);
  const std::uint64_t cached = page_cache_bytes(o.dir + "/weights.bin");
  const std::uint64_t shm = allocated_bytes(tier.path);
  const std::uint64_t node = cached + shm + anonymous;
  return {{"weights_bytes", o.weight_bytes},
          {"node_host_bytes", node},
          {"node_host_bytes_over_weights",
           static_cast<double>(node) / static_cast<double>(o.weight_bytes)},
          {"tier_segment_bytes", shm},
          {"file_page_cache_bytes", cached},
          {"ranks_private_host_bytes", anonymous},
          {"page_ins_checked", checked},
          {"checksum_mismatches", bad},
          {"link_split", split},
          {"tier_live_ranks", tier.live_ranks},
          {"tier_dead_ranks", tier.dead_ranks},
          {"tier_entries", tier.entries}};
}

int launch(options o) {
  make_weights(o);
  auto tier = shared_tier::open(tier_config(o));  // its own slot keeps the segment while it reports
  std::vector<int> pids;
  for (int r = 0; r < o.processes; ++r) pids.push_back(spawn_self(child_arguments(o, r)));
  bool killed = false;
  const auto status =
      wait_all(pids, token_bucket::steady_clock_ns() + static_cast<std::int64_t>(o.timeout_s * 1e9),
               killer(o, pids, killed));
  std::vector<nlohmann::json> ranks;
  int failed = 0;
  for (int r = 0; r < o.processes; ++r) {
    const std::string path = o.dir + "/rank-" + std::to_string(r) + ".json";
    const bool expected_death = killed && r == o.kill_rank;
    if (status[static_cast<std::size_t>(r)] != 0 && !expected_death) ++failed;
    struct stat st {};
    nlohmann::json j = ::stat(path.c_str(), &st) == 0 ? read_json(path) : nlohmann::json::object();
    j["rank"] = r;
    j["exit_status"] = status[static_cast<std::size_t>(r)];
    j["killed"] = expected_death;
    ranks.push_back(j);
  }
  nlohmann::json out = {{"bench", "htp-tier-bench"},
                        {"source", o.source},
                        {"processes", o.processes},
                        {"layers", layers_of(o)},
                        {"layer_bytes", o.layer_bytes},
                        {"hbm_fraction", o.hbm_fraction},
                        {"steps", o.steps},
                        {"shared_link_gbps", o.shared_link_gbps},
                        {"sim_link_gbps", o.device.sim_link_gbps},
                        {"ranks", ranks},
                        {"failed_ranks", failed}};
  out.update(summary(o, ranks, tier->describe()));
  out["steps_against_bound"] = steps_against_bound(o, ranks);
  write_json(out, o.out);
  return failed == 0 && out["checksum_mismatches"] == 0 ? 0 : 1;
}

std::string make_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/htp-tier-bench.XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr)
    throw io_error("htp-tier-bench: cannot make a directory", templ, errno);
  return templ;
}

void remove_dir(const std::string& dir) {
  for (const char* f : {"/weights.bin", "/checksums.json"}) ::unlink((dir + f).c_str());
  for (int r = 0; r < 64; ++r) {
    ::unlink((dir + "/rank-" + std::to_string(r) + ".json").c_str());
    ::unlink((dir + "/rank-" + std::to_string(r) + ".progress").c_str());
    ::unlink((dir + "/rank-" + std::to_string(r) + ".ready").c_str());
  }
  ::rmdir(dir.c_str());
}
}  // namespace

}  // namespace htp::bench::tier

int main(int argc, char** argv) {
  using namespace htp::bench::tier;
  options o;
  int rc = 0;
  if (!parse(argc, argv, o, &rc)) return rc;
  try {
    if (o.child >= 0) return o.link_rate ? run_link_rate(o) : run_rank(o);
    o.dir = make_dir();
    rc = o.link_rate ? run_link_rate(o) : launch(o);
    remove_dir(o.dir);
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "htp-tier-bench%s: %s\n",
                 o.child >= 0 ? (" rank " + std::to_string(o.child)).c_str() : "", e.what());
    if (o.child < 0 && !o.dir.empty()) remove_dir(o.dir);
    return 1;
  }
}
