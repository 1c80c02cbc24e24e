// The static planner (htp/static_plan.hpp): its layout, its event model, and its choice against
// brute force over every plan of its shape.
#include <htp/error.hpp>
#include <htp/static_plan.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

namespace htp {
namespace {

/// `layers` positions of `per_layer` tensors each of `bytes`, computing `compute_ns` each.
static_plan_input uniform(std::size_t layers, std::size_t per_layer, std::size_t bytes,
                          double compute_ns, double link = 1e10) {
  static_plan_input in;
  in.link_bytes_per_second = link;
  for (std::size_t l = 0; l < layers; ++l) {
    static_position p;
    p.compute_ns = compute_ns;
    for (std::size_t i = 0; i < per_layer; ++i) {
      p.tensors.push_back(in.tensors.size());
      in.tensors.push_back({"l" + std::to_string(l) + "." + std::to_string(i), bytes});
    }
    in.positions.push_back(p);
  }
  return in;
}

/// A small random case: mixed sizes, some tensors read at two positions (tied), some coded.
static_plan_input random_case(std::mt19937& rng, std::size_t tensors, bool coded) {
  static_plan_input in;
  in.link_bytes_per_second = 1e10;  // 10 bytes per ns
  in.decode_bytes_per_second = 4e10;
  const std::size_t positions = 2 + rng() % 4;
  in.positions.resize(positions);
  std::size_t total = 0;
  for (std::size_t t = 0; t < tensors; ++t) {
    static_tensor x{"t" + std::to_string(t), 256 * (1 + rng() % 8)};
    if (coded && rng() % 2 == 0) x.wire_bytes = x.bytes * (5 + rng() % 4) / 8;
    in.tensors.push_back(x);
    total += x.bytes;
    in.positions[t % positions].tensors.push_back(t);
    if (rng() % 5 == 0) in.positions[(t + 1 + rng() % positions) % positions].tensors.push_back(t);
  }
  for (auto& p : in.positions) p.compute_ns = static_cast<double>(rng() % 400);
  in.hbm_budget = total * (3 + rng() % 7) / 10 + 2048;
  return in;
}

/// The least predicted step over every resident set and every ring size (each multiple of 256
/// bytes from the largest use to all uses), through the public API.
double brute_force(const static_plan_input& in) {
  const std::size_t n = in.tensors.size();
  double best = INFINITY;
  for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << n); ++mask) {
    static_shape shape{std::vector<bool>(n), 0};
    for (std::size_t i = 0; i < n; ++i) shape.resident[i] = ((mask >> i) & 1) != 0;
    static_plan_input unlimited = in;
    unlimited.hbm_budget = SIZE_MAX;
    const auto all = make_static_plan(unlimited, shape);
    std::size_t largest = 0;
    for (const auto& use : all.uses) largest = std::max(largest, use.bytes);
    for (std::size_t ring = largest; ring <= all.ring_bytes; ring += 256) {
      shape.ring_bytes = ring;
      try {
        best = std::min(best, make_static_plan(in, shape).predicted.step_ns);
      } catch (const out_of_memory&) {
      }
      if (ring == 0) break;
    }
  }
  return best;
}

TEST(static_plan, is_optimal_among_plans_of_its_shape_on_small_cases) {
  std::mt19937 rng(7);
  int planned = 0;
  for (int c = 0; c < 60; ++c) {
    const auto in = random_case(rng, 3 + c % 7, c % 2 == 1);
    const double best = brute_force(in);
    if (!std::isfinite(best)) {
      EXPECT_THROW(plan_static(in), out_of_memory);
      continue;
    }
    const static_plan plan = plan_static(in);
    EXPECT_NEAR(plan.predicted.step_ns, best, 1e-9 * best) << "case " << c;
    EXPECT_LE(plan.arena_bytes, in.hbm_budget);
    EXPECT_GE(plan.predicted.step_ns, static_step_bound_ns(in) * (1 - 1e-12));
    ++planned;
  }
  EXPECT_GT(planned, 40) << "too few cases fit: the test checks little";
}

TEST(static_plan, heuristic_stays_near_brute_force_where_both_run) {
  // The planner's path for large inputs, forced on cases small enough to enumerate.
  std::mt19937 rng(11);
  double worst = 1;
  int compared = 0;
  for (int c = 0; c < 40; ++c) {
    auto in = random_case(rng, 6 + c % 6, c % 3 == 0);
    const double best = brute_force(in);
    if (!std::isfinite(best)) continue;
    in.exhaustive_limit = 0;
    ++compared;
    const double heuristic = plan_static(in).predicted.step_ns;
    EXPECT_GE(heuristic, best * (1 - 1e-9));
    worst = std::max(worst, heuristic / best);
  }
  std::printf("heuristic / brute force, worst of %d cases: %.4f\n", compared, worst);
  EXPECT_GT(compared, 20);
  EXPECT_LT(worst, 1.3);  // measured 1.28 on these 40 cases (docs/pager.md)
}

TEST(static_plan, event_model_matches_a_hand_computed_step) {
  // 4 layers of one 1000-byte tensor, 100 ns of compute each, link 10 bytes/ns (100 ns a load).
  auto in = uniform(4, 1, 1000, 100);
  in.hbm_budget = 1u << 20;
  // Layers 0 and 2 resident, 1 and 3 streamed through one slot: use 0 = layer 1 (carried),
  // use 1 = layer 3. Layer 1 ends at 200; layer 3's load runs 200-300; layer 2 ends at 300;
  // layer 3 runs 300-400, then the carried load of layer 1 runs 400-500: the step is 500 ns.
  const auto plan = make_static_plan(in, {{true, false, true, false}, 1024});
  ASSERT_EQ(plan.uses.size(), 2u);
  EXPECT_DOUBLE_EQ(plan.predicted.step_ns, 500);
  EXPECT_DOUBLE_EQ(plan.predicted.compute_ns, 400);
  EXPECT_DOUBLE_EQ(plan.predicted.link_ns, 200);
  // A ring of two: both uses keep their bytes, nothing loads per step.
  const auto two = make_static_plan(in, {{true, false, true, false}, 2048});
  EXPECT_DOUBLE_EQ(two.predicted.step_ns, 400);
  EXPECT_EQ(two.streamed_bytes, 0u);
}

TEST(static_plan, coded_pieces_overlap_copy_and_decode) {
  // 3 positions each of two 1000-byte tensors coded to 500 wire bytes, no compute; link 10 B/ns
  // (50 ns a copy), decode 20 B/ns (50 ns a decode). All streamed through one slot.
  auto in = uniform(3, 2, 1000, 0);
  in.decode_bytes_per_second = 2e10;
  for (auto& t : in.tensors) t.wire_bytes = 500;
  in.hbm_budget = 1u << 20;
  const auto plan = make_static_plan(in, {std::vector<bool>(6, false), 2048});
  // Six pieces per step, copies back to back (300 ns), each decode 50 ns behind its copy.
  EXPECT_DOUBLE_EQ(plan.predicted.link_ns, 300);
  EXPECT_DOUBLE_EQ(plan.predicted.decode_ns, 300);
  EXPECT_DOUBLE_EQ(plan.predicted.step_ns, 350);
  EXPECT_EQ(plan.streamed_bytes, 3000u);
  EXPECT_EQ(plan.wire_buffer_bytes, 512u);
}

/// Walks `steps` steps of `plan` in order, as the step program issues its loads, and checks that
/// each position finds every tensor it reads at its offset (a shadow of the arena).
void check_slots_hold_what_positions_read(const static_plan_input& in, const static_plan& plan) {
  std::vector<std::ptrdiff_t> holds(plan.arena_bytes / 256 + 1, -1);  // tensor per 256 bytes
  auto put = [&](std::size_t t, std::size_t offset) {                 // every block of the tensor
    for (std::size_t b = offset; b < offset + in.tensors[t].bytes; b += 256) {
      holds[b / 256] = static_cast<std::ptrdiff_t>(t);
    }
  };
  for (std::size_t t = 0; t < in.tensors.size(); ++t) {
    if (plan.resident_offset[t] != static_plan::npos) put(t, plan.resident_offset[t]);
  }
  // Primed: every use the step starts with (carried, or never reloaded), last to first so the
  // earliest use of shared bytes is the one there.
  for (std::size_t u = plan.uses.size(); u-- > 0;) {
    const auto& use = plan.uses[u];
    if (use.freed_by >= 0 && !use.carried) continue;
    for (std::size_t i = 0; i < use.tensors.size(); ++i) put(use.tensors[i], use.offsets[i]);
  }
  for (int step = 0; step < 3; ++step) {
    for (std::size_t p = 0; p < in.positions.size(); ++p) {
      for (const std::size_t t : in.positions[p].tensors) {
        const std::size_t at = plan.offset_of(t, p);
        for (std::size_t b = at; b < at + in.tensors[t].bytes; b += 256) {
          ASSERT_EQ(holds[b / 256], static_cast<std::ptrdiff_t>(t))
              << "step " << step << " position " << p << " ring " << plan.ring_bytes << " byte "
              << b - at << " of tensor " << t;
        }
      }
      for (const std::size_t next : plan.loads_after[p]) {
        const auto& use = plan.uses[next];
        for (std::size_t i = 0; i < use.tensors.size(); ++i) put(use.tensors[i], use.offsets[i]);
      }
    }
  }
}

TEST(static_plan, any_layer_count_with_any_ring_reads_the_right_bytes) {
  // vllm#54975: slots corrupted when the offloaded layers are not a multiple of k. Here every
  // ring from one use to all of them, in 256-byte steps, over mixed sizes.
  for (std::size_t layers = 1; layers <= 9; ++layers) {
    auto in = uniform(layers, 2, 512 + 256 * (layers % 3), 10);
    in.tensors.back().bytes += 700;  // the last layer larger
    in.hbm_budget = 1u << 24;
    std::vector<bool> resident(in.tensors.size(), false);
    resident[0] = true;  // one resident tensor among streamed ones
    const auto all = make_static_plan(in, {resident, 0});
    for (std::size_t ring = all.uses.back().bytes; ring <= all.ring_bytes; ring += 256) {
      check_slots_hold_what_positions_read(in, make_static_plan(in, {resident, ring}));
    }
  }
}

TEST(static_plan, tied_tensor_streams_at_each_read_or_stays_resident) {
  auto in = uniform(4, 1, 1024, 50);
  in.positions[3].tensors.push_back(0);  // tensor 0 read again at the last position (tied)
  in.hbm_budget = 1u << 20;
  const auto streamed = make_static_plan(in, {std::vector<bool>(4, false), 2048});
  EXPECT_EQ(streamed.streamed_bytes, 5u * 1024);  // 0, 1, 2, 3 and 0 again
  EXPECT_NE(streamed.offset_of(0, 0), streamed.offset_of(0, 3));
  check_slots_hold_what_positions_read(in, streamed);
  const auto resident = make_static_plan(in, {{true, false, false, false}, 2048});
  EXPECT_EQ(resident.offset_of(0, 0), resident.offset_of(0, 3));
  check_slots_hold_what_positions_read(in, resident);
}

TEST(static_plan, refuses_what_it_cannot_plan_with_typed_errors) {
  auto in = uniform(3, 2, 1024, 10);
  in.hbm_budget = 1u << 20;
  in.tensors[3].routed = true;
  try {
    plan_static(in);
    FAIL() << "a routed tensor was planned";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'l1.1' is routed"), std::string::npos) << e.what();
  }
  in.tensors[3].routed = false;
  in.hbm_budget = 1000;  // less than the smallest plan (a ring of one 2 KiB position)
  try {
    plan_static(in);
    FAIL() << "a plan over budget";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("needs 2048 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("raise the budget"), std::string::npos) << e.what();
  }
  in.hbm_budget = 1u << 20;
  in.link_bytes_per_second = 0;
  EXPECT_THROW(plan_static(in), invalid_argument);
  in.link_bytes_per_second = 1e9;
  in.tensors[0].wire_bytes = 100;  // coded without a decode rate
  EXPECT_THROW(plan_static(in), invalid_argument);
  in.tensors[0].wire_bytes = 0;
  EXPECT_THROW(make_static_plan(in, {std::vector<bool>(6, false), 1024}), invalid_argument)
      << "a ring smaller than the largest use";
  in.positions[0].tensors.push_back(99);
  EXPECT_THROW(plan_static(in), invalid_argument);
}

TEST(static_plan, model_sized_plan_beats_round_robin_and_nears_the_bound) {
  // 32 layers of 7 matrices (Llama-shaped proportions), one position per matrix as its GEMM runs,
  // compute proportional to the bytes read and comparable to the link.
  static_plan_input in;
  in.link_bytes_per_second = 50e9;
  const std::size_t sizes[] = {32, 8, 8, 32, 112, 112, 112};  // MiB
  std::size_t total = 0;
  std::vector<std::size_t> layer_of;  // round-robin streams whole layers, as vLLM does
  for (std::size_t l = 0; l < 32; ++l) {
    for (const std::size_t mib : sizes) {
      layer_of.push_back(l);
      in.positions.push_back({{in.tensors.size()}, 4e6 * static_cast<double>(mib) / 416});
      in.tensors.push_back({"w", mib << 20});
      total += mib << 20;
    }
  }
  for (const int pct : {30, 50, 75}) {
    in.hbm_budget = total / 100 * static_cast<std::size_t>(pct);
    const auto plan = plan_static(in);
    const double bound = static_step_bound_ns(in);
    double rr = INFINITY;
    for (const std::size_t k : {1, 2, 4}) {
      rr = std::min(rr, round_robin_plan(in, k, layer_of).predicted.step_ns);
    }
    std::printf("%d%%: static %.2f ms (its own bound %.2f), budget bound %.2f ms, "
                "round-robin best %.2f ms\n",
                pct, plan.predicted.step_ns / 1e6, plan.predicted.plan_bound_ns() / 1e6,
                bound / 1e6, rr / 1e6);
    EXPECT_LT(plan.predicted.step_ns, rr);
    EXPECT_LE(plan.predicted.step_ns, 1.05 * plan.predicted.plan_bound_ns()) << pct << "%";
    // Against the budget's bound, which no slot scheme reaches (its slots take HBM too).
    EXPECT_LE(plan.predicted.step_ns, 1.06 * bound) << pct << "%";
  }
}

}  // namespace
}  // namespace htp
