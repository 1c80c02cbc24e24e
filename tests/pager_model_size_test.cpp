// Tensors of real-model size on sim: a Llama-3.1-405B layer (1.74 GB MLP matrices) paged from
// caller memory and the Llama-3.1-70B embedding (2.1 GB) paged from the host tier, through a 2 GiB
// HBM budget. The binary runs alone (RUN_SERIAL, tests/pager.cmake): it commits about 4.3 GB.
//
// Memory discipline, so that the test costs what it says on any Linux: the "model" is anonymous
// memory mapped without huge pages, written only at each tensor's two ends; reading the rest maps
// the kernel's shared zero page, so a 5.9 GB layer commits a few pages. (With transparent huge
// pages a read fault may commit a whole zeroed 2 MiB page instead, and the layer would cost its
// full size.) The committed memory is the sim HBM (what is written into it) and the host-tier copy
// of the embedding.
#include "pager_fixture.hpp"

#include <htp/checksum.hpp>

#include <sys/mman.h>
#include <algorithm>
#include <fstream>
#include <string>

namespace htp::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

/// Anonymous memory the kernel commits only where it is written (no huge pages): multi-GB
/// "models" cost little.
struct lazy_buffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  explicit lazy_buffer(std::size_t b) : bytes(b) {
    p = ::mmap(nullptr, b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
               0);
    if (p == MAP_FAILED) {
      p = nullptr;
      return;
    }
    ::madvise(p, b,
              MADV_NOHUGEPAGE);  // read faults map the 4 KiB zero page, never a fresh huge page
  }
  lazy_buffer(const lazy_buffer&) = delete;
  lazy_buffer& operator=(const lazy_buffer&) = delete;
  ~lazy_buffer() {
    if (p) ::munmap(p, bytes);
  }
  char* at(std::size_t off) const { return static_cast<char*>(p) + off; }
};

/// Marks a few bytes at both ends of [p, p + n) so a checksum tells tensors (and offsets) apart.
void mark(char* p, std::size_t n, std::uint64_t seed) {
  fill_pattern(p, 4096, seed);
  fill_pattern(p + n - 4096, 4096, seed + 1);
}

/// Reads the first number in `path`; 0 when it cannot.
std::size_t read_number(const char* path) {
  std::ifstream in(path);
  std::size_t v = 0;
  in >> v;
  return in ? v : 0;
}

/// Memory this process may still commit, in bytes: /proc/meminfo's MemAvailable, lowered to what
/// the cgroup's limit leaves (v2 memory.max, v1 memory.limit_in_bytes) when one is set; 0 when
/// nothing can be read.
std::size_t available_memory() {
  std::size_t avail = 0;
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  std::size_t kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      avail = kib * 1024;
      break;
    }
  }
  const std::pair<const char*, const char*> cgroups[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
       "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& [limit_path, usage_path] : cgroups) {
    const std::size_t limit = read_number(limit_path), usage = read_number(usage_path);
    if (limit != 0 && limit > usage && limit < (std::size_t{1} << 60)) {
      avail = avail == 0 ? limit - usage : std::min(avail, limit - usage);
    }
  }
  return avail;
}

std::unique_ptr<device> big_sim_device(std::size_t hbm) {
  sim_config c;
  c.device_memory_bytes = hbm;
  c.poison_byte = -1;  // leave untouched pages uncommitted
  return make_sim_device(c);
}

pager_config big_config(std::size_t hbm, std::size_t host) {
  pager_config c;
  c.hbm_budget_bytes = hbm;
  c.host_budget_bytes = host;
  c.h2d.link_bytes_per_second = 10'000'000'000;
  c.h2d.unlimited = true;
  c.d2h.link_bytes_per_second = 10'000'000'000;
  c.d2h.unlimited = true;
  c.chunk_bytes = 64 * MiB;
  return c;
}

TEST(pager_model_size, a_llama_405b_layer_and_the_70b_embedding_register_and_page) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer keeps 4 bytes of shadow per byte copied (about 40 GB here); the "
                  "normal and AddressSanitizer builds run this test";
#endif
  constexpr std::size_t needs = 6 * GiB;  // 4.3 GB committed, with room for the rest of the system
  if (const std::size_t avail = available_memory(); avail != 0 && avail < needs) {
    GTEST_SKIP() << "this test commits about 4.3 GB; the machine has " << avail / MiB
                 << " MiB available (MemAvailable), under the " << needs / MiB
                 << " MiB it asks for";
  }
  // Llama-3.1-405B: hidden 16384, 8 KV heads of 128, MLP 53248. Each MLP matrix is 1.74 GB.
  const std::size_t h = 16384, kv = 1024, ffn = 53248, bf16 = 2;
  const std::vector<std::pair<std::string, std::size_t>> layer = {
      {"q_proj", h * h * bf16},      {"k_proj", h * kv * bf16},     {"v_proj", h * kv * bf16},
      {"o_proj", h * h * bf16},      {"gate_proj", h * ffn * bf16}, {"up_proj", h * ffn * bf16},
      {"down_proj", ffn * h * bf16}, {"input_norm", h * bf16}};
  const std::size_t embedding = std::size_t{128256} * 8192 * bf16;  // Llama-3.1-70B, 2.1 GB
  const std::size_t hbm = 2 * GiB;
  auto dev = big_sim_device(hbm + 256 * MiB);
  pager p(*dev, big_config(hbm, embedding + 64 * MiB));  // host tier: the embedding only
  stream compute(*dev);
  checksum_slot slot(*dev);

  std::size_t total = 0;
  for (const auto& [n, b] : layer) total += (b + 4095) / 4096 * 4096;
  lazy_buffer model(total);
  ASSERT_NE(model.p, nullptr);
  p.add_host_region(model.p, model.bytes, host_region_kind::pageable);
  std::vector<tensor_handle> hs;
  std::vector<std::uint64_t> sums;
  std::size_t off = 0;
  for (std::size_t i = 0; i < layer.size(); ++i) {
    char* at = model.at(off);
    mark(at, layer[i].second, 40 + i);
    hs.push_back(p.register_tensor_at(layer[i].first, layer[i].second, tensor_kind::weight, at));
    sums.push_back(checksum(at, layer[i].second));
    off += (layer[i].second + 4095) / 4096 * 4096;
  }
  const auto emb = p.register_tensor("embed_tokens", embedding, tensor_kind::weight);
  hs.push_back(emb);
  {
    // The embedding was registered without a source: zeros. Its expected checksum is that of
    // zeros, computed over untouched lazy memory.
    lazy_buffer zeros(embedding);
    ASSERT_NE(zeros.p, nullptr);
    sums.push_back(checksum(zeros.p, embedding));
  }
  for (std::size_t i = 0; i < hs.size(); ++i) {  // each pages in, evicting the one before
    EXPECT_EQ(device_checksum(p, *dev, hs[i], compute, slot), sums[i]) << "tensor " << i;
  }
  const auto m = p.metrics();
  EXPECT_EQ(m.page_ins, hs.size());
  EXPECT_GE(m.evictions, hs.size() - 3);
  for (auto t : hs) p.unregister_tensor(t);
  p.remove_host_region(model.p);
}
}  // namespace
}  // namespace htp::test
