// The planner's model of htp (tools/planner/htp_model.hpp) and the trade-off matrix: placement as
// the node bench does it, Belady's bytes, the link's cap and chunk costs, the serial chain of a
// link-bound sweep, what does not fit and why. The agreement with the timing-only simulation
// itself is the ctest planner_predicts_sim (scripts/plan-check.py on committed bench JSON).
#include "planner/htp_model.hpp"
#include "planner/matrix.hpp"
#include "shared/belady_min.hpp"
#include "shared/htp_layout.hpp"

#include <htp/error.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

using namespace htp::bench;

/// The design's case study as htp-stream-bench --case-study runs it: OPT-175B in fp16, TP 8,
/// a 40 GB pager budget per GPU, 256 GB of host RAM, a 55 GB/s link capped at 80%, 64 MiB chunks.
std::pair<plan_inputs, htp_settings> case_study() {
  plan_inputs in;
  in.model = preset("opt-175b");
  in.weights = dtype::fp16;
  in.gpus = 8;
  in.hbm_gb = 40;
  in.hbm_gbps = 3350;
  in.host_gb = 256;
  in.link_gbps = 55;
  htp_settings s;
  s.hbm_budget_bytes = 40e9;
  s.chunk_bytes = 64ull << 20;
  s.embeddings = false;
  return {in, s};
}

/// A small dense model on one GPU: 8 layers of equal shape, every tensor a whole number of pages.
plan_inputs small_model() {
  plan_inputs in;
  in.model = {"small", 8, 1024, 4096, 8, 8, 1000};
  in.weights = dtype::bf16;
  in.gpus = 1;
  in.hbm_gbps = 1000;
  in.link_gbps = 10;
  return in;
}

/// Every layer paged, layers only, uncapped: as the stream bench's single-GPU policies run.
htp_settings all_paged() {
  htp_settings s;
  s.where = placement::paged;
  s.embeddings = false;
  s.link_cap_fraction = 1;
  return s;
}

TEST(htp_model, case_study_placement_matches_the_node_bench) {
  auto [in, s] = case_study();
  const htp_prediction p = predict_htp(in, s);
  ASSERT_TRUE(p.feasible) << p.why_not;
  // The node bench kept 84 layers resident and paged 12 (docs/case_study.md).
  EXPECT_EQ(p.resident_layers, 84);
  EXPECT_EQ(p.paged_layers, 12);
  // The host tier holds the paged layers only, every GPU's shard: 12 x 3.624 GB.
  const std::uint64_t layer_bytes = layer_parameters(in.model) * 2;
  EXPECT_NEAR(static_cast<double>(p.host_bytes), 12.0 * static_cast<double>(layer_bytes),
              8 * 12 * 8.0);
  // The cap: 80% of 55 GB/s, above which 64 MiB chunks' 5 us cannot lift it.
  EXPECT_NEAR(p.link_gbps, 44.0, 0.01);
  // Link-bound: the step is at least its copies, and the copies are what Belady's rule pages.
  EXPECT_GE(p.step_ms, p.transfer_ms);
  EXPECT_NEAR(p.transfer_ms, p.paged_bytes_per_step / 44e6, 0.5);
}

TEST(htp_model, compression_shrinks_the_host_tier_so_host_paging_fits_in_256_gb) {
  auto [in, s] = case_study();
  s.where = placement::paged;  // the matrix's host-paging row: every layer from the host tier
  const htp_prediction raw = predict_htp(in, s);
  EXPECT_FALSE(raw.feasible) << "348 GB of host copies do not fit in 256 GB";
  s.compression_ratio = 0.68;
  const htp_prediction z = predict_htp(in, s);
  ASSERT_TRUE(z.feasible) << z.why_not;
  const double all = 96.0 * static_cast<double>(layer_parameters(in.model) * 2);
  EXPECT_NEAR(static_cast<double>(z.host_bytes), 0.68 * all, 1e-6 * all);
  EXPECT_LT(static_cast<double>(z.host_bytes), 256e9);
  EXPECT_NEAR(z.wire_bytes_per_step, 0.68 * z.paged_bytes_per_step, 1.0);
  s.how = strategy::degraded;
  EXPECT_THROW((void)predict_htp(in, s), htp::invalid_argument) << "no raw copy to map";
}

TEST(htp_model, a_compressed_page_in_takes_the_slower_of_link_and_decode_plus_one_chunk) {
  plan_inputs in = small_model();  // 10 GB/s link
  htp_settings s = all_paged();
  s.hbm_budget_bytes = 50e6;
  s.copy_latency_us = 0;
  const htp_prediction raw = predict_htp(in, s);
  // Ratio 0.5, decode 250 GB/s: the link carries half the bytes and the decode keeps up, so a
  // 2 MiB chunk takes 104.9 us on the link plus 1/1 of the decode fill (8.4 us): the logical rate
  // nearly doubles.
  s.compression_ratio = 0.5;
  const htp_prediction fast = predict_htp(in, s);
  EXPECT_NEAR(fast.link_gbps, 2097152.0 / (104.8576e-6 + 8.388608e-6) / 1e9, 1e-3);
  EXPECT_LT(fast.transfer_ms, 0.6 * raw.transfer_ms);
  EXPECT_NEAR(fast.paged_bytes_per_step, raw.paged_bytes_per_step, 1.0) << "same misses";
  // A decode slower than the link: the decode sets the rate (2 MiB at 5 GB/s = 419.4 us, plus the
  // link's 104.9 us of fill).
  s.decode_gbps = 5;
  const htp_prediction slow = predict_htp(in, s);
  EXPECT_NEAR(slow.link_gbps, 2097152.0 / (419.4304e-6 + 104.8576e-6) / 1e9, 1e-3);
  EXPECT_GT(slow.transfer_ms, raw.transfer_ms);
}

TEST(htp_model, paged_bytes_follow_beladys_rule) {
  plan_inputs in = small_model();
  htp_settings s = all_paged();
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  for (int l = 0; l < in.model.layers; ++l) {
    for (const auto& t : layer_tensors(in.model)) {
      sizes.push_back(htp_tensor_bytes(t.rows * t.cols * 2, 64 << 10));
      total += sizes.back();
    }
  }
  for (double frac : {0.3, 0.5, 0.8}) {
    s.hbm_budget_bytes = frac * static_cast<double>(total);
    const htp_prediction p = predict_htp(in, s);
    ASSERT_TRUE(p.feasible) << p.why_not;
    const double reference =
        belady_bytes_per_cycle(sizes, static_cast<std::uint64_t>(s.hbm_budget_bytes));
    EXPECT_NEAR(p.paged_bytes_per_step, reference, 0.05 * reference) << "budget " << frac;
    EXPECT_LT(p.paged_bytes_per_step, static_cast<double>(total));
  }
  s.hbm_budget_bytes = 2.0 * static_cast<double>(total);  // everything fits: nothing moves
  const htp_prediction all = predict_htp(in, s);
  EXPECT_EQ(all.paged_bytes_per_step, 0);
  EXPECT_NEAR(all.step_ms, all.compute_ms, 1e-9);
}

TEST(htp_model, the_cap_and_chunk_costs_set_the_link_rate) {
  plan_inputs in = small_model();
  htp_settings s = all_paged();
  s.hbm_budget_bytes = 50e6;
  s.copy_latency_us = 0;
  const htp_prediction uncapped = predict_htp(in, s);
  EXPECT_NEAR(uncapped.link_gbps, 10, 1e-9);
  s.link_cap_fraction = 0.5;
  const htp_prediction half = predict_htp(in, s);
  EXPECT_NEAR(half.link_gbps, 5, 1e-9);
  EXPECT_NEAR(half.transfer_ms, 2 * uncapped.transfer_ms, 1e-6 * uncapped.transfer_ms);
  EXPECT_GT(half.step_ms, 1.9 * uncapped.step_ms);  // link-bound: the step follows the link
  // A fixed cost per chunk: 2 MiB at 10 GB/s is 209.7 us; 100 us more makes it 309.7 us.
  s.link_cap_fraction = 1;
  s.copy_latency_us = 100;
  const htp_prediction slow = predict_htp(in, s);
  EXPECT_NEAR(slow.link_gbps, 2097152.0 / 309.7152e-6 / 1e9, 1e-3);
}

TEST(htp_model, what_does_not_fit_says_why) {
  auto [in, s] = case_study();
  in.host_gb = 16;
  htp_prediction p = predict_htp(in, s);
  EXPECT_FALSE(p.feasible);
  EXPECT_NE(p.why_not.find("host RAM is too small"), std::string::npos) << p.why_not;
  in.host_gb = 256;
  s.where = placement::paged;  // every layer paged: 348 GB of host tier, more than 256 GB
  p = predict_htp(in, s);
  EXPECT_FALSE(p.feasible);
  EXPECT_NE(p.why_not.find("host RAM is too small"), std::string::npos) << p.why_not;
  s.hbm_budget_bytes = 0.2e9;  // under two of the largest shard (fc1: 151 MB)
  in.host_gb = 1000;
  p = predict_htp(in, s);
  EXPECT_FALSE(p.feasible);
  EXPECT_NE(p.why_not.find("degraded"), std::string::npos) << p.why_not;
  s.link_cap_fraction = 0;
  EXPECT_THROW(predict_htp(in, s), htp::invalid_argument);
}

TEST(htp_model, degraded_reads_paged_layers_over_the_link) {
  auto [in, s] = case_study();
  s.how = strategy::degraded;
  s.hbm_budget_bytes = 20e9;  // HBM forced short
  const htp_prediction p = predict_htp(in, s);
  ASSERT_TRUE(p.feasible) << p.why_not;
  EXPECT_GT(p.paged_layers, 40);
  // Every paged layer's shard crosses the link each step: kernels read it there, at the link's rate
  // (the token bucket governs copies, not these reads).
  EXPECT_GE(p.step_ms, p.paged_bytes_per_step / 55e6);
}

TEST(htp_model, the_default_budget_is_the_exposed_hbm_less_headroom_and_holds_the_kv_cache) {
  auto [in, s] = case_study();
  s.hbm_budget_bytes = 0;
  s.hbm_exposed_gb = 42.9;
  in.context = 512;
  const htp_prediction p = predict_htp(in, s);
  ASSERT_TRUE(p.feasible) << p.why_not;
  EXPECT_DOUBLE_EQ(p.hbm_budget_bytes, 42.9e9 * 0.9);  // KV not taken off here ...
  EXPECT_GT(p.kv_bytes, 0u);
  // ... but once, with the resident weights, from what paging gets.
  EXPECT_LE(static_cast<double>(p.resident_bytes + p.kv_bytes + p.paging_capacity),
            p.hbm_budget_bytes);
  EXPECT_GT(static_cast<double>(p.resident_bytes + p.kv_bytes + p.paging_capacity),
            p.hbm_budget_bytes - 1e6);
}

TEST(htp_model, inputs_no_model_can_take_are_refused) {
  auto [in, s] = case_study();
  in.gpus = 0;
  EXPECT_THROW(predict_htp(in, s), htp::invalid_argument);
  in.gpus = 8;
  in.link_gbps = 0;
  EXPECT_THROW(predict_htp(in, s), htp::invalid_argument);
}

TEST(htp_model, all_resident_needs_no_paging_window) {
  // 43.65 GB of weights per GPU: they fit a 44 GB budget whole, but not beside a paging window.
  auto [in, s] = case_study();
  s.hbm_budget_bytes = 44e9;
  EXPECT_GT(predict_htp(in, s).paged_layers, 0);
  const auto rows = trade_off_matrix(in, s, {1});
  ASSERT_TRUE(rows[0].cells[0].feasible) << rows[0].cells[0].why_not;
  EXPECT_LT(rows[0].cells[0].step_ms, rows[1].cells[0].step_ms);  // nothing paged: faster
}

TEST(htp_model, matrix_rows_and_cells) {
  auto [in, s] = case_study();
  in.context = 512;
  const auto rows = trade_off_matrix(in, s, {1, 4, 16, 64});
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].strategy, "all-resident");
  for (const auto& c : rows[0].cells) {
    EXPECT_FALSE(c.feasible);  // 43.65 GB per GPU of weights against a 40 GB budget
    EXPECT_NE(c.why_not.find("do not fit"), std::string::npos);
  }
  const auto& tp = rows[1];
  EXPECT_EQ(tp.strategy, "tensor-parallel+paging");
  ASSERT_TRUE(tp.cells[0].feasible && tp.cells[1].feasible);
  // A larger batch: more KV cache, fewer resident layers, a longer step, more tokens per second.
  EXPECT_GT(tp.cells[1].step_ms, tp.cells[0].step_ms);
  EXPECT_GT(tp.cells[1].tokens_per_second, tp.cells[0].tokens_per_second);
  EXPECT_NEAR(tp.cells[0].tokens_per_second, 1000.0 / tp.cells[0].step_ms, 1e-9);
  EXPECT_EQ(tp.cells[0].meets_budget, tp.cells[0].step_ms <= in.budget_ms);
  EXPECT_THROW(trade_off_matrix(in, s, {}), htp::invalid_argument);
  EXPECT_THROW(trade_off_matrix(in, s, {0}), htp::invalid_argument);
}

}  // namespace
