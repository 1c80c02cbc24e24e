// htp-compress: writes the compressed companion of a safetensors file (htp/companion.hpp),
// which pager::register_compressed_file_tensor pages in and decodes. Prints the index's totals.
#include <htp/companion.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  CLI::App app{"htp-compress: a compressed companion of a safetensors file"};
  std::string in;
  std::string out;
  std::size_t pager_chunk = std::size_t{2} << 20;
  unsigned threads = 1;
  app.add_option("input", in, "the safetensors file")->required();
  app.add_option("output", out, "the companion to write")->required();
  app.add_option("--pager-chunk-bytes", pager_chunk,
                 "pager_config::chunk_bytes of the pager that will read it (pieces must fit one)")
      ->capture_default_str();
  app.add_option("--threads", threads, "encoding threads")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const auto t0 = std::chrono::steady_clock::now();
    const auto idx =
        htp::companion::write(in, out, htp::companion::codec_chunk_for(pager_chunk), threads);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::size_t logical = 0;
    std::size_t wire = 0;
    for (const auto& [name, e] : idx.tensors) {
      logical += e.bytes;
      wire += e.wire_bytes;
    }
    std::printf("%zu tensors compressed (%zu skipped): %zu -> %zu bytes (ratio %.4f) in %.2f s\n",
                idx.tensors.size(), idx.skipped.size(), logical, wire,
                logical ? static_cast<double>(wire) / static_cast<double>(logical) : 0.0, s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "htp-compress: %s\n", e.what());
    return 1;
  }
  return 0;
}
