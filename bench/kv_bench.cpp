// A paged KV cache at vLLM's block counts: 16-token blocks of Llama-3.1-8B's KV cache
// (one layer's K and V per block: 16 x 8 heads x 128 x 2 x bf16 = 64 KiB), a pool of 100,000
// blocks in caller memory (lent to the pager, never copied), and a batch of sequences that grow by
// one token per decode step, finish and are replaced. Each decode step walks the 32 layers and, for
// each sequence, acquires its block table for that layer in one call and releases it (the last
// block dirty: the new token was written there). Reports host microseconds per decode step spent in
// pager calls, bytes moved, faults, write-backs, side by side with the same steps done one call
// per block (the naive way). sim backend; the host link runs at memcpy speed.
#include <htp/pager.hpp>
#include <htp/sim_device.hpp>

#include "common/bench_device.hpp"

#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/mman.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct sequence {
  std::size_t tokens = 0;
  std::size_t target = 0;
  std::vector<std::vector<htp::tensor_handle>> blocks;  // [layer][block]
  std::vector<std::vector<std::size_t>> slots;          // pool slots, same shape
};

struct options {
  std::size_t pool_blocks = 100'000;
  std::size_t batch = 16;
  std::size_t steps = 8;
  std::size_t min_tokens = 512, max_tokens = 3072;
  double hbm_gib = 3.0;
  std::string json;
};

constexpr std::size_t layers = 32;
constexpr std::size_t block_tokens = 16;
constexpr std::size_t block_bytes = block_tokens * 8 * 128 * 2 * 2;  // K and V, bf16

struct kv_cache {
  htp::pager& pager;
  char* pool;
  std::vector<std::size_t> free_slots;
  std::uint64_t registered = 0;

  htp::tensor_handle new_block(std::size_t& slot) {
    slot = free_slots.back();
    free_slots.pop_back();
    ++registered;
    return pager.register_tensor_at("kv", block_bytes, htp::tensor_kind::mutable_state,
                                    pool + slot * block_bytes);
  }
  void drop(sequence& s) {
    for (std::size_t l = 0; l < layers; ++l) {
      for (std::size_t b = 0; b < s.blocks[l].size(); ++b) {
        pager.unregister_tensor(s.blocks[l][b]);
        free_slots.push_back(s.slots[l][b]);
      }
    }
    s = sequence{};
  }
  /// Starts a sequence with a prompt: its blocks are registered and written once (prefill).
  bool start(sequence& s, std::size_t prompt, std::size_t target, htp::stream& compute) {
    const std::size_t per_layer = (prompt + block_tokens - 1) / block_tokens;
    if (free_slots.size() < per_layer * layers) return false;
    s.tokens = prompt;
    s.target = target;
    s.blocks.assign(layers, {});
    s.slots.assign(layers, {});
    for (std::size_t l = 0; l < layers; ++l) {
      for (std::size_t b = 0; b < per_layer; ++b) {
        std::size_t slot;
        s.blocks[l].push_back(new_block(slot));
        s.slots[l].push_back(slot);
      }
      pager.acquire(s.blocks[l], compute);
      pager.release(s.blocks[l], compute, /*dirty=*/true);
    }
    return true;
  }
};

struct mode_result {
  double host_us_per_step = 0;
  double wall_ms_per_step = 0;
  double block_acquires_per_step = 0;
  double calls_per_step = 0;
  htp::pager_metrics delta;
};

mode_result run_steps(kv_cache& kv, std::vector<sequence>& seqs, const options& o, bool lists,
                      htp::stream& compute, std::mt19937& rng) {
  auto& p = kv.pager;
  const auto before = p.metrics();
  double host_ns = 0;
  std::uint64_t acquires = 0, calls = 0;
  const auto wall0 = clock_type::now();
  std::vector<htp::tensor_handle> table;
  for (std::size_t step = 0; step < o.steps; ++step) {
    for (std::size_t l = 0; l < layers; ++l) {
      for (auto& s : seqs) {
        if (s.blocks.empty()) continue;
        auto& blocks = s.blocks[l];
        table.assign(blocks.begin(), blocks.end() - 1);
        const auto t0 = clock_type::now();
        if (lists) {
          p.acquire(blocks, compute);
          p.release(table, compute);
          p.release(blocks.back(), compute, /*dirty=*/true);
          calls += 3;
        } else {
          for (auto h : blocks) p.acquire(h, compute);
          for (auto h : table) p.release(h, compute);
          p.release(blocks.back(), compute, /*dirty=*/true);
          calls += 2 * blocks.size();
        }
        host_ns += std::chrono::duration<double, std::nano>(clock_type::now() - t0).count();
        acquires += blocks.size();
      }
    }
    // One token more per sequence: a new block every 16 tokens; finished sequences are replaced.
    for (auto& s : seqs) {
      if (s.blocks.empty()) continue;
      ++s.tokens;
      if (s.tokens >= s.target) {
        kv.drop(s);
        std::uniform_int_distribution<std::size_t> len(o.min_tokens, o.max_tokens);
        const std::size_t prompt = len(rng) / 2;
        kv.start(s, prompt, prompt + len(rng) / 2, compute);
      } else if (s.tokens % block_tokens == 1) {
        for (std::size_t l = 0; l < layers; ++l) {
          std::size_t slot;
          s.blocks[l].push_back(kv.new_block(slot));
          s.slots[l].push_back(slot);
        }
      }
    }
  }
  compute.synchronize();
  const double wall_ms =
      std::chrono::duration<double, std::milli>(clock_type::now() - wall0).count();
  const auto after = p.metrics();
  mode_result r;
  r.host_us_per_step = host_ns / 1e3 / static_cast<double>(o.steps);
  r.wall_ms_per_step = wall_ms / static_cast<double>(o.steps);
  r.block_acquires_per_step = static_cast<double>(acquires) / static_cast<double>(o.steps);
  r.calls_per_step = static_cast<double>(calls) / static_cast<double>(o.steps);
  r.delta = metrics_delta(after, before);
  return r;
}

nlohmann::json to_json(const mode_result& r, std::size_t steps) {
  const auto per_step = [&](std::uint64_t v) {
    return static_cast<double>(v) / static_cast<double>(steps);
  };
  return {
      {"host_us_per_step", r.host_us_per_step},
      {"wall_ms_per_step", r.wall_ms_per_step},
      {"block_acquires_per_step", r.block_acquires_per_step},
      {"pager_calls_per_step", r.calls_per_step},
      {"host_ns_per_block", r.host_us_per_step * 1e3 / std::max(1.0, r.block_acquires_per_step)},
      {"page_in_bytes_per_step", per_step(r.delta.page_in_bytes)},
      {"faults_per_step", per_step(r.delta.faults)},
      {"write_back_bytes_per_step", per_step(r.delta.write_back_bytes)},
      {"evictions_per_step", per_step(r.delta.evictions)}};
}

/// Parses argv into `o`. Returns -1 to go on, or the exit code to return now (0 after --help,
/// non-zero for a bad command line, which it has reported).
int parse_options(int argc, char** argv, options& o) {
  CLI::App app{"htp paged KV cache benchmark (sim): block tables at vLLM's block counts"};
  app.add_option("--blocks", o.pool_blocks, "blocks in the pool (64 KiB each)");
  app.add_option("--batch", o.batch, "sequences decoding at once");
  app.add_option("--steps", o.steps, "decode steps measured per mode");
  app.add_option("--min-tokens", o.min_tokens, "shortest sequence (prompt + output)");
  app.add_option("--max-tokens", o.max_tokens, "longest sequence (prompt + output)");
  app.add_option("--hbm-gib", o.hbm_gib, "HBM budget for the KV cache, GiB");
  app.add_option("--json", o.json, "write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const int rc = parse_options(argc, argv, o); rc >= 0) return rc;

  const std::size_t pool_bytes = o.pool_blocks * block_bytes;
  void* pool = ::mmap(nullptr, pool_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (pool == MAP_FAILED) {
    fmt::print(stderr, "cannot map {} bytes for the block pool\n", pool_bytes);
    return 1;
  }
  const auto hbm =
      static_cast<std::size_t>(o.hbm_gib * double(std::size_t{1} << 30)) / (64 << 20) * (64 << 20);
  htp::bench::device_options d;
  d.backend = "sim";
  d.sim_memory_bytes = hbm + (256 << 20);
  auto dev = htp::bench::make_bench_device(d);
  int rc = 0;
  {
    htp::pager_config c;
    c.hbm_budget_bytes = hbm;
    c.host_budget_bytes = 0;  // every block lives in the caller's pool
    c.h2d.link_bytes_per_second = 25'000'000'000;
    c.h2d.unlimited = true;
    c.d2h.link_bytes_per_second = 25'000'000'000;
    c.d2h.unlimited = true;
    htp::pager p(*dev, c);
    htp::stream compute(*dev);
    p.add_host_region(pool, pool_bytes, htp::host_region_kind::pageable);
    kv_cache kv{p, static_cast<char*>(pool), {}, 0};
    for (std::size_t i = o.pool_blocks; i-- > 0;) kv.free_slots.push_back(i);
    std::mt19937 rng(1);
    std::vector<sequence> seqs(o.batch);
    std::uniform_int_distribution<std::size_t> len(o.min_tokens, o.max_tokens);
    for (auto& s : seqs) {
      const std::size_t target = len(rng);
      std::uniform_int_distribution<std::size_t> at(target / 4, target - 1);
      const std::size_t now = at(rng);  // sequences at different points of their lives
      if (!kv.start(s, now, target, compute)) {
        fmt::print(stderr, "the pool of {} blocks cannot hold the batch; use --blocks or --batch\n",
                   o.pool_blocks);
        return 1;
      }
    }
    compute.synchronize();
    p.synchronize();
    const auto naive = run_steps(kv, seqs, o, /*lists=*/false, compute, rng);
    const auto listed = run_steps(kv, seqs, o, /*lists=*/true, compute, rng);
    const auto m = p.metrics();
    fmt::print("htp-kv-bench (sim): {}-block pool ({:.1f} GiB), {} sequences, {} layers, HBM "
               "{:.1f} GiB, {} steps per mode\n",
               o.pool_blocks, double(pool_bytes) / double(1 << 30), o.batch, layers,
               double(hbm) / double(1 << 30), o.steps);
    fmt::print("{:<22} {:>14} {:>12} {:>14} {:>12} {:>14} {:>14}\n", "mode", "host us/step",
               "ns/block", "blocks/step", "calls/step", "page-in MB/step", "write-back MB/step");
    for (const auto& [name, r] :
         {std::pair<const char*, const mode_result&>{"one call per block", naive},
          std::pair<const char*, const mode_result&>{"block tables (lists)", listed}}) {
      fmt::print("{:<22} {:14.0f} {:12.0f} {:14.0f} {:12.0f} {:14.1f} {:14.1f}\n", name,
                 r.host_us_per_step,
                 r.host_us_per_step * 1e3 / std::max(1.0, r.block_acquires_per_step),
                 r.block_acquires_per_step, r.calls_per_step,
                 double(r.delta.page_in_bytes) / 1e6 / double(o.steps),
                 double(r.delta.write_back_bytes) / 1e6 / double(o.steps));
    }
    fmt::print("registered blocks now: {}; host memory htp holds: {} bytes of its own tier; caller "
               "pool: {} bytes\n",
               static_cast<unsigned long long>(m.registered_tensors),
               static_cast<unsigned long long>(m.host.capacity_bytes),
               static_cast<unsigned long long>(m.caller_host_bytes));
    if (!o.json.empty()) {
      nlohmann::json j{{"bench", "htp-kv-bench"},
                       {"backend", "sim"},
                       {"pool_blocks", o.pool_blocks},
                       {"block_bytes", block_bytes},
                       {"batch", o.batch},
                       {"layers", layers},
                       {"steps_per_mode", o.steps},
                       {"hbm_budget_bytes", hbm},
                       {"registered_blocks", m.registered_tensors},
                       {"host_tier_bytes", m.host.capacity_bytes},
                       {"caller_host_bytes", m.caller_host_bytes},
                       {"one_call_per_block", to_json(naive, o.steps)},
                       {"block_tables", to_json(listed, o.steps)}};
      std::ofstream(o.json) << j.dump(2) << "\n";
    }
    for (auto& s : seqs) {
      if (!s.blocks.empty()) kv.drop(s);
    }
    p.remove_host_region(pool);
  }
  ::munmap(pool, pool_bytes);
  return rc;
}
