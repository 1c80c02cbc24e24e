// Model presets, config.json reading and parameter counting. The preset numbers are the published
// configurations (Hugging Face config.json of each model; GPT-3 from Brown et al. 2020, table 2.1,
// which OPT-175B copies); the counts they give are pinned in tests/model_shapes_test.cpp.
#include "shared/model_shapes.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <utility>

namespace htp::bench {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

model_shape llama(std::string name, int layers, int hidden, int intermediate, int heads) {
  model_shape m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.intermediate = intermediate;
  m.heads = heads;
  m.kv_heads = 8;
  m.vocab = 128256;
  return m;
}

model_shape gpt3_175b() {
  model_shape m;
  m.name = "gpt3-175b";
  m.layers = 96;
  m.hidden = 12288;
  m.intermediate = 49152;
  m.heads = 96;
  m.kv_heads = 96;
  m.vocab = 50272;  // OPT-175B's padded GPT-2 vocabulary
  m.gated_mlp = false;
  m.tied_embeddings = true;
  m.max_positions = 2048;
  m.biases = true;
  return m;
}

model_shape mixtral_8x7b() {
  model_shape m;
  m.name = "mixtral-8x7b";
  m.layers = 32;
  m.hidden = 4096;
  m.intermediate = 14336;
  m.heads = 32;
  m.kv_heads = 8;
  m.vocab = 32000;
  m.experts = 8;
  m.experts_per_token = 2;
  return m;
}

const nlohmann::json* find_key(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    const auto it = j.find(k);
    if (it != j.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

std::string key_list(std::initializer_list<const char*> keys) {
  std::string out;
  for (const char* k : keys) out += (out.empty() ? "\"" : " or \"") + std::string(k) + "\"";
  return out;
}

/// The first present key as a positive int; `fallback` when none is present (< 0: required).
int int_field(const nlohmann::json& j, const std::string& path,
              std::initializer_list<const char*> keys, int fallback = -1) {
  const nlohmann::json* v = find_key(j, keys);
  if (v == nullptr) {
    HTP_EXPECTS(fallback >= 0, htp::invalid_argument, "config.json '", path, "': missing field ",
                key_list(keys), "; add it (a positive integer) to the file");
    return fallback;
  }
  HTP_EXPECTS(
      v->is_number_integer() && v->get<long long>() > 0 && v->get<long long>() <= 1'000'000'000,
      htp::invalid_argument, "config.json '", path, "': field ", key_list(keys), " is ", v->dump(),
      "; it must be a positive integer");
  return static_cast<int>(v->get<long long>());
}

bool bool_field(const nlohmann::json& j, const std::string& path, const char* key, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  HTP_EXPECTS(it->is_boolean(), htp::invalid_argument, "config.json '", path, "': field \"", key,
              "\" is ", it->dump(), "; it must be true or false");
  return it->get<bool>();
}

}  // namespace

std::size_t bytes_per_element(dtype t) noexcept {
  switch (t) {
    case dtype::bf16:
    case dtype::fp16: return 2;
    case dtype::fp8:
    case dtype::int8: return 1;
  }
  return 2;
}

const char* to_string(dtype t) noexcept {
  switch (t) {
    case dtype::bf16: return "bf16";
    case dtype::fp16: return "fp16";
    case dtype::fp8: return "fp8";
    case dtype::int8: return "int8";
  }
  return "?";
}

dtype parse_dtype(const std::string& name) {
  const std::string n = lower(name);
  for (dtype t : {dtype::bf16, dtype::fp16, dtype::fp8, dtype::int8}) {
    if (n == to_string(t)) return t;
  }
  throw htp::invalid_argument("unknown dtype '" + name + "'; valid: bf16, fp16, fp8, int8");
}

std::vector<std::string> preset_names() {
  return {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
          "mixtral-8x7b", "gpt3-175b",     "opt-175b"};
}

model_shape preset(const std::string& name) {
  const std::string n = lower(name);
  if (n == "llama-3.1-8b") return llama("llama-3.1-8b", 32, 4096, 14336, 32);
  if (n == "llama-3.1-70b") return llama("llama-3.1-70b", 80, 8192, 28672, 64);
  if (n == "llama-3.1-405b") return llama("llama-3.1-405b", 126, 16384, 53248, 128);
  if (n == "mixtral-8x7b") return mixtral_8x7b();
  if (n == "gpt3-175b") return gpt3_175b();
  if (n == "opt-175b") {
    model_shape m = gpt3_175b();
    m.name = "opt-175b";
    return m;
  }
  throw htp::invalid_argument("unknown model preset '" + name +
                              "'; valid: " + joined(preset_names()) + " (or pass a config.json)");
}

model_shape from_hf_config(const std::string& path) {
  std::ifstream in(path);
  HTP_EXPECTS(in.good(), htp::invalid_argument, "config.json '", path,
              "' cannot be opened; pass the path of a Hugging Face config.json");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw htp::invalid_argument("config.json '" + path + "' is not valid JSON (" + e.what() +
                                "); fix the file or use a preset");
  }
  HTP_EXPECTS(j.is_object(), htp::invalid_argument, "config.json '", path,
              "' is not a JSON object; expected the Hugging Face model config");

  std::string type;
  if (const auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    type = lower(it->get<std::string>());
  }
  const bool classic = type == "opt" || type == "gpt2" || type == "gpt_neox" || type == "gptj";

  model_shape m;
  if (const auto it = j.find("_name_or_path");
      it != j.end() && it->is_string() && !it->get<std::string>().empty()) {
    m.name = it->get<std::string>();
  } else {
    const std::filesystem::path p(path);
    m.name = p.parent_path().filename().string();
    if (m.name.empty()) m.name = p.stem().string();
  }
  m.layers = int_field(j, path, {"num_hidden_layers", "n_layer", "num_layers"});
  m.hidden = int_field(j, path, {"hidden_size", "n_embd", "d_model"});
  m.heads = int_field(j, path, {"num_attention_heads", "n_head"});
  m.kv_heads = int_field(j, path, {"num_key_value_heads"}, m.heads);
  m.intermediate = int_field(j, path, {"intermediate_size", "ffn_dim", "n_inner"},
                             type == "gpt2" ? 4 * m.hidden : -1);
  m.vocab = int_field(j, path, {"vocab_size"});
  m.experts = int_field(j, path, {"num_local_experts"}, 1);
  m.experts_per_token = int_field(j, path, {"num_experts_per_tok"}, m.experts > 1 ? 2 : 1);
  // transformers' PretrainedConfig ties by default; the Llama/Mistral family's configs do not.
  const bool untied_family = type == "llama" || type == "mistral" || type == "mixtral";
  m.tied_embeddings = bool_field(j, path, "tie_word_embeddings", !untied_family);
  m.gated_mlp = !classic;
  m.biases = classic;
  if (classic) m.max_positions = int_field(j, path, {"max_position_embeddings", "n_positions"});
  try {
    validate(m);
  } catch (const htp::invalid_argument& e) {
    throw htp::invalid_argument("config.json '" + path + "': " + e.what());
  }
  return m;
}

void validate(const model_shape& m) {
  const std::pair<const char*, int> positive[] = {{"layers", m.layers},
                                                  {"hidden", m.hidden},
                                                  {"intermediate", m.intermediate},
                                                  {"heads", m.heads},
                                                  {"kv_heads", m.kv_heads},
                                                  {"vocab", m.vocab},
                                                  {"experts", m.experts},
                                                  {"experts_per_token", m.experts_per_token}};
  for (const auto& [field, value] : positive) {
    HTP_EXPECTS(value > 0, htp::invalid_argument, "model '", m.name, "': ", field, " = ", value,
                " must be positive");
  }
  HTP_EXPECTS(m.max_positions >= 0, htp::invalid_argument, "model '", m.name,
              "': max_positions = ", m.max_positions, " must be >= 0 (0 = rotary)");
  HTP_EXPECTS(m.hidden % m.heads == 0, htp::invalid_argument, "model '", m.name,
              "': hidden = ", m.hidden, " is not a multiple of heads = ", m.heads);
  HTP_EXPECTS(m.heads % m.kv_heads == 0, htp::invalid_argument, "model '", m.name,
              "': heads = ", m.heads, " is not a multiple of kv_heads = ", m.kv_heads);
  HTP_EXPECTS(m.experts_per_token <= m.experts, htp::invalid_argument, "model '", m.name,
              "': experts_per_token = ", m.experts_per_token, " exceeds experts = ", m.experts);
}

std::vector<layer_tensor> layer_tensors(const model_shape& m) {
  validate(m);
  const auto h = static_cast<std::uint64_t>(m.hidden);
  const auto ffn = static_cast<std::uint64_t>(m.intermediate);
  const std::uint64_t kv = static_cast<std::uint64_t>(m.kv_heads) * (h / m.heads);
  std::vector<layer_tensor> t;
  // Matrices are (input features) x (output features); vectors are 1 x n.
  auto linear = [&](const std::string& name, std::uint64_t in, std::uint64_t out) {
    t.push_back({name + ".weight", in, out});
    if (m.biases) t.push_back({name + ".bias", 1, out});
  };
  auto norm = [&](const std::string& name) {
    t.push_back({name + ".weight", 1, h});
    if (m.biases) t.push_back({name + ".bias", 1, h});
  };
  norm("attn_norm");
  linear("attn.q_proj", h, h);
  linear("attn.k_proj", h, kv);
  linear("attn.v_proj", h, kv);
  linear("attn.o_proj", h, h);
  norm("mlp_norm");
  auto mlp = [&](const std::string& prefix) {
    if (m.gated_mlp) {
      linear(prefix + "gate_proj", h, ffn);
      linear(prefix + "up_proj", h, ffn);
      linear(prefix + "down_proj", ffn, h);
    } else {
      linear(prefix + "fc1", h, ffn);
      linear(prefix + "fc2", ffn, h);
    }
  };
  if (m.experts == 1) {
    mlp("mlp.");
  } else {
    t.push_back({"moe.router.weight", h, static_cast<std::uint64_t>(m.experts)});
    for (int e = 0; e < m.experts; ++e) mlp("moe.experts." + std::to_string(e) + ".");
  }
  return t;
}

std::uint64_t layer_parameters(const model_shape& m) {
  std::uint64_t n = 0;
  for (const auto& t : layer_tensors(m)) n += t.rows * t.cols;
  return n;
}

std::uint64_t embedding_parameters(const model_shape& m) {
  validate(m);
  const auto h = static_cast<std::uint64_t>(m.hidden);
  const auto v = static_cast<std::uint64_t>(m.vocab);
  std::uint64_t n = v * h;                               // token embeddings
  n += static_cast<std::uint64_t>(m.max_positions) * h;  // learned positions
  if (!m.tied_embeddings) n += v * h;                    // lm_head
  n += m.biases ? 2 * h : h;                             // final norm
  return n;
}

std::uint64_t total_parameters(const model_shape& m) {
  return static_cast<std::uint64_t>(m.layers) * layer_parameters(m) + embedding_parameters(m);
}

std::uint64_t active_parameters_per_token(const model_shape& m) {
  std::uint64_t per_layer = 0;
  const std::string expert_prefix = "moe.experts.";
  for (const auto& t : layer_tensors(m)) {
    if (t.name.compare(0, expert_prefix.size(), expert_prefix) == 0) {
      const int e = std::stoi(t.name.substr(expert_prefix.size()));
      if (e >= m.experts_per_token) continue;  // experts are the same size: count the first k
    }
    per_layer += t.rows * t.cols;
  }
  return static_cast<std::uint64_t>(m.layers) * per_layer + embedding_parameters(m);
}

}  // namespace htp::bench
