// Model presets: exact parameter counts, closeness to the published sizes, the tensor lists, and
// reading Hugging Face config.json files (including broken ones).
#include "shared/model_shapes.hpp"

#include <htp/error.hpp>

#include <gtest/gtest.h>

#include "throws_naming.hpp"

#include <cmath>
#include <string>

namespace {

using namespace htp::bench;

const std::string data_dir = HTP_TEST_DATA_DIR;

using htp::test::throws_naming;

double billions(std::uint64_t n) { return static_cast<double>(n) / 1e9; }

TEST(model_shapes, Dtypes) {
  EXPECT_EQ(bytes_per_element(dtype::bf16), 2u);
  EXPECT_EQ(bytes_per_element(dtype::fp16), 2u);
  EXPECT_EQ(bytes_per_element(dtype::fp8), 1u);
  EXPECT_EQ(bytes_per_element(dtype::int8), 1u);
  for (dtype t : {dtype::bf16, dtype::fp16, dtype::fp8, dtype::int8}) {
    EXPECT_EQ(parse_dtype(to_string(t)), t);
  }
  EXPECT_EQ(parse_dtype("BF16"), dtype::bf16);
  EXPECT_TRUE(throws_naming([] { parse_dtype("fp4"); }, {"fp4", "bf16", "int8"}));
}

// Exact counts from the published configurations (derivation in docs/planner.md); the published
// model sizes are these rounded.
TEST(model_shapes, Llama31Counts) {
  const auto m8 = preset("llama-3.1-8b");
  EXPECT_EQ(layer_parameters(m8), 218'112'000u);
  EXPECT_EQ(total_parameters(m8), 8'030'261'248u);
  EXPECT_NEAR(billions(total_parameters(m8)), 8.03, 0.005);
  const auto m70 = preset("llama-3.1-70b");
  EXPECT_EQ(layer_parameters(m70), 855'654'400u);
  EXPECT_EQ(total_parameters(m70), 70'553'706'496u);
  EXPECT_NEAR(billions(total_parameters(m70)), 70.6, 0.05);
  const auto m405 = preset("llama-3.1-405b");
  EXPECT_EQ(layer_parameters(m405), 3'187'703'808u);
  EXPECT_EQ(total_parameters(m405), 405'853'388'800u);
  EXPECT_NEAR(billions(total_parameters(m405)), 405.9, 0.05);
  for (const auto& m : {m8, m70, m405}) {
    EXPECT_EQ(active_parameters_per_token(m), total_parameters(m)) << m.name;
    EXPECT_EQ(embedding_parameters(m), 2ull * 128256 * m.hidden + m.hidden) << m.name;
  }
}

TEST(model_shapes, MixtralCounts) {
  const auto m = preset("mixtral-8x7b");
  EXPECT_EQ(layer_parameters(m), 1'451'270'144u);
  EXPECT_EQ(total_parameters(m), 46'702'792'704u);
  EXPECT_EQ(active_parameters_per_token(m), 12'879'925'248u);
  EXPECT_NEAR(billions(total_parameters(m)), 46.7, 0.05);
  EXPECT_NEAR(billions(active_parameters_per_token(m)), 12.9, 0.05);
}

TEST(model_shapes, Gpt3AndOpt175bCounts) {
  const auto g = preset("gpt3-175b");
  const auto o = preset("opt-175b");
  EXPECT_EQ(o.name, "opt-175b");
  EXPECT_EQ(layer_parameters(g), 1'812'099'072u);
  EXPECT_EQ(embedding_parameters(g), 642'932'736u);
  EXPECT_EQ(total_parameters(g), 174'604'443'648u);
  EXPECT_EQ(total_parameters(o), total_parameters(g));
  // "175B" is a rounded figure: within 0.5%.
  EXPECT_NEAR(billions(total_parameters(g)) / 175.0, 1.0, 0.005);
  EXPECT_FALSE(g.gated_mlp);
  EXPECT_TRUE(g.biases);
  EXPECT_EQ(g.max_positions, 2048);
}

TEST(model_shapes, LayerTensorsSumToLayerParameters) {
  for (const auto& name : preset_names()) {
    const auto m = preset(name);
    std::uint64_t sum = 0;
    for (const auto& t : layer_tensors(m)) {
      EXPECT_GT(t.rows * t.cols, 0u) << name << " " << t.name;
      sum += t.rows * t.cols;
    }
    EXPECT_EQ(sum, layer_parameters(m)) << name;
    EXPECT_EQ(total_parameters(m), m.layers * layer_parameters(m) + embedding_parameters(m))
        << name;
  }
}

TEST(model_shapes, TensorShapes) {
  const auto m = preset("llama-3.1-70b");
  const auto t = layer_tensors(m);
  ASSERT_EQ(t.size(), 9u);  // 2 norms, q k v o, gate up down
  auto find = [&](const std::string& name) {
    for (const auto& x : t) {
      if (x.name == name) return x;
    }
    ADD_FAILURE() << "no tensor " << name;
    return layer_tensor{};
  };
  EXPECT_EQ(find("attn.k_proj.weight").rows, 8192u);
  EXPECT_EQ(find("attn.k_proj.weight").cols, 1024u);  // GQA: 8 KV heads x 128
  EXPECT_EQ(find("attn.q_proj.weight").cols, 8192u);
  EXPECT_EQ(find("mlp.down_proj.weight").rows, 28672u);
  EXPECT_EQ(find("attn_norm.weight").rows, 1u);
  const auto mix = layer_tensors(preset("mixtral-8x7b"));
  EXPECT_EQ(mix.size(), 2u + 4u + 1u + 8u * 3u);  // norms, attention, router, 8 experts x 3
  const auto gpt = layer_tensors(preset("gpt3-175b"));
  EXPECT_EQ(gpt.size(), 4u + 8u + 4u);  // 2 norms + biases, q k v o + biases, fc1 fc2 + biases
}

TEST(model_shapes, PresetsAreCaseInsensitiveAndUnknownOnesAreNamed) {
  EXPECT_EQ(preset("Llama-3.1-8B").layers, 32);
  EXPECT_TRUE(throws_naming([] { preset("llama-4"); }, {"llama-4", "llama-3.1-8b", "opt-175b"}));
}

TEST(model_shapes, ValidateNamesTheBadField) {
  auto m = preset("llama-3.1-8b");
  m.kv_heads = 5;
  EXPECT_TRUE(throws_naming([&] { layer_parameters(m); }, {"kv_heads = 5"}));
  m = preset("mixtral-8x7b");
  m.experts_per_token = 9;
  EXPECT_TRUE(throws_naming([&] { validate(m); }, {"experts_per_token = 9"}));
  m = preset("llama-3.1-8b");
  m.layers = 0;
  EXPECT_TRUE(throws_naming([&] { total_parameters(m); }, {"layers = 0"}));
}

TEST(model_shapes, ConfigJsonMatchesPresets) {
  const auto l = from_hf_config(data_dir + "/llama-3.1-8b.config.json");
  EXPECT_EQ(l.name, "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(total_parameters(l), total_parameters(preset("llama-3.1-8b")));
  EXPECT_FALSE(l.tied_embeddings);
  const auto x = from_hf_config(data_dir + "/mixtral-8x7b.config.json");
  EXPECT_EQ(x.experts, 8);
  EXPECT_EQ(x.experts_per_token, 2);
  EXPECT_EQ(total_parameters(x), total_parameters(preset("mixtral-8x7b")));
  EXPECT_EQ(active_parameters_per_token(x), active_parameters_per_token(preset("mixtral-8x7b")));
  const auto o = from_hf_config(data_dir + "/opt-175b.config.json");
  EXPECT_FALSE(o.gated_mlp);
  EXPECT_TRUE(o.biases);
  EXPECT_TRUE(o.tied_embeddings);  // transformers' default; OPT's config omits the key
  EXPECT_EQ(o.max_positions, 2048);
  EXPECT_EQ(total_parameters(o), total_parameters(preset("opt-175b")));
}

TEST(model_shapes, BadConfigJsonIsNamed) {
  const std::string missing = data_dir + "/no-such.config.json";
  EXPECT_TRUE(
      throws_naming([&] { from_hf_config(missing); }, {"no-such.config.json", "cannot be opened"}));
  const std::string malformed = data_dir + "/malformed.config.json";
  EXPECT_TRUE(throws_naming([&] { from_hf_config(malformed); },
                            {"malformed.config.json", "not valid JSON"}));
  const std::string no_layers = data_dir + "/missing-field.config.json";
  EXPECT_TRUE(
      throws_naming([&] { from_hf_config(no_layers); }, {"num_hidden_layers", "missing field"}));
}

}  // namespace
