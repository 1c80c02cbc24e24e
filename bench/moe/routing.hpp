// htp-moe-bench's routing trace: which experts each token of each decode step routes to, per layer.
// Drawn from a seeded, skewed popularity (Zipf over a per-layer permutation of the experts, which
// may drift), recorded to a file and replayed from one, so every policy and the offline oracle see
// the same accesses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace htp::bench {

/// How the trace is drawn.
struct routing_params {
  int layers = 4, experts = 8, top_k = 2, tokens = 1, steps = 40;
  double zipf_s = 1.1;  ///< popularity of the expert of rank r (from 0): 1 / (r + 1)^s
  int drift_every = 0;  ///< every this many steps, two neighbouring ranks swap per layer; 0: never
  std::uint64_t seed = 1;
};

/// The realised routing: choice[step][layer][token] = the top_k distinct experts of that token.
struct routing_trace {
  routing_params params;
  std::vector<std::vector<std::vector<std::vector<int>>>> choice;

  /// The distinct experts any token of `step` routes to in `layer`, in ascending order.
  std::vector<int> experts_of(int step, int layer) const;
  /// Each expert's share of the routed (token, layer) slots over the whole trace, most popular
  /// first (how skewed the drawn popularity is).
  std::vector<double> rank_shares() const;
};

/// Draws a trace: each layer ranks the experts by a seeded permutation; each token picks top_k
/// distinct experts with probability proportional to 1 / (rank + 1)^s (sampling without
/// replacement), the ranks drifting as params say.
/// @throws htp::invalid_argument for sizes that cannot route (top_k > experts, non-positive ones).
routing_trace draw_routing(const routing_params& params);

/// Writes the trace as text: a header line with the parameters, then one line per (step, layer,
/// token): "step layer token e1 e2 ...". @throws htp::invalid_argument when it cannot be written.
void write_routing(const routing_trace& t, const std::string& path);

/// Reads a trace written by write_routing. @throws htp::invalid_argument naming the file and the
/// line when it is missing or malformed.
routing_trace read_routing(const std::string& path);

}  // namespace htp::bench
