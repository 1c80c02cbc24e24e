// htp-moe-bench's command line. See options.hpp.
#include "moe/options.hpp"

#include <CLI/CLI.hpp>

namespace htp::bench {

int parse_moe_options(int argc, char** argv, moe_options& o) {
  CLI::App app{"htp-moe-bench: a mixture-of-experts model's routed experts paged without a "
               "schedule, policies side by side against an offline Belady oracle"};
  app.add_option("--model", o.model_name, "an MoE preset (mixtral-8x7b)");
  app.add_option("--dtype", o.dtype_name, "bf16, fp16, fp8 or int8");
  app.add_option("--layers", o.layers, "layers to run, with the real layer shape (0 = all)");
  app.add_option("--tokens", o.tokens, "tokens per decode step (each routes to its top-k)");
  app.add_option("--steps", o.steps, "timed decode steps per policy");
  app.add_option("--warmup", o.warmup, "warm-up steps per policy (not timed; popularity learns)");
  app.add_option("--sweep", o.sweep, "comma-separated HBM budgets, fractions of the layers run");
  app.add_option("--policies", o.policies, "comma-separated: today, lru, popularity");
  app.add_option("--json", o.json_path, "write the results and the configuration as JSON");
  app.add_option("--trace-out", o.trace_out, "write the routing trace drawn (to replay it)");
  app.add_option("--trace-in", o.trace_in,
                 "replay a routing trace written by --trace-out (its steps, layers and tokens "
                 "replace --warmup + --steps, --layers and --tokens)");
  app.add_option("--zipf-s", o.zipf_s, "skew of the expert popularity: 1 / (rank + 1)^s");
  app.add_option("--drift-every", o.drift_every,
                 "every N steps two neighbouring popularity ranks swap in each layer (0 = never)");
  app.add_option("--seed", o.seed, "routing seed");
  app.add_option("--half-life", o.half_life,
                 "popularity: pager_config::popularity_half_life, in acquires of any member");
  add_backend_option(app, o.device.backend);
  add_sim_link_options(app, o.device, "sim: modelled host link, GB/s each way",
                       "sim: modelled per-copy latency");
  app.add_flag("--store-bytes", o.store_bytes,
               "sim: store and move real bytes (default: timing-only, nothing stored)");
  app.add_option("--sim-compute-gbps", o.sim_compute_gbps,
                 "sim: HBM rate of the modelled compute (default: 87x the link)");
  app.add_option("--slab-mib", o.slab_mib, "slab size in MiB, a power of two");
  app.add_option("--page-kib", o.page_kib, "page size in KiB, a power of two up to a slab");
  app.add_option("--chunk-mib", o.chunk_mib, "transfer chunk size in MiB");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.store_bytes) o.device.sim_timing_only = false;
  return -1;
}

}  // namespace htp::bench
