// The capacity planner's arithmetic. Every formula here is written out, with the 175B hand
// calculation, in docs/planner.md; keep the two in step.
#include "planner/planner.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace htp::bench {

namespace {

constexpr int batch_search_limit = 1 << 16;

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

double gb(std::uint64_t bytes) { return static_cast<double>(bytes) / 1e9; }

std::string fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// One evaluation of the model; `error` set instead of throwing so the searches can probe.
struct evaluation {
  plan_result r;
  std::string error;
};

/// Parameters of one layer that belong to its experts (0 for a dense model).
std::uint64_t expert_parameters(const model_shape& m) {
  if (m.experts == 1) return 0;
  std::uint64_t n = 0;
  const std::string prefix = "moe.experts.";
  for (const auto& t : layer_tensors(m)) {
    if (t.name.compare(0, prefix.size(), prefix) == 0) n += t.rows * t.cols;
  }
  return n;
}

/// The sizes: parameters, bytes per layer and per GPU, pages, the KV cache, the headroom and the
/// pages left for weights.
void size_model(const plan_inputs& in, plan_result& r) {
  const model_shape& m = in.model;
  const std::uint64_t bpe = bytes_per_element(in.weights);
  const auto gpus = static_cast<std::uint64_t>(in.gpus);
  const std::uint64_t page = in.page_bytes;
  r.parameters = total_parameters(m);
  r.layer_bytes = layer_parameters(m) * bpe;
  r.layer_bytes_per_gpu = ceil_div(r.layer_bytes, gpus);
  r.pages_per_layer = ceil_div(r.layer_bytes_per_gpu, page);
  r.embedding_bytes_per_gpu = ceil_div(embedding_parameters(m) * bpe, gpus);
  r.embedding_pages = ceil_div(r.embedding_bytes_per_gpu, page);
  r.total_bytes = r.parameters * bpe;
  r.total_bytes_per_gpu =
      static_cast<std::uint64_t>(m.layers) * r.layer_bytes_per_gpu + r.embedding_bytes_per_gpu;
  const std::uint64_t kv_dim = static_cast<std::uint64_t>(m.kv_heads) * (m.hidden / m.heads);
  r.kv_bytes_per_gpu =
      ceil_div(static_cast<std::uint64_t>(m.layers) * 2 * kv_dim * bpe *
                   static_cast<std::uint64_t>(in.batch) * static_cast<std::uint64_t>(in.context),
               gpus);
  const double hbm_bytes = in.hbm_gb * 1e9;
  r.headroom_bytes_per_gpu =
      static_cast<std::uint64_t>(in.headroom_fraction * hbm_bytes) + r.kv_bytes_per_gpu;
  const double for_weights = hbm_bytes - static_cast<double>(r.headroom_bytes_per_gpu);
  r.weight_pages =
      for_weights <= 0
          ? 0
          : static_cast<std::uint64_t>(std::floor(for_weights / static_cast<double>(page)));
}

/// Prices one step of a placed model: the streamed layers' transfer (page by page, or read over
/// the link when degraded) and the compute's roofline, overlapped or not.
void price_step(const plan_inputs& in, plan_result& r) {
  const model_shape& m = in.model;
  const std::uint64_t bpe = bytes_per_element(in.weights);
  const auto gpus = static_cast<std::uint64_t>(in.gpus);
  const std::uint64_t page = in.page_bytes;
  const auto layers = static_cast<std::uint64_t>(m.layers);
  // Transfer: streamed layers move page by page each step.
  if (in.page_ms > 0) {
    r.page_ms = in.page_ms;
    r.link_gbps = static_cast<double>(page) / (in.page_ms * 1e-3) / 1e9;
    r.link_source = "--page-ms";
  } else {
    r.link_gbps = in.link_gbps;
    r.link_source = in.link_source;
    r.page_ms = static_cast<double>(page) / (in.link_gbps * 1e9) * 1e3;
  }
  r.transfer_ms = r.degraded
                      ? static_cast<double>(r.paged_bytes_per_step) / (r.link_gbps * 1e9) * 1e3
                      : static_cast<double>(r.paged_pages_per_step) * r.page_ms;

  // Compute: a roofline, max of bytes read / HBM bandwidth and FLOPs / tensor-core rate.
  const double tokens = static_cast<double>(in.batch) *
                        (in.mode == phase::prefill ? static_cast<double>(in.prompt_tokens) : 1.0);
  const std::uint64_t layer_params = layer_parameters(m);
  const std::uint64_t all_experts = expert_parameters(m);
  double touched = 1.0;  // fraction of a layer's experts a step reads
  if (m.experts > 1) {
    const double k_over_e = static_cast<double>(m.experts_per_token) / m.experts;
    touched = 1.0 - std::pow(1.0 - k_over_e, tokens);
  }
  const double read_params =
      static_cast<double>(layers) * (static_cast<double>(layer_params - all_experts) +
                                     touched * static_cast<double>(all_experts)) +
      static_cast<double>(embedding_parameters(m));
  double read_bytes = read_params * static_cast<double>(bpe) / static_cast<double>(gpus);
  if (in.mode == phase::decode) read_bytes += static_cast<double>(r.kv_bytes_per_gpu);
  r.memory_ms = read_bytes / (in.hbm_gbps * 1e9) * 1e3;
  r.flop_ms = 2.0 * static_cast<double>(active_parameters_per_token(m)) * tokens /
              static_cast<double>(gpus) / (in.dense_tflops * 1e12) * 1e3;
  r.compute_ms = std::max(r.memory_ms, r.flop_ms);
  r.step_ms = r.overlap ? std::max(r.transfer_ms, r.compute_ms) : r.transfer_ms + r.compute_ms;
  r.meets_budget = r.step_ms <= in.budget_ms;
}

/// Lays the model out in HBM and prices one step. resident_cap < 0: as many resident layers as fit.
evaluation evaluate(const plan_inputs& in, int resident_cap) {
  evaluation e;
  plan_result& r = e.r;
  const model_shape& m = in.model;
  const auto gpus = static_cast<std::uint64_t>(in.gpus);
  const std::uint64_t page = in.page_bytes;
  size_model(in, r);

  // Placement: embeddings always resident; then either everything, or staging + resident layers.
  const std::uint64_t ppl = r.pages_per_layer;
  const auto layers = static_cast<std::uint64_t>(m.layers);
  std::uint64_t resident = 0;
  if (r.weight_pages >= r.embedding_pages + layers * ppl) {
    resident = layers;
  } else if (r.weight_pages >= r.embedding_pages + ppl) {
    const std::uint64_t free_pages = r.weight_pages - r.embedding_pages;
    r.overlap = free_pages >= 2 * ppl;
    r.staging_pages = (r.overlap ? 2 : 1) * ppl;
    resident = (free_pages - r.staging_pages) / ppl;
  } else if (in.allow_degraded && r.weight_pages >= r.embedding_pages) {
    r.degraded = true;
    resident = (r.weight_pages - r.embedding_pages) / ppl;
  } else {
    // With degraded mode on, only the embeddings must fit; without, they and one staged layer.
    const std::uint64_t need = r.embedding_pages + (in.allow_degraded ? 0 : ppl);
    const double need_hbm_gb =
        (static_cast<double>(need * page) + static_cast<double>(r.kv_bytes_per_gpu)) /
        (1.0 - in.headroom_fraction) / 1e9;
    e.error =
        "HBM per GPU is too small for '" + m.name + "': --hbm-gb " + fixed(in.hbm_gb) +
        " less the headroom (" + fixed(gb(r.headroom_bytes_per_gpu)) + " GB) leaves " +
        std::to_string(r.weight_pages) + " pages of " + std::to_string(page >> 20) +
        " MiB, but the embeddings (" + std::to_string(r.embedding_pages) + " pages)" +
        (in.allow_degraded ? "" : " plus one staged layer (" + std::to_string(ppl) + " pages)") +
        " need " + std::to_string(need) + "; use --hbm-gb >= " + fixed(need_hbm_gb) +
        ", more --gpus, a smaller --dtype" + (in.context > 0 ? ", a smaller --context" : "") +
        (in.allow_degraded ? "" : ", or --allow-degraded");
    return e;
  }
  if (resident_cap >= 0) resident = std::min(resident, static_cast<std::uint64_t>(resident_cap));
  r.resident_layers = static_cast<int>(resident);
  r.streamed_layers = m.layers - r.resident_layers;
  if (r.streamed_layers == 0) r.staging_pages = 0;
  const auto streamed = static_cast<std::uint64_t>(r.streamed_layers);

  // Host RAM holds every streamed layer, all GPUs' shards: once per node, or once per process.
  const std::uint64_t copies = in.copies == host_copies::per_process ? gpus : 1;
  const std::uint64_t per_layer = r.layer_bytes_per_gpu * gpus * copies;
  r.host_bytes_needed = streamed * per_layer;
  const double host_bytes = in.host_gb * 1e9;
  if (static_cast<double>(r.host_bytes_needed) > host_bytes) {
    const auto fits =
        static_cast<std::uint64_t>(std::floor(host_bytes / static_cast<double>(per_layer)));
    e.error =
        "host RAM is too small for '" + m.name + "': " + std::to_string(streamed) +
        " layers must be streamed and need " + fixed(gb(r.host_bytes_needed)) +
        " GB of pinned host RAM (" + fixed(gb(per_layer), 2) + " GB each" +
        (copies > 1 ? ", a private copy in each of the " + std::to_string(copies) + " processes"
                    : "") +
        "), but --host-gb " + fixed(in.host_gb) + " holds " + std::to_string(fits) +
        "; use --host-gb >= " + fixed(gb(r.host_bytes_needed)) +
        (copies > 1 ? ", one copy per node (--host-copies node: htp's shared tier)" : "") +
        ", or more --hbm-gb / --gpus so " + std::to_string(streamed - std::min(fits, streamed)) +
        " more layers stay resident";
    return e;
  }

  // Transfer: streamed layers move page by page each step.
  r.paged_pages_per_step = streamed * ppl;
  r.paged_bytes_per_step = streamed * r.layer_bytes_per_gpu;
  price_step(in, r);
  return e;
}

}  // namespace

void check_inputs(const plan_inputs& in) {
  validate(in.model);
  HTP_EXPECTS(in.batch >= 1 && in.batch <= batch_search_limit, htp::invalid_argument, "--batch ",
              in.batch, " must be in [1, ", batch_search_limit, "]");
  HTP_EXPECTS(in.gpus >= 1 && in.gpus <= in.model.heads, htp::invalid_argument, "--gpus ", in.gpus,
              " must be in [1, ", in.model.heads, "]: tensor parallelism splits the ",
              in.model.heads, " attention heads of '", in.model.name, "'");
  HTP_EXPECTS(in.hbm_gb > 0, htp::invalid_argument, "--hbm-gb ", in.hbm_gb, " must be positive");
  HTP_EXPECTS(in.hbm_gbps > 0, htp::invalid_argument, "--hbm-gbps ", in.hbm_gbps,
              " must be positive");
  HTP_EXPECTS(in.dense_tflops > 0, htp::invalid_argument, "--tflops ", in.dense_tflops,
              " must be positive");
  HTP_EXPECTS(in.host_gb >= 0, htp::invalid_argument, "--host-gb ", in.host_gb,
              " must not be negative");
  HTP_EXPECTS(in.page_ms >= 0, htp::invalid_argument, "--page-ms ", in.page_ms,
              " must not be negative");
  HTP_EXPECTS(in.page_ms > 0 || in.link_gbps > 0, htp::invalid_argument, "--link-gbps ",
              in.link_gbps, " must be positive (or give --page-ms)");
  HTP_EXPECTS(in.page_bytes >= (64u << 10) && (in.page_bytes & (in.page_bytes - 1)) == 0,
              htp::invalid_argument, "page size ", in.page_bytes,
              " bytes must be a power of two of at least 64 KiB (htp's slab sizes)");
  HTP_EXPECTS(in.budget_ms > 0, htp::invalid_argument, "--budget-ms ", in.budget_ms,
              " must be positive");
  HTP_EXPECTS(in.headroom_fraction >= 0 && in.headroom_fraction < 1, htp::invalid_argument,
              "--headroom ", in.headroom_fraction, " must be in [0, 1)");
  HTP_EXPECTS(in.context >= 0, htp::invalid_argument, "--context ", in.context,
              " must not be negative");
  HTP_EXPECTS(in.prompt_tokens >= 1, htp::invalid_argument, "--prompt-tokens ", in.prompt_tokens,
              " must be at least 1");
}

plan_result plan(const plan_inputs& given) {
  check_inputs(given);
  plan_inputs in = given;
  if (in.measured.h2d_gbps > 0) {
    in.link_gbps = in.measured.h2d_gbps;
    in.link_source = "measured in " + in.measured.source;
  }
  evaluation e = evaluate(in, -1);
  if (!e.error.empty()) throw htp::invalid_argument(e.error);
  plan_result r = std::move(e.r);

  // The fewest resident layers that still meet the budget (fewer resident = more HBM left over).
  for (int cap = 0; cap <= r.resident_layers; ++cap) {
    const evaluation probe = evaluate(in, cap);
    if (probe.error.empty() && probe.r.meets_budget) {
      r.min_resident_layers = cap;
      break;
    }
  }

  // The largest batch that meets the budget: step time does not fall as the batch grows.
  r.batch_search_limit = batch_search_limit;
  auto meets = [&](int batch) {
    plan_inputs b = in;
    b.batch = batch;
    const evaluation probe = evaluate(b, -1);
    return probe.error.empty() && probe.r.meets_budget;
  };
  if (meets(1)) {
    int good = 1, bad = 2;
    while (bad <= batch_search_limit && meets(bad)) {
      good = bad;
      bad *= 2;
    }
    if (bad > batch_search_limit) {
      good = meets(batch_search_limit) ? batch_search_limit : good;
      bad = batch_search_limit + 1;
    }
    while (bad - good > 1) {
      const int mid = good + (bad - good) / 2;
      (meets(mid) ? good : bad) = mid;
    }
    r.largest_batch = good;
  }

  if (in.measured.step_ms_p50 > 0) {
    r.measured_step_ms = in.measured.step_ms_p50;
    r.prediction_error_pct = (r.step_ms - r.measured_step_ms) / r.measured_step_ms * 100.0;
  }
  if (in.page_ms > 0 && in.measured.h2d_gbps > 0) {
    r.notes.push_back("--page-ms sets the page cost; the measured " + fixed(in.measured.h2d_gbps) +
                      " GB/s is not used for it");
  }
  if (in.context == 0) {
    r.notes.push_back("no KV cache counted (--context 0): the headroom covers activations only");
  }
  if (in.gpus > in.model.kv_heads) {
    r.notes.push_back("--gpus exceeds the KV heads: real k/v projections are replicated, so the "
                      "per-GPU bytes are slightly more than 1/gpus");
  }
  if (!r.overlap) {
    r.notes.push_back("only one layer of staging fits: transfer and compute do not overlap");
  }
  if (r.degraded) {
    r.notes.push_back("degraded: streamed layers are read from mapped pinned host memory over the "
                      "link, not paged");
  }
  if (in.gpus > 1) r.notes.push_back("tensor-parallel all-reduce time is not modelled");
  return r;
}

}  // namespace htp::bench
