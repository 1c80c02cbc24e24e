// htp-moe-bench's routing trace. See routing.hpp.
#include "moe/routing.hpp"

#include <htp/error.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

namespace htp::bench {

std::vector<int> routing_trace::experts_of(int step, int layer) const {
  std::vector<int> out;
  for (const auto& token :
       choice[static_cast<std::size_t>(step)][static_cast<std::size_t>(layer)]) {
    out.insert(out.end(), token.begin(), token.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<double> routing_trace::rank_shares() const {
  const auto E = static_cast<std::size_t>(params.experts);
  // Per layer: each expert's count over the whole trace; layers rank their experts differently
  // (each permutes them), so each layer's counts are sorted before they are added up.
  std::vector<std::vector<double>> per_layer(static_cast<std::size_t>(params.layers),
                                             std::vector<double>(E, 0));
  for (const auto& step : choice) {
    for (std::size_t l = 0; l < step.size(); ++l) {
      for (const auto& token : step[l]) {
        for (int e : token) per_layer[l][static_cast<std::size_t>(e)] += 1;
      }
    }
  }
  std::vector<double> count(E, 0);
  double total = 0;
  for (auto& per : per_layer) {
    std::sort(per.rbegin(), per.rend());
    for (std::size_t i = 0; i < E; ++i) count[i] += per[i];
  }
  for (double c : count) total += c;
  for (double& c : count) c = total > 0 ? c / total : 0;
  return count;
}

routing_trace draw_routing(const routing_params& p) {
  if (p.layers < 1 || p.experts < 1 || p.top_k < 1 || p.tokens < 1 || p.steps < 1 ||
      p.top_k > p.experts || p.drift_every < 0) {
    throw invalid_argument("routing: layers, experts, top_k, tokens and steps must be >= 1, top_k "
                           "<= experts (" +
                           std::to_string(p.top_k) + " > " + std::to_string(p.experts) + "?)");
  }
  std::mt19937_64 rng(p.seed);
  const auto E = static_cast<std::size_t>(p.experts);
  std::vector<std::vector<int>> rank_to_expert(static_cast<std::size_t>(p.layers));
  for (auto& perm : rank_to_expert) {
    perm.resize(E);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
  }
  std::vector<double> weight(E);
  for (std::size_t r = 0; r < E; ++r)
    weight[r] = 1.0 / std::pow(static_cast<double>(r + 1), p.zipf_s);
  routing_trace t;
  t.params = p;
  t.choice.resize(static_cast<std::size_t>(p.steps));
  for (int s = 0; s < p.steps; ++s) {
    if (p.drift_every > 0 && s > 0 && s % p.drift_every == 0) {
      for (auto& perm : rank_to_expert) {
        const std::size_t r = std::uniform_int_distribution<std::size_t>(0, E - 2)(rng);
        std::swap(perm[r], perm[r + 1]);
      }
    }
    auto& step = t.choice[static_cast<std::size_t>(s)];
    step.resize(static_cast<std::size_t>(p.layers));
    for (int l = 0; l < p.layers; ++l) {
      for (int k = 0; k < p.tokens; ++k) {
        std::vector<double> w = weight;  // without replacement: a chosen rank's weight drops to 0
        std::vector<int> chosen;
        for (int c = 0; c < p.top_k; ++c) {
          std::discrete_distribution<std::size_t> pick(w.begin(), w.end());
          const std::size_t r = pick(rng);
          w[r] = 0;
          chosen.push_back(rank_to_expert[static_cast<std::size_t>(l)][r]);
        }
        std::sort(chosen.begin(), chosen.end());
        step[static_cast<std::size_t>(l)].push_back(chosen);
      }
    }
  }
  return t;
}

void write_routing(const routing_trace& t, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw invalid_argument("--trace-out " + path + ": cannot write it");
  const routing_params& p = t.params;
  out << "htp-moe-routing v1 layers " << p.layers << " experts " << p.experts << " top_k "
      << p.top_k << " tokens " << p.tokens << " steps " << p.steps << " zipf_s " << p.zipf_s
      << " drift_every " << p.drift_every << " seed " << p.seed << "\n";
  for (std::size_t s = 0; s < t.choice.size(); ++s) {
    for (std::size_t l = 0; l < t.choice[s].size(); ++l) {
      for (std::size_t k = 0; k < t.choice[s][l].size(); ++k) {
        out << s << ' ' << l << ' ' << k;
        for (int e : t.choice[s][l][k]) out << ' ' << e;
        out << '\n';
      }
    }
  }
  if (!out) throw invalid_argument("--trace-out " + path + ": write failed");
}

namespace {

/// Parses the header line of a routing file into `p`. @throws htp::invalid_argument.
void read_header(const std::string& line, const std::string& path, routing_params& p) {
  std::istringstream h(line);
  std::string magic, version, key;
  h >> magic >> version;
  if (magic != "htp-moe-routing" || version != "v1")
    throw invalid_argument("--trace-in " + path + ": not an htp-moe-routing v1 file");
  while (h >> key) {
    if (key == "layers")
      h >> p.layers;
    else if (key == "experts")
      h >> p.experts;
    else if (key == "top_k")
      h >> p.top_k;
    else if (key == "tokens")
      h >> p.tokens;
    else if (key == "steps")
      h >> p.steps;
    else if (key == "zipf_s")
      h >> p.zipf_s;
    else if (key == "drift_every")
      h >> p.drift_every;
    else if (key == "seed")
      h >> p.seed;
    else
      throw invalid_argument("--trace-in " + path + ": unknown header field '" + key + "'");
  }
  if (p.layers < 1 || p.experts < 1 || p.top_k < 1 || p.tokens < 1 || p.steps < 1 ||
      p.top_k > p.experts)
    throw invalid_argument("--trace-in " + path + ": header sizes out of range");
}

}  // namespace

routing_trace read_routing(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw invalid_argument("--trace-in " + path + ": cannot read it");
  routing_trace t;
  std::string line;
  if (!std::getline(in, line)) throw invalid_argument("--trace-in " + path + ": empty");
  read_header(line, path, t.params);
  const routing_params& p = t.params;
  t.choice.assign(static_cast<std::size_t>(p.steps),
                  std::vector<std::vector<std::vector<int>>>(
                      static_cast<std::size_t>(p.layers),
                      std::vector<std::vector<int>>(static_cast<std::size_t>(p.tokens))));
  std::size_t lines = 0;
  for (std::size_t n = 2; std::getline(in, line); ++n) {
    std::istringstream ls(line);
    int s = -1, l = -1, k = -1;
    std::vector<int> experts;
    ls >> s >> l >> k;
    for (int e; ls >> e;) experts.push_back(e);
    const bool ok =
        s >= 0 && s < p.steps && l >= 0 && l < p.layers && k >= 0 && k < p.tokens &&
        static_cast<int>(experts.size()) == p.top_k &&
        std::all_of(experts.begin(), experts.end(), [&](int e) { return e >= 0 && e < p.experts; });
    if (!ok)
      throw invalid_argument("--trace-in " + path + ": line " + std::to_string(n) + " malformed");
    t.choice[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)]
            [static_cast<std::size_t>(k)] = experts;
    ++lines;
  }
  if (lines != static_cast<std::size_t>(p.steps) * static_cast<std::size_t>(p.layers) *
                   static_cast<std::size_t>(p.tokens))
    throw invalid_argument("--trace-in " + path + ": " + std::to_string(lines) +
                           " routing lines, the header implies more");
  return t;
}

}  // namespace htp::bench
