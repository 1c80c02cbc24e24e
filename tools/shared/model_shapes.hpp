// Model presets for the benchmarks and tools: the shapes of published decoder-only transformers
// (Llama 3.1, Mixtral, GPT-3/OPT-175B), a reader for Hugging Face config.json files, and the
// tensors and parameter counts those shapes imply. Plain value types; nothing here touches a
// device. Counting rules and the published sizes they reproduce: docs/planner.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace htp::bench {

/// Element type of the weights.
enum class dtype { bf16, fp16, fp8, int8 };

/// Bytes one element of `t` occupies (2 for bf16/fp16, 1 for fp8/int8).
std::size_t bytes_per_element(dtype t) noexcept;

/// The name parse_dtype accepts for `t`: "bf16", "fp16", "fp8" or "int8".
const char* to_string(dtype t) noexcept;

/// Parses a dtype name (as printed by to_string). Throws htp::invalid_argument naming the value
/// and listing the valid names.
dtype parse_dtype(const std::string& name);

/// The shape of a decoder-only transformer: what the parameter count and the bytes per layer
/// follow from. Dimensions are the model's, before any tensor-parallel split.
struct model_shape {
  std::string name;
  int layers = 0, hidden = 0, intermediate = 0, heads = 0, kv_heads = 0, vocab = 0;
  int experts = 1, experts_per_token = 1;  // MoE (Mixtral: 8, top-2)
  bool gated_mlp = true;         // SwiGLU (3 matrices) vs classic 2-matrix MLP (GPT-3/OPT)
  bool tied_embeddings = false;  // lm_head shares the embedding matrix
  int max_positions = 0;         // learned position embeddings (OPT/GPT-3: 2048), 0 = rotary
  bool biases = false;           // GPT-3/OPT: biases in linear layers, layer norms with bias
};

/// One tensor of a layer: a matrix of rows x cols elements, or a vector (rows = 1).
struct layer_tensor {
  std::string name;
  std::uint64_t rows = 0, cols = 0;
};

/// The preset names preset() accepts, aliases included, in a stable order.
std::vector<std::string> preset_names();

/// The shape of a published model ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
/// "mixtral-8x7b", "gpt3-175b" alias "opt-175b"). Case-insensitive. Throws htp::invalid_argument
/// naming the unknown preset and listing the valid ones.
model_shape preset(const std::string& name);

/// Reads a Hugging Face config.json (Llama/Mistral/Mixtral/Qwen-style keys, OPT and GPT-2 keys).
/// Throws htp::invalid_argument naming the file when it is missing or not JSON, and naming the
/// field when a required one is missing or out of range. The name is `_name_or_path` when
/// present, else the file's parent directory name.
model_shape from_hf_config(const std::string& path);

/// Checks a shape for values the counting below cannot use (non-positive sizes, hidden not a
/// multiple of heads, heads not a multiple of kv_heads, experts_per_token > experts). Throws
/// htp::invalid_argument naming the field and its value.
void validate(const model_shape& m);

/// The tensors of ONE decoder layer, in execution order: norms, attention q/k/v/o (with biases
/// when m.biases), then the MLP (gate/up/down, or fc1/fc2) or, for MoE, the router and each
/// expert's matrices. GQA: k and v are hidden x (kv_heads * hidden / heads). Calls validate().
std::vector<layer_tensor> layer_tensors(const model_shape& m);

/// Parameters of one decoder layer: the sum of layer_tensors(m) elements.
std::uint64_t layer_parameters(const model_shape& m);

/// Parameters outside the layers: token embeddings, learned position embeddings (if any), the
/// lm_head (unless tied) and the final norm.
std::uint64_t embedding_parameters(const model_shape& m);

/// layers * layer_parameters + embedding_parameters.
std::uint64_t total_parameters(const model_shape& m);

/// Parameters one token uses: as total_parameters, but of each layer's experts only
/// experts_per_token count (the router counts in full). Equals total_parameters for dense models.
std::uint64_t active_parameters_per_token(const model_shape& m);

}  // namespace htp::bench
