// The planner's model of htp (contract in the header; formulas in docs/planner.md, "The htp
// model").
#include "planner/htp_model.hpp"

#include "shared/belady_min.hpp"
#include "shared/htp_layout.hpp"

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

belady_steps walk_belady(const std::vector<std::uint64_t>& sizes, std::uint64_t capacity,
                         std::size_t warm, std::size_t cycles) {
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

const char* to_string(placement p) noexcept { return p == placement::paged ? "paged" : "resident"; }

const char* to_string(strategy s) noexcept {
  switch (s) {
    case strategy::tensor_parallel: return "tensor-parallel";
    case strategy::swap_and_shard: return "swap-and-shard";
    case strategy::degraded: return "degraded";
  }
  return "?";
}

namespace {

/// One GPU's share of a layer: tensor parallelism and swap-and-shard both keep 1/N of every tensor.
struct layer_shards {
  std::vector<shard> tensors;
  std::uint64_t bytes = 0;       // the shards' bytes
  std::uint64_t rounded = 0;     // page-rounded, as HBM holds them
  std::uint64_t full_bytes = 0;  // the whole layer's bytes
};

/// The shards of one layer of `m` for one of N GPUs, with `bpe` bytes per element, rounded to
/// `page`.
layer_shards shards_of(const model_shape& m, std::uint64_t N, std::uint64_t bpe,
                       std::uint64_t page) {
  layer_shards lay;
  for (const auto& t : layer_tensors(m)) {
    const std::uint64_t b = t.rows * t.cols * bpe;
    shard sh{ceil_div(b, N), htp_tensor_bytes(ceil_div(b, N), page),
             2.0 * static_cast<double>(t.rows * t.cols) / static_cast<double>(N)};
    lay.bytes += sh.bytes;
    lay.rounded += sh.rounded;
    lay.full_bytes += b;
    lay.tensors.push_back(sh);
  }
  return lay;
}

/// @throws htp::invalid_argument for settings out of range.
void check_settings(const htp_settings& s) {
  HTP_EXPECTS(s.link_cap_fraction > 0 && s.link_cap_fraction <= 1, htp::invalid_argument,
              "--link-cap ", s.link_cap_fraction, " must be in (0, 1] (htp's default is 0.8)");
  HTP_EXPECTS(s.copy_latency_us >= 0 && s.collective_latency_us >= 0, htp::invalid_argument,
              "--copy-latency-us and --collective-latency-us must not be negative");
  HTP_EXPECTS(s.compression_ratio > 0 && s.compression_ratio <= 1 && s.decode_gbps > 0,
              htp::invalid_argument, "htp settings: compression_ratio ", s.compression_ratio,
              " must be in (0, 1] and decode_gbps ", s.decode_gbps, " > 0");
  HTP_EXPECTS(s.compression_ratio == 1 || s.how != strategy::degraded, htp::invalid_argument,
              "htp settings: compressed weights cannot be served degraded (there is no raw host "
              "copy to map); use compression_ratio 1 with strategy degraded");
  HTP_EXPECTS(s.chunk_bytes > 0 && s.alloc_page_bytes > 0 && s.interconnect_gbps > 0,
              htp::invalid_argument,
              "--chunk-mib, the page size and --interconnect-gbps must be positive");
}

/// Places the layers in `for_layers` bytes of HBM (what the budget leaves beside the embeddings,
/// the KV cache and swap-and-shard's staging): the resident layers, which are paged, the host tier
/// they need. Returns false (p.why_not set) when the host tier does not hold the paged layers.
bool place_layers(const plan_inputs& in, const htp_settings& s, const layer_shards& lay,
                  std::uint64_t emb, std::uint64_t for_layers, htp_prediction& p,
                  std::vector<bool>& paged_layer) {
  const bool sas = s.how == strategy::swap_and_shard;
  const auto N = static_cast<std::uint64_t>(in.gpus);
  const int L = in.model.layers;
  int R = 0;
  if (sas) {
    // Swap-and-shard: shards resident beside two layers' worth of shards being paged.
    const std::uint64_t shard_layer = lay.bytes + lay.tensors.size() * s.alloc_page_bytes;
    const std::uint64_t window = s.paging_window ? 2 * shard_layer : 0;
    if (for_layers >= window)
      R = static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(L),
                                                   (for_layers - window) / shard_layer));
  } else if (s.where == placement::resident) {
    // As the node bench sizes it: a window of three paged layers plus four slabs stays free.
    R = resident_layers(for_layers, lay.bytes, lay.tensors.size(), s.alloc_page_bytes, s.slab_bytes,
                        L, s.paging_window);
  }
  if (s.how == strategy::degraded && s.where == placement::resident) {
    // Degraded: the rest is read in place from host memory; no window needed.
    R = static_cast<int>(
        std::min<std::uint64_t>(static_cast<std::uint64_t>(L), for_layers / lay.rounded));
  }
  const int P = L - R;
  paged_layer = paged_layers(L, R);
  p.resident_layers = R;
  p.paged_layers = P;
  p.resident_bytes = static_cast<std::uint64_t>(R) * lay.rounded + emb;
  p.paging_capacity = for_layers - static_cast<std::uint64_t>(R) * lay.rounded;
  // One copy per node, or (a process per GPU without a shared tier) one in each of N processes.
  const std::uint64_t copies = in.copies == host_copies::per_process ? N : 1;
  p.host_bytes = static_cast<std::uint64_t>(
      static_cast<double>(P) * static_cast<double>(lay.bytes * N * copies) * s.compression_ratio);
  if (static_cast<double>(p.host_bytes) > in.host_gb * 1e9) {
    p.feasible = false;
    p.why_not =
        "host RAM is too small: the " + std::to_string(P) + " paged layers need " +
        gb_text(static_cast<double>(p.host_bytes)) + " of host tier" +
        (copies > 1 ? " (a private copy in each of the " + std::to_string(copies) + " processes)"
                    : "") +
        ", --host-gb gives " + gb_text(in.host_gb * 1e9) + "; " +
        (copies > 1 ? "hold one copy per node (--host-copies node: htp's shared tier), " : "") +
        "give more host RAM, HBM or GPUs";
    return false;
  }
  return true;
}

/// What one GPU's timeline replays: the layout, the paged tensors and Belady's misses over them,
/// and the rates (bytes per ms).
struct timeline {
  const htp_settings& s;
  const layer_shards& lay;
  const std::vector<bool>& paged_layer;
  const belady_steps& walk;
  std::size_t paged_count;  // paged tensors per step
  bool sas, paging;
  std::uint64_t N;
  int L;
  std::uint64_t kv_layer;  // the KV cache attention reads per layer
  double raw, cap, hbm, flops, tokens;
  double gather_ms;      // swap-and-shard's all-gather of a layer
  double collective_ms;  // the collective per layer (the all-reduce, or the gather)

  /// A copy of `bytes`: chunked, a fixed cost each, under the token bucket's cap. Compressed
  /// (compression_ratio < 1): the wire bytes cross the link while the previous chunk decodes, so
  /// the page-in takes the slower of the two plus one chunk of the faster (the pipeline's fill).
  double copy_ms(std::uint64_t bytes) const {
    const double chunks =
        std::ceil(static_cast<double>(bytes) / static_cast<double>(s.chunk_bytes));
    const double b = static_cast<double>(bytes) * s.compression_ratio;
    const double link = std::max(b / cap, chunks * s.copy_latency_us * 1e-3 + b / raw);
    if (s.compression_ratio >= 1) return link;
    const double decode = static_cast<double>(bytes) / (s.decode_gbps * 1e6);
    return std::max(link, decode) + std::min(link, decode) / chunks;
  }
  /// A kernel reading `bytes` and doing `fl` FLOPs per token: the roofline.
  double kernel_ms(double bytes, double fl) const {
    return std::max(bytes / hbm, fl * tokens / flops);
  }
};

/// Replays one GPU over `warm` + `cycles` steps into p's step, compute and transfer times and
/// paged bytes (means over the `cycles` steady-state steps). The host issues a step's copies when
/// the step starts (the runner synchronizes at each step's end), except the first `lookahead`
/// paged tensors, which the previous step's last acquires prefetched. A copy into evicted memory
/// waits for the last kernel that read the victim; the link does one copy at a time, in schedule
/// order; a kernel waits for its tensor.
void replay(const timeline& t, int warm, int cycles, htp_prediction& p) {
  const htp_settings& s = t.s;
  const auto& layer = t.lay.tensors;
  const int L = t.L;
  const std::size_t n = t.paged_count;
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
    // Paged access k (tensor i of its layer) is needed: its copy if Belady's rule missed it.
    const auto load = [&](std::size_t i) {
      if (t.walk.miss[static_cast<std::size_t>(wc)][k]) {
        double fence = 0;
        for (std::size_t v : t.walk.victims[static_cast<std::size_t>(wc)][k])
          fence = std::max(fence, last_read[v]);
        const double issued = k < lookahead ? prev_start : step_start;
        const double start = std::max({link_free, fence, issued});
        const double ms = t.copy_ms(layer[i].bytes);
        link_free = start + ms;
        ready[k] = link_free;
        step_transfer += ms;
        step_moved += static_cast<double>(layer[i].bytes);
      }
      return ready[k++];
    };
    // Tensor i's kernel once `need` has passed; `paged_k` its paged access index, or none.
    const auto kernel = [&](std::size_t i, bool pl, double need, std::size_t paged_k) {
      const double full =
          t.sas ? static_cast<double>(t.N) : 1.0;  // swap-and-shard runs the whole layer
      double ms = t.kernel_ms(static_cast<double>(layer[i].bytes) * full, layer[i].flops * full);
      // Kernels read degraded weights over the link themselves: no copy engine, no token bucket.
      if (pl && s.how == strategy::degraded)
        ms = std::max(ms, static_cast<double>(layer[i].bytes) / t.raw);
      compute_free = std::max(compute_free, need) + ms;
      step_compute += ms;
      if (paged_k != npos) last_read[paged_k] = compute_free;
    };
    for (int l = 0; l < L; ++l) {
      const bool pl = t.paged_layer[static_cast<std::size_t>(l)];
      const bool paged_here = pl && t.paging;
      if (!t.sas) {
        // Copy and kernel tensor by tensor: a copy into memory a kernel just read waits for it.
        for (std::size_t i = 0; i < layer.size(); ++i) {
          const std::size_t pk = paged_here ? k : npos;
          const double need = paged_here ? load(i) : 0;
          kernel(i, pl, need, pk);
        }
      } else {
        // The layer's shards, then the layer gathered whole into a staging slot freed by the
        // layer four back, then its kernels.
        const std::size_t k0 = k;
        double layer_ready = 0;
        for (std::size_t i = 0; i < layer.size() && paged_here; ++i)
          layer_ready = std::max(layer_ready, load(i));
        // layer_done still holds the previous step's times for layers l.. (0 before the first
        // step).
        const double slot = layer_done[static_cast<std::size_t>((l + L - 4) % L)];
        const double start = std::max({ic_free, layer_ready, slot});
        ic_free = start + t.gather_ms;
        for (std::size_t i = 0; i < layer.size(); ++i)
          kernel(i, pl, ic_free, paged_here ? k0 + i : npos);
      }
      const double kv_ms = static_cast<double>(t.kv_layer) / t.hbm;  // attention reads the KV cache
      compute_free += kv_ms + t.collective_ms * (t.sas ? 0 : 1);
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
  p.wire_bytes_per_step = p.paged_bytes_per_step * s.compression_ratio;
}

}  // namespace

htp_prediction predict_htp(const plan_inputs& in, const htp_settings& s) {
  check_inputs(in);
  check_settings(s);
  const model_shape& m = in.model;
  const auto N = static_cast<std::uint64_t>(in.gpus);
  const std::uint64_t bpe = bytes_per_element(in.weights);
  const bool sas = s.how == strategy::swap_and_shard;
  htp_prediction p;

  // Per GPU: tensor parallelism and swap-and-shard both keep 1/N of every tensor.
  const layer_shards lay = shards_of(m, N, bpe, s.alloc_page_bytes);
  const std::uint64_t emb =
      s.embeddings
          ? htp_tensor_bytes(ceil_div(embedding_parameters(m) * bpe, N), s.alloc_page_bytes)
          : 0;
  const std::uint64_t kv_dim = static_cast<std::uint64_t>(m.kv_heads) * (m.hidden / m.heads);
  const std::uint64_t kv_layer_all = 2 * kv_dim * bpe * static_cast<std::uint64_t>(in.batch) *
                                     static_cast<std::uint64_t>(in.context);
  // Swap-and-shard runs a whole layer per GPU on its own batch: its KV cache is not split.
  const std::uint64_t kv_layer = sas ? kv_layer_all : ceil_div(kv_layer_all, N);
  p.kv_bytes = kv_layer * static_cast<std::uint64_t>(m.layers);

  // The HBM budget the pager gets.
  const double exposed = (s.hbm_exposed_gb > 0 ? s.hbm_exposed_gb : in.hbm_gb) * 1e9;
  // The KV cache lives inside the budget (as the stream bench registers it), counted below.
  p.hbm_budget_bytes =
      s.hbm_budget_bytes > 0 ? s.hbm_budget_bytes : exposed * (1.0 - in.headroom_fraction);
  const auto budget = static_cast<std::uint64_t>(std::max(0.0, p.hbm_budget_bytes));
  const std::uint64_t fixed = emb + p.kv_bytes;
  // Swap-and-shard's staging: two slots of two whole layers.
  const std::uint64_t staging = sas ? 4 * htp_tensor_bytes(lay.full_bytes, s.alloc_page_bytes) : 0;

  // Placement: which layers' shards stay device-resident.
  const int L = m.layers;
  if (budget < fixed + staging) {
    p.feasible = false;
    p.why_not = "the HBM budget (" + gb_text(static_cast<double>(budget)) +
                ") holds less than the embeddings, KV cache" +
                std::string(sas ? " and staging" : "") + " (" +
                gb_text(static_cast<double>(fixed + staging)) + ")";
    return p;
  }
  std::vector<bool> paged_layer;
  if (!place_layers(in, s, lay, emb, budget - fixed - staging, p, paged_layer)) return p;
  const int P = p.paged_layers;

  // The paged tensors, in schedule order, and Belady's steady state over them.
  std::vector<std::uint64_t> sizes;
  for (int l = 0; l < L; ++l) {
    if (!paged_layer[static_cast<std::size_t>(l)]) continue;
    for (const auto& sh : lay.tensors) sizes.push_back(sh.rounded);
  }
  const bool paging = P > 0 && s.how != strategy::degraded;
  if (paging) {
    const std::uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
    if (p.paging_capacity < 2 * largest) {
      p.feasible = false;
      p.why_not = "the HBM left for paging (" + gb_text(static_cast<double>(p.paging_capacity)) +
                  ") is under two of the largest tensor (" +
                  gb_text(2.0 * static_cast<double>(largest)) +
                  "): serve it degraded (from host memory), or give more HBM or GPUs";
      return p;
    }
  }
  const int warm = 2, cycles = std::clamp(static_cast<int>(sizes.size()) - 1, 1, 6);
  const belady_steps walk =
      paging ? walk_belady(sizes, p.paging_capacity, warm, static_cast<std::size_t>(cycles))
             : belady_steps{};

  // Rates, in bytes per ms.
  const double raw = in.link_gbps * 1e6;
  const double peak = (s.link_peak_gbps > 0 ? s.link_peak_gbps : in.link_gbps) * 1e6;
  const double tokens = static_cast<double>(in.batch) *
                        (in.mode == phase::prefill ? static_cast<double>(in.prompt_tokens) : 1.0);
  timeline t{s,
             lay,
             paged_layer,
             walk,
             sizes.size(),
             sas,
             paging,
             N,
             L,
             kv_layer,
             raw,
             s.link_cap_fraction * peak,
             in.hbm_gbps * 1e6,
             in.dense_tflops * 1e9,
             tokens,
             0,
             0};
  p.link_gbps =
      s.chunk_bytes > 0 ? static_cast<double>(s.chunk_bytes) / t.copy_ms(s.chunk_bytes) / 1e6 : 0;
  const double ic = s.interconnect_gbps * 1e6;
  const double act = tokens * static_cast<double>(m.hidden) * 2;  // the activations all-reduced
  if (N > 1 && !sas) {
    p.collective_ms_per_layer =
        2.0 * act * static_cast<double>(N - 1) / static_cast<double>(N) / ic +
        s.collective_latency_us * 1e-3;
  }
  t.gather_ms = sas && N > 1 ? static_cast<double>(lay.full_bytes) * static_cast<double>(N - 1) /
                                       static_cast<double>(N) / ic +
                                   s.collective_latency_us * 1e-3
                             : 0;
  if (sas) p.collective_ms_per_layer = t.gather_ms;
  t.collective_ms = p.collective_ms_per_layer;

  // The timeline of one GPU over warm + cycles steps.
  replay(t, warm, cycles, p);
  if (s.how == strategy::degraded) {
    p.paged_bytes_per_step = static_cast<double>(P) * static_cast<double>(lay.bytes);
    p.wire_bytes_per_step = p.paged_bytes_per_step;
  }
  p.tokens_per_second = p.step_ms > 0 ? static_cast<double>(in.batch) *
                                            (sas ? static_cast<double>(N) : 1.0) / (p.step_ms / 1e3)
                                      : 0;
  p.meets_budget = p.step_ms <= in.budget_ms;
  return p;
}

}  // namespace htp::bench
