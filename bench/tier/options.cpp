#include "tier/tier_bench.hpp"

#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cmath>
#include <cstdio>

namespace htp::bench::tier {

namespace {
std::size_t mib(double m) { return static_cast<std::size_t>(std::llround(m * 1024 * 1024)); }

void add_run_options(CLI::App& app, options& o, double& weight_mib, double& layer_mib,
                     double& chunk_mib) {
  app.add_option("--processes", o.processes, "ranks, one process each")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--weights-mib", weight_mib, "the model's bytes, MiB")->capture_default_str();
  app.add_option("--layer-mib", layer_mib, "one layer's bytes, MiB")->capture_default_str();
  app.add_option("--source", o.source,
                 "where the host copy is: tier (the node's shared tier), file (the weights file "
                 "mapped by every rank) or private (a copy per rank: the baseline)")
      ->check(CLI::IsMember({"tier", "file", "private"}))
      ->capture_default_str();
  app.add_option("--hbm-fraction", o.hbm_fraction, "each rank's HBM budget, of the weights")
      ->check(CLI::Range(0.01, 4.0))
      ->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps")->check(CLI::Range(1, 100000));
  app.add_flag("!--no-verify", o.verify,
               "do not checksum page-ins (for timing: on sim the checksums cost CPU time)");
  app.add_option("--chunk-mib", chunk_mib, "transfer chunk, MiB")->capture_default_str();
  app.add_option("--shared-link-gbps", o.shared_link_gbps,
                 "the node's shared H2D link in the tier, GB/s (0: none)")
      ->capture_default_str();
  app.add_option("--kill-rank", o.kill_rank, "SIGKILL this rank mid-run (-1: none)");
  app.add_option("--kill-at-step", o.kill_at_step, "... once it has begun this step");
  app.add_flag("--link-rate", o.link_rate,
               "measure the shared link's rate error: N processes against N threads");
  app.add_option("--link-seconds", o.link_seconds, "--link-rate: seconds per measurement");
  app.add_option("--timeout-s", o.timeout_s, "every rank must finish by then")
      ->capture_default_str();
  app.add_option("--tier-name", o.tier_name, "the shared tier's name");
  app.add_option("--out", o.out, "JSON output (default: stdout)");
}
}  // namespace

bool parse(int argc, char** argv, options& o, int* rc) {
  CLI::App app{"htp-tier-bench: N processes page one model from one host copy per node"};
  double weight_mib = 2048, layer_mib = 64, chunk_mib = 2;
  add_run_options(app, o, weight_mib, layer_mib, chunk_mib);
  add_backend_option(app, o.device.backend);
  add_sim_link_options(app, o.device, "sim: each GPU's own modelled H2D link, GB/s",
                       "sim: modelled fixed cost of each copy, us");
  app.add_option("--child", o.child, "(internal) run as this rank")->group("");
  app.add_option("--dir", o.dir, "(internal) the run's directory")->group("");
  app.add_option("--start-ns", o.start_ns, "(internal) common start time")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *rc = app.exit(e);
    return false;
  }
  o.weight_bytes = mib(weight_mib);
  o.layer_bytes = std::min(mib(layer_mib), o.weight_bytes);
  o.chunk_bytes = mib(chunk_mib);
  if (o.weight_bytes == 0 || o.layer_bytes == 0 || o.chunk_bytes == 0) {
    std::fprintf(stderr,
                 "htp-tier-bench: --weights-mib, --layer-mib and --chunk-mib must be > 0\n");
    *rc = 2;
    return false;
  }
  if (o.tier_name.empty()) o.tier_name = "htp-tier-bench-" + std::to_string(::getpid());
  return true;
}

shared_tier_config tier_config(const options& o) {
  shared_tier_config tc;
  tc.name = o.tier_name;
  const std::size_t page = tc.page_bytes;
  tc.bytes = o.source == "tier" && !o.link_rate ? o.weight_bytes + layers_of(o) * page : page;
  return tc;
}

std::vector<std::string> child_arguments(const options& o, int rank) {
  const auto mib_text = [](std::size_t b) {
    char text[64];
    std::snprintf(text, sizeof(text), "%.9f", static_cast<double>(b) / 1048576.0);
    return std::string(text);
  };
  std::vector<std::string> a = {"--child",
                                std::to_string(rank),
                                "--dir",
                                o.dir,
                                "--start-ns",
                                std::to_string(o.start_ns),
                                "--processes",
                                std::to_string(o.processes),
                                "--weights-mib",
                                mib_text(o.weight_bytes),
                                "--layer-mib",
                                mib_text(o.layer_bytes),
                                "--source",
                                o.source,
                                "--hbm-fraction",
                                std::to_string(o.hbm_fraction),
                                "--steps",
                                std::to_string(o.steps),
                                "--chunk-mib",
                                mib_text(o.chunk_bytes),
                                "--shared-link-gbps",
                                std::to_string(o.shared_link_gbps),
                                "--link-seconds",
                                std::to_string(o.link_seconds),
                                "--tier-name",
                                o.tier_name,
                                "--backend",
                                o.device.backend,
                                "--sim-link-gbps",
                                std::to_string(o.device.sim_link_gbps),
                                "--sim-latency-us",
                                std::to_string(o.device.sim_latency_us)};
  if (o.link_rate) a.emplace_back("--link-rate");
  if (!o.verify) a.emplace_back("--no-verify");
  return a;
}

}  // namespace htp::bench::tier
