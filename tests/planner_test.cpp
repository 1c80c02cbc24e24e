// The capacity planner: the 175B hand calculation of docs/planner.md, the formulas on small cases,
// the searches, benchmark JSON, and the errors for inputs that cannot be planned.
#include "planner/planner.hpp"
#include "planner/bench_json.hpp"
#include "planner/gpu_presets.hpp"

#include <htp/error.hpp>

#include <gtest/gtest.h>

#include "throws_naming.hpp"

#include <string>

namespace {

using namespace htp::bench;

const std::string data_dir = HTP_TEST_DATA_DIR;

using htp::test::throws_naming;

/// docs/planner.md's hand calculation: 175B in fp16 on 8 GPUs of 40 GB (A100-40GB rates), 256 GB
/// of host RAM, 64 MiB pages costing 0.8 ms each.
plan_inputs hand_calculation() {
  const gpu_spec a100 = gpu_preset("A100-40GB");
  plan_inputs in;
  in.model = preset("gpt3-175b");
  in.weights = dtype::fp16;
  in.gpus = 8;
  in.hbm_gb = 40;
  in.hbm_gbps = a100.hbm_gbps;
  in.dense_tflops = a100.dense_tflops;
  in.host_gb = 256;
  in.page_bytes = 64ull << 20;
  in.page_ms = 0.8;
  in.budget_ms = 200;
  return in;
}

TEST(planner, HandCalculation175B) {
  const plan_result r = plan(hand_calculation());
  EXPECT_EQ(r.layer_bytes, 3'624'198'144u);        // 1,812,099,072 params x 2 bytes
  EXPECT_EQ(r.layer_bytes_per_gpu, 453'024'768u);  // / 8 = 432.0 MiB
  EXPECT_EQ(r.pages_per_layer, 7u);                // ceil(432.0 / 64)
  EXPECT_EQ(r.embedding_bytes_per_gpu, 160'733'184u);
  EXPECT_EQ(r.embedding_pages, 3u);
  EXPECT_EQ(r.total_bytes_per_gpu, 43'651'110'912u);  // 43.65 GB > 40 GB: must page
  EXPECT_EQ(r.headroom_bytes_per_gpu, 4'000'000'000u);
  EXPECT_EQ(r.weight_pages, 536u);  // floor(36e9 / 64 MiB)
  EXPECT_EQ(r.staging_pages, 14u);  // two layers, so copies overlap compute
  EXPECT_TRUE(r.overlap);
  EXPECT_EQ(r.resident_layers, 74);  // floor((536 - 3 - 14) / 7)
  EXPECT_EQ(r.streamed_layers, 22);
  EXPECT_EQ(r.host_bytes_needed, 22ull * 3'624'198'144ull);  // 79.7 GB <= 256 GB
  EXPECT_EQ(r.paged_pages_per_step, 154u);
  EXPECT_DOUBLE_EQ(r.transfer_ms, 154 * 0.8);                     // 123.2 ms
  EXPECT_NEAR(r.memory_ms, 43.651110912e9 / 1555e9 * 1e3, 1e-9);  // 28.07 ms
  EXPECT_NEAR(r.compute_ms, 28.07, 0.01);
  EXPECT_NEAR(r.step_ms, 123.2, 1e-9);
  EXPECT_TRUE(r.meets_budget);
  EXPECT_EQ(r.min_resident_layers, 61);  // 35 streamed x 5.6 ms = 196 ms <= 200
  EXPECT_EQ(r.largest_batch, 1429);      // FLOP-bound: 1429 x 0.1399 ms <= 200
  EXPECT_EQ(r.link_source, "--page-ms");
}

TEST(planner, EverythingResidentNeedsNoPaging) {
  plan_inputs in;
  in.model = preset("llama-3.1-8b");
  in.hbm_gb = 80;
  const plan_result r = plan(in);
  EXPECT_EQ(r.resident_layers, 32);
  EXPECT_EQ(r.streamed_layers, 0);
  EXPECT_EQ(r.staging_pages, 0u);
  EXPECT_EQ(r.paged_pages_per_step, 0u);
  EXPECT_EQ(r.transfer_ms, 0.0);
  EXPECT_EQ(r.host_bytes_needed, 0u);
  EXPECT_NEAR(r.step_ms, 16.060522496e9 / 3350e9 * 1e3, 1e-9);
  // Over 55 GB/s a 7-page layer costs 8.54 ms: 23 streamed = 196.4 ms, 24 would be 205 ms.
  EXPECT_EQ(r.min_resident_layers, 9);
}

TEST(planner, PageCostFromLinkRate) {
  plan_inputs in = hand_calculation();
  in.page_ms = 0;
  in.link_gbps = 25;
  in.link_source = "test";
  const plan_result r = plan(in);
  EXPECT_NEAR(r.page_ms, 67.108864 / 25.0, 1e-12);  // 64 MiB at 25 GB/s = 2.68 ms
  EXPECT_NEAR(r.transfer_ms, 154 * 67.108864 / 25.0, 1e-9);
  EXPECT_FALSE(r.meets_budget);  // 413 ms
  EXPECT_EQ(r.link_source, "test");
  EXPECT_EQ(r.largest_batch, 0);
}

TEST(planner, NoOverlapWithOneStagingLayer) {
  plan_inputs in;
  in.model = preset("llama-3.1-8b");
  in.hbm_gb = 3.0;  // 2.7 GB for weights = 40 pages: embeddings 32 + one layer 7, not two
  const plan_result r = plan(in);
  EXPECT_EQ(r.embedding_pages, 32u);
  EXPECT_EQ(r.pages_per_layer, 7u);
  EXPECT_FALSE(r.overlap);
  EXPECT_EQ(r.resident_layers, 0);
  EXPECT_NEAR(r.step_ms, r.transfer_ms + r.compute_ms, 1e-9);
}

TEST(planner, KvCacheComesOutOfHbm) {
  plan_inputs in = hand_calculation();
  in.context = 2048;
  in.batch = 8;
  const plan_result r = plan(in);
  // 96 layers x 2 (k, v) x 12288 x 2 bytes x 8 x 2048 / 8 GPUs = 9.66 GB per GPU
  EXPECT_EQ(r.kv_bytes_per_gpu, 96ull * 2 * 12288 * 2 * 8 * 2048 / 8);
  EXPECT_LT(r.resident_layers, 74);
  EXPECT_GT(r.largest_batch, 0);
  EXPECT_LT(r.largest_batch, 1429);
}

TEST(planner, MoeDecodeReadsOnlyTouchedExperts) {
  plan_inputs in;
  in.model = preset("mixtral-8x7b");
  in.hbm_gb = 141;
  in.hbm_gbps = 4800;
  const plan_result one = plan(in);
  in.batch = 64;
  const plan_result many = plan(in);
  EXPECT_LT(one.memory_ms, many.memory_ms);  // batch 1 touches 2 of 8 experts per layer
  EXPECT_EQ(one.resident_layers, 32);
  in.mode = phase::prefill;
  in.batch = 1;
  const plan_result prefill = plan(in);
  EXPECT_GT(prefill.flop_ms, prefill.memory_ms);  // 2048 tokens: compute-bound
}

TEST(planner, MeasuredBandwidthAndStepFromStreamBench) {
  plan_inputs in = hand_calculation();
  in.page_ms = 0;
  in.measured = read_bench_json(data_dir + "/stream-bench.json");
  EXPECT_DOUBLE_EQ(in.measured.h2d_gbps, 50.0);
  EXPECT_DOUBLE_EQ(in.measured.step_ms_p50, 150.0);
  const plan_result r = plan(in);
  EXPECT_DOUBLE_EQ(r.link_gbps, 50.0);
  EXPECT_NE(r.link_source.find("stream-bench.json"), std::string::npos);
  EXPECT_DOUBLE_EQ(r.measured_step_ms, 150.0);
  EXPECT_NEAR(r.prediction_error_pct, (r.step_ms - 150.0) / 150.0 * 100.0, 1e-9);
}

TEST(planner, BandwidthJsonGivesTheLinkRate) {
  const measured_run m = read_bench_json(data_dir + "/bandwidth.json");
  EXPECT_DOUBLE_EQ(m.h2d_gbps, 25.0);
  EXPECT_EQ(m.step_ms_p50, 0.0);
  EXPECT_TRUE(throws_naming([] { read_bench_json(data_dir + "/llama-3.1-8b.config.json"); },
                            {"llama-3.1-8b.config.json", "/measured/h2d_gbps"}));
  EXPECT_TRUE(throws_naming([] { read_bench_json(data_dir + "/malformed.config.json"); },
                            {"not valid JSON"}));
}

TEST(planner, HbmTooSmallSaysWhatWouldFit) {
  plan_inputs in;
  in.model = preset("llama-3.1-405b");
  in.hbm_gb = 4;
  EXPECT_TRUE(
      throws_naming([&] { plan(in); }, {"HBM per GPU is too small", "--hbm-gb 4.0", "need 222",
                                        "--hbm-gb >= 16.6", "--allow-degraded"}));
  in.hbm_gb = 16.6;
  EXPECT_NO_THROW(plan(in));
}

TEST(planner, DegradedModeReadsOverTheLink) {
  plan_inputs in;
  in.model = preset("llama-3.1-8b");
  in.hbm_gb = 2.5;  // 2.25 GB = 33 pages: embeddings (32) fit, a layer (7) more does not
  EXPECT_TRUE(throws_naming([&] { plan(in); }, {"--allow-degraded"}));
  in.allow_degraded = true;
  const plan_result r = plan(in);
  EXPECT_TRUE(r.degraded);
  EXPECT_EQ(r.resident_layers, 0);
  EXPECT_NEAR(r.transfer_ms, 32.0 * 436'224'000 / 55e9 * 1e3, 1e-9);
}

TEST(planner, HostTooSmallSaysWhatWouldFit) {
  plan_inputs in = hand_calculation();
  in.host_gb = 64;
  EXPECT_TRUE(throws_naming([&] { plan(in); }, {"host RAM is too small", "22 layers", "79.7 GB",
                                                "holds 17", "--host-gb >= 79.7"}));
}

TEST(planner, ProcessPerGpuFitsOnlyWithOneHostCopyPerNode) {
  // torchrun --nproc-per-node 8: private offloads pin 8 copies of the streamed layers (638 GB);
  // the node's shared tier holds them once (79.7 GB of 256 GB), as one process owning 8 GPUs does.
  plan_inputs in = hand_calculation();
  in.copies = host_copies::per_process;
  EXPECT_TRUE(throws_naming([&] { plan(in); }, {"host RAM is too small", "637.9 GB", "8 processes",
                                                "--host-copies node"}));
  in.copies = host_copies::per_node;
  const plan_result r = plan(in);
  EXPECT_EQ(r.host_bytes_needed, 22ull * 3'624'198'144ull);
  EXPECT_EQ(r.streamed_layers, 22);
}

TEST(planner, BadInputsAreNamed) {
  plan_inputs in = hand_calculation();
  in.gpus = 0;
  EXPECT_TRUE(throws_naming([&] { plan(in); }, {"--gpus 0"}));
  in = hand_calculation();
  in.gpus = 128;
  EXPECT_TRUE(throws_naming([&] { plan(in); }, {"--gpus 128", "96"}));
  in = hand_calculation();
  in.page_bytes = 3u << 20;
  EXPECT_TRUE(throws_naming([&] { plan(in); }, {"power of two"}));
  in = hand_calculation();
  in.budget_ms = 0;
  EXPECT_TRUE(throws_naming([&] { plan(in); }, {"--budget-ms 0"}));
  in = hand_calculation();
  in.page_ms = 0;
  in.link_gbps = 0;
  EXPECT_TRUE(throws_naming([&] { plan(in); }, {"--link-gbps 0"}));
  EXPECT_TRUE(throws_naming([] { gpu_preset("B200"); }, {"B200", "H100-SXM", "GH200"}));
}

TEST(planner, GpuPresets) {
  for (const auto& name : gpu_preset_names()) {
    const gpu_spec g = gpu_preset(name);
    EXPECT_GT(g.hbm_gb, 0) << name;
    EXPECT_GT(g.hbm_gbps, 0) << name;
    EXPECT_GT(g.dense_tflops, 0) << name;
    EXPECT_GT(g.link_gbps, 0) << name;
  }
  EXPECT_DOUBLE_EQ(gpu_preset("h200").hbm_gb, 141);
  EXPECT_DOUBLE_EQ(gpu_preset("GH200").link_gbps, 450);
}

}  // namespace
