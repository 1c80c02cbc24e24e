// DLPack dtypes by name: the names torch and numpy print, and the ones safetensors headers use.
#include "bindings.hpp"

#include <htp/error.hpp>

#include <array>

namespace htp::python {
namespace {

using code = nb::dlpack::dtype_code;

struct named_dtype {
  const char* name;
  const char* safetensors;
  code type;
  std::uint8_t bits;
};

constexpr std::array<named_dtype, 13> k_dtypes{{
    {"float32", "F32", code::Float, 32},
    {"float16", "F16", code::Float, 16},
    {"bfloat16", "BF16", code::Bfloat, 16},
    {"float64", "F64", code::Float, 64},
    {"int8", "I8", code::Int, 8},
    {"int16", "I16", code::Int, 16},
    {"int32", "I32", code::Int, 32},
    {"int64", "I64", code::Int, 64},
    {"uint8", "U8", code::UInt, 8},
    {"uint16", "U16", code::UInt, 16},
    {"uint32", "U32", code::UInt, 32},
    {"uint64", "U64", code::UInt, 64},
    {"bool", "BOOL", code::Bool, 8},
}};

}  // namespace

std::string dtype_name(nb::dlpack::dtype d) {
  for (const auto& n : k_dtypes) {
    if (d.code == static_cast<std::uint8_t>(n.type) && d.bits == n.bits && d.lanes == 1)
      return n.name;
  }
  throw htp::invalid_argument(
      "htp: unsupported dtype (DLPack code " + std::to_string(d.code) + ", " +
      std::to_string(d.bits) + " bits, " + std::to_string(d.lanes) +
      " lanes); register its bytes as uint8 and view them in your framework");
}

nb::dlpack::dtype dtype_from_name(const std::string& name) {
  for (const auto& n : k_dtypes) {
    if (name == n.name || name == n.safetensors) {
      nb::dlpack::dtype d{};
      d.code = static_cast<std::uint8_t>(n.type);
      d.bits = n.bits;
      d.lanes = 1;
      return d;
    }
  }
  throw htp::invalid_argument("htp: unknown dtype '" + name +
                              "'; use one of float32, float16, bfloat16, float64, int8..int64, "
                              "uint8..uint64, bool (or the safetensors names F32, BF16, ...)");
}

// The codec format of an array's dtype: compression takes bf16, fp16 and fp32 weights.
weight_format weight_format_of(nb::dlpack::dtype d, const std::string& name) {
  using code = nb::dlpack::dtype_code;
  const auto c = static_cast<code>(d.code);
  if (c == code::Bfloat && d.bits == 16) return weight_format::bf16;
  if (c == code::Float && d.bits == 16) return weight_format::fp16;
  if (c == code::Float && d.bits == 32) return weight_format::fp32;
  throw htp::invalid_argument("register '" + name + "' with compress=True: the codec takes " +
                              "bfloat16, float16 or float32 weights, not " + dtype_name(d) +
                              "; register it without compress");
}

}  // namespace htp::python
