// Fuzz target: the weight codec. An even first byte: the rest is weights of a format the second
// byte picks, encoded with small chunks and blocks; the decode must give them back bit for bit. An
// odd first byte: the rest is a frame, decoded as is (its size from its own header); it must
// decode or throw htp::corrupt_data, never read outside the bytes (ASan in the fuzz build).
#include "fuzz_input.hpp"

#include <htp/codec.hpp>
#include <htp/error.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

void round_trip(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return;
  const auto format = static_cast<htp::weight_format>(1 + data[0] % 3);
  htp::codec_options o;
  o.chunk_bytes = 4096;
  o.block_elements = 64 + data[0] % 7;
  const std::vector<std::uint8_t> frame = htp::encode_weights(data + 1, size - 1, format, o);
  HTP_FUZZ_CHECK(frame.size() <= htp::max_encoded_bytes(size - 1, o), "frame over its bound");
  std::vector<std::uint8_t> back(size - 1);
  htp::decode_weights(frame.data(), frame.size(), back.data(), back.size());
  HTP_FUZZ_CHECK(size == 1 || std::memcmp(back.data(), data + 1, size - 1) == 0,
                 "round trip changed the weights");
}

void decode_any(const std::uint8_t* data, std::size_t size) {
  // A copy of exactly `size` bytes, so ASan sees any read past the end.
  std::vector<std::uint8_t> wire(data, data + size);
  try {
    const htp::frame_view f = htp::parse_frame(wire.data(), wire.size());
    if (f.decoded_bytes() > (std::size_t{64} << 20)) return;  // a claimed size, not a real one
    std::vector<std::uint8_t> out(f.decoded_bytes());
    htp::decode_weights(wire.data(), wire.size(), out.data(), out.size());
  } catch (const htp::corrupt_data&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    round_trip(data + 1, size - 1);
  } else {
    decode_any(data + 1, size - 1);
  }
  return 0;
}
