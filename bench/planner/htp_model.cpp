// The planner's model of htp (contract in the header; formulas in docs/planner.md, "The htp model").
#include "planner/htp_model.hpp"

#include "shared/htp_layout.hpp"
#include "shared/belady_min.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

namespace htp::bench {

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

/// One GPU's view of one tensor of a layer.
struct shard {
  std::uint64_t bytes = 0;    // what moves and what a kernel reads
  std::uint64_t rounded = 0;  // what it takes in HBM
  double flops = 0;           // per token
};

/// Steady-state misses of Belady's rule on the cyclic sweep of `sizes` through `capacity` bytes:
/// for `cycles` sweeps after `warm` that settle the cache, whether each access missed and which
/// tensors it evicted (shared/belady_min.hpp's walk, kept).
struct belady_steps {
  std::vector<std::vector<bool>> miss;                         // [cycle][access]
  std::vector<std::vector<std::vector<std::size_t>>> victims;  // [cycle][access] -> tensors
};

belady_steps walk_belady(const std::vector<std::uint64_t>& sizes, std::uint64_t capacity, std::size_t warm,
                         std::size_t cycles) {
  belady_steps w;
  w.miss.assign(cycles, std::vector<bool>(sizes.size(), false));
  w.victims.assign(cycles, std::vector<std::vector<std::size_t>>(sizes.size()));
  belady_walk(sizes, capacity, warm + cycles,
              [&](std::size_t c, std::size_t i, const std::vector<std::size_t>& victims) {
                if (c < warm) return;
                w.miss[c - warm][i] = true;
                w.victims[c - warm][i] = victims;
              });
  return w;
}

std::string gb_text(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GB", bytes / 1e9);
  return b;
}

}  // namespace

const char* to_string(placement p) noexcept {
  return p == placement::paged ? "paged" : "resident";
}

const char* to_string(strategy s) noexcept {
  switch (s) {
    case strategy::tensor_parallel: return "tensor-parallel";
    case strategy::swap_and_shard: return "swap-and-shard";
    case strategy::degraded: return "degraded";
  }
  return "?";
}

htp_prediction predict_htp(const plan_inputs& in, const htp_settings& s) {
  check_inputs(in);
  HTP_EXPECTS(s.link_cap_fraction > 0 && s.link_cap_fraction <= 1, htp::invalid_argument,
              "--link-cap ", s.link_cap_fraction, " must be in (0, 1] (htp's default is 0.8)");
  HTP_EXPECTS(s.copy_latency_us >= 0 && s.collective_latency_us >= 0, htp::invalid_argument,
              "--copy-latency-us and --collective-latency-us must not be negative");
  HTP_EXPECTS(s.chunk_bytes > 0 && s.alloc_page_bytes > 0 && s.interconnect_gbps > 0,
              htp::invalid_argument, "--chunk-mib, the page size and --interconnect-gbps must be positive");
  const model_shape& m = in.model;
  const auto N = static_cast<std::uint64_t>(in.gpus);
  const std::uint64_t bpe = bytes_per_element(in.weights);
  const bool sas = s.how == strategy::swap_and_shard;
  htp_prediction p;

  // Per GPU: tensor parallelism and swap-and-shard both keep 1/N of every tensor.
  std::vector<shard> layer;
  std::uint64_t layer_shard_bytes = 0, layer_shard_rounded = 0, layer_full_bytes = 0;
  for (const auto& t : layer_tensors(m)) {
    const std::uint64_t b = t.rows * t.cols * bpe;
    shard sh{ceil_div(b, N), htp_tensor_bytes(ceil_div(b, N), s.alloc_page_bytes),
             2.0 * static_cast<double>(t.rows * t.cols) / static_cast<double>(N)};
    layer_shard_bytes += sh.bytes;
    layer_shard_rounded += sh.rounded;
    layer_full_bytes += b;
    layer.push_back(sh);
  }
  const std::uint64_t emb = s.embeddings ? htp_tensor_bytes(ceil_div(embedding_parameters(m) * bpe, N), s.alloc_page_bytes) : 0;
  const std::uint64_t kv_dim = static_cast<std::uint64_t>(m.kv_heads) * (m.hidden / m.heads);
  const std::uint64_t kv_layer_all = 2 * kv_dim * bpe * static_cast<std::uint64_t>(in.batch) *
                                     static_cast<std::uint64_t>(in.context);
  // Swap-and-shard runs a whole layer per GPU on its own batch: its KV cache is not split.
  const std::uint64_t kv_layer = sas ? kv_layer_all : ceil_div(kv_layer_all, N);
  p.kv_bytes = kv_layer * static_cast<std::uint64_t>(m.layers);

  // The HBM budget the pager gets.
  const double exposed = (s.hbm_exposed_gb > 0 ? s.hbm_exposed_gb : in.hbm_gb) * 1e9;
  // The KV cache lives inside the budget (as the stream bench registers it), counted below.
  p.hbm_budget_bytes = s.hbm_budget_bytes > 0 ? s.hbm_budget_bytes : exposed * (1.0 - in.headroom_fraction);
  const auto budget = static_cast<std::uint64_t>(std::max(0.0, p.hbm_budget_bytes));
  const std::uint64_t fixed = emb + p.kv_bytes;
  // Swap-and-shard's staging: two slots of two whole layers.
  const std::uint64_t staging = sas ? 4 * htp_tensor_bytes(layer_full_bytes, s.alloc_page_bytes) : 0;

  // Placement: which layers' shards stay device-resident.
  const int L = m.layers;
  if (budget < fixed + staging) {
    p.feasible = false;
    p.why_not = "the HBM budget (" + gb_text(static_cast<double>(budget)) + ") holds less than the embeddings, KV cache" +
                std::string(sas ? " and staging" : "") + " (" + gb_text(static_cast<double>(fixed + staging)) + ")";
    return p;
  }
  const std::uint64_t for_layers = budget - fixed - staging;
  int R = 0;
  if (sas) {
    // Swap-and-shard: shards resident beside two layers' worth of shards being paged.
    const std::uint64_t shard_layer = layer_shard_bytes + layer.size() * s.alloc_page_bytes;
    const std::uint64_t window = s.paging_window ? 2 * shard_layer : 0;
    if (for_layers >= window) R = static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(L), (for_layers - window) / shard_layer));
  } else if (s.where == placement::resident) {
    // As the node bench sizes it: a window of three paged layers plus four slabs stays free.
    R = resident_layers(for_layers, layer_shard_bytes, layer.size(), s.alloc_page_bytes, s.slab_bytes, L,
                        s.paging_window);
  }
  if (s.how == strategy::degraded && s.where == placement::resident) {
    // Degraded: the rest is read in place from host memory; no window needed.
    R = static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(L), for_layers / layer_shard_rounded));
  }
  const int P = L - R;
  const std::vector<bool> paged_layer = paged_layers(L, R);
  p.resident_layers = R;
  p.paged_layers = P;
  p.resident_bytes = static_cast<std::uint64_t>(R) * layer_shard_rounded + emb;
  p.paging_capacity = for_layers - static_cast<std::uint64_t>(R) * layer_shard_rounded;
  p.host_bytes = static_cast<std::uint64_t>(P) * layer_shard_bytes * N;
  if (static_cast<double>(p.host_bytes) > in.host_gb * 1e9) {
    p.feasible = false;
    p.why_not = "host RAM is too small: the " + std::to_string(P) + " paged layers need " +
                gb_text(static_cast<double>(p.host_bytes)) + " of host tier, --host-gb gives " +
                gb_text(in.host_gb * 1e9) + "; give more host RAM, HBM or GPUs";
    return p;
  }

  // The paged tensors, in schedule order, and Belady's steady state over them.
  std::vector<std::uint64_t> sizes;
  for (int l = 0; l < L; ++l) {
    if (!paged_layer[static_cast<std::size_t>(l)]) continue;
    for (const auto& sh : layer) sizes.push_back(sh.rounded);
  }
  const bool paging = P > 0 && s.how != strategy::degraded;
  if (paging) {
    const std::uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
    if (p.paging_capacity < 2 * largest) {
      p.feasible = false;
      p.why_not = "the HBM left for paging (" + gb_text(static_cast<double>(p.paging_capacity)) +
                  ") is under two of the largest tensor (" + gb_text(2.0 * static_cast<double>(largest)) +
                  "): serve it degraded (from host memory), or give more HBM or GPUs";
      return p;
    }
  }
  const int warm = 2, cycles = std::clamp(static_cast<int>(sizes.size()) - 1, 1, 6);
  const belady_steps walk = paging ? walk_belady(sizes, p.paging_capacity, warm, static_cast<std::size_t>(cycles))
                                   : belady_steps{};

  // Rates, in bytes per ms.
  const double raw = in.link_gbps * 1e6;
  const double peak = (s.link_peak_gbps > 0 ? s.link_peak_gbps : in.link_gbps) * 1e6;
  const double cap = s.link_cap_fraction * peak;
  const auto copy_ms = [&](std::uint64_t bytes) {
    const double chunks = std::ceil(static_cast<double>(bytes) / static_cast<double>(s.chunk_bytes));
    const double b = static_cast<double>(bytes);
    return std::max(b / cap, chunks * s.copy_latency_us * 1e-3 + b / raw);
  };
  p.link_gbps = s.chunk_bytes > 0 ? static_cast<double>(s.chunk_bytes) / copy_ms(s.chunk_bytes) / 1e6 : 0;
  const double hbm = in.hbm_gbps * 1e6, flops = in.dense_tflops * 1e9;  // per ms
  const double tokens = static_cast<double>(in.batch) *
                        (in.mode == phase::prefill ? static_cast<double>(in.prompt_tokens) : 1.0);
  const auto kernel_ms = [&](double bytes, double fl) { return std::max(bytes / hbm, fl * tokens / flops); };
  const double ic = s.interconnect_gbps * 1e6;
  const double act = tokens * static_cast<double>(m.hidden) * 2;  // the activations all-reduced
  if (N > 1 && !sas) {
    p.collective_ms_per_layer = 2.0 * act * static_cast<double>(N - 1) / static_cast<double>(N) / ic +
                                s.collective_latency_us * 1e-3;
  }
  const double gather_ms = sas && N > 1 ? static_cast<double>(layer_full_bytes) * static_cast<double>(N - 1) /
                                                  static_cast<double>(N) / ic + s.collective_latency_us * 1e-3
                                        : 0;
  if (sas) p.collective_ms_per_layer = gather_ms;

  // The timeline of one GPU over warm + cycles steps. The host issues a step's copies when the
  // step starts (the runner synchronizes at each step's end), except the first `lookahead` paged
  // tensors, which the previous step's last acquires prefetched. A copy into evicted memory waits
  // for the last kernel that read the victim; the link does one copy at a time, in schedule order;
  // a kernel waits for its tensor.
  const std::size_t n = sizes.size();
  constexpr std::size_t npos = static_cast<std::size_t>(-1);
  const std::size_t lookahead = s.lookahead > 0 ? s.lookahead : 2 * layer.size();
  std::vector<double> last_read(n, 0), ready(n, 0), step_end;
  std::vector<double> layer_done(static_cast<std::size_t>(L), 0);
  double link_free = 0, ic_free = 0, compute_free = 0, step_start = 0, prev_start = 0;
  double compute_total = 0, transfer_total = 0, moved = 0;
  for (int c = 0; c < warm + cycles; ++c) {
    std::size_t k = 0;  // paged access index in this sweep
    double step_compute = 0, step_transfer = 0, step_moved = 0;
    const int wc = c < warm ? 0 : c - warm;  // warm-up sweeps replay the first measured pattern
    // Paged access k (tensor t of its layer) is needed: its copy if Belady's rule missed it.
    const auto load = [&](std::size_t t) {
      if (walk.miss[static_cast<std::size_t>(wc)][k]) {
        double fence = 0;
        for (std::size_t v : walk.victims[static_cast<std::size_t>(wc)][k]) fence = std::max(fence, last_read[v]);
        const double issued = k < lookahead ? prev_start : step_start;
        const double start = std::max({link_free, fence, issued});
        const double ms = copy_ms(layer[t].bytes);
        link_free = start + ms;
        ready[k] = link_free;
        step_transfer += ms;
        step_moved += static_cast<double>(layer[t].bytes);
      }
      return ready[k++];
    };
    // Tensor t's kernel once `need` has passed; `paged_k` its paged access index, or none.
    const auto kernel = [&](std::size_t t, bool pl, double need, std::size_t paged_k) {
      const double full = sas ? static_cast<double>(N) : 1.0;  // swap-and-shard runs the whole layer
      double ms = kernel_ms(static_cast<double>(layer[t].bytes) * full, layer[t].flops * full);
      // Kernels read degraded weights over the link themselves: no copy engine, no token bucket.
      if (pl && s.how == strategy::degraded) ms = std::max(ms, static_cast<double>(layer[t].bytes) / raw);
      compute_free = std::max(compute_free, need) + ms;
      step_compute += ms;
      if (paged_k != npos) last_read[paged_k] = compute_free;
    };
    for (int l = 0; l < L; ++l) {
      const bool pl = paged_layer[static_cast<std::size_t>(l)];
      const bool paged_here = pl && paging;
      if (!sas) {
        // Copy and kernel tensor by tensor: a copy into memory a kernel just read waits for it.
        for (std::size_t t = 0; t < layer.size(); ++t) {
          const std::size_t pk = paged_here ? k : npos;
          const double need = paged_here ? load(t) : 0;
          kernel(t, pl, need, pk);
        }
      } else {
        // The layer's shards, then the layer gathered whole into a staging slot freed by the
        // layer four back, then its kernels.
        const std::size_t k0 = k;
        double layer_ready = 0;
        for (std::size_t t = 0; t < layer.size() && paged_here; ++t) layer_ready = std::max(layer_ready, load(t));
        // layer_done still holds the previous step's times for layers l.. (0 before the first step).
        const double slot = layer_done[static_cast<std::size_t>((l + L - 4) % L)];
        const double start = std::max({ic_free, layer_ready, slot});
        ic_free = start + gather_ms;
        for (std::size_t t = 0; t < layer.size(); ++t) kernel(t, pl, ic_free, paged_here ? k0 + t : npos);
      }
      const double kv_ms = static_cast<double>(kv_layer) / hbm;  // attention reads the KV cache
      compute_free += kv_ms + p.collective_ms_per_layer * (sas ? 0 : 1);
      step_compute += kv_ms;
      layer_done[static_cast<std::size_t>(l)] = compute_free;
    }
    step_end.push_back(compute_free);
    prev_start = step_start;
    step_start = compute_free;
    if (c >= warm) {
      compute_total += step_compute;
      transfer_total += step_transfer;
      moved += step_moved;
    }
  }
  double step_sum = 0;
  for (int c = warm; c < warm + cycles; ++c) {
    step_sum += step_end[static_cast<std::size_t>(c)] - step_end[static_cast<std::size_t>(c - 1)];
  }
  p.step_ms = step_sum / cycles;
  p.compute_ms = compute_total / cycles;
  p.transfer_ms = transfer_total / cycles;
  p.paged_bytes_per_step = moved / cycles;
  if (s.how == strategy::degraded) p.paged_bytes_per_step = static_cast<double>(P) * static_cast<double>(layer_shard_bytes);
  p.tokens_per_second = p.step_ms > 0 ? static_cast<double>(in.batch) * (sas ? static_cast<double>(N) : 1.0) /
                                            (p.step_ms / 1e3)
                                      : 0;
  p.meets_budget = p.step_ms <= in.budget_ms;
  return p;
}

}  // namespace htp::bench
