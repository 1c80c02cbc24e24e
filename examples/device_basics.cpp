// The device layer in thirty lines: two streams, an event between them, a checksum on the device.
// Runs on the GPU when one is present, otherwise on the sim backend.
#include <htp/checksum.hpp>
#include <htp/device.hpp>

#include <cstdio>
#include <vector>

int main() {
  auto dev = htp::make_device(htp::backend::cuda_or_sim);
  htp::stream copy_stream(*dev), compute(*dev);
  htp::event loaded(*dev);

  const std::size_t n = 8 << 20;
  void* host = dev->allocate(htp::memory_kind::pinned_host, n);
  void* hbm = dev->allocate(htp::memory_kind::device, n);
  auto* sum = static_cast<std::uint64_t*>(
      dev->allocate(htp::memory_kind::pinned_host, sizeof(std::uint64_t)));
  htp::fill_pattern(host, n, 2026);

  dev->copy_async(hbm, host, n, htp::copy_direction::host_to_device, copy_stream);
  loaded.record(copy_stream);
  dev->wait(loaded, compute);                 // compute waits on the GPU, not the host
  dev->checksum_async(hbm, n, sum, compute);  // a kernel reading the loaded bytes
  compute.synchronize();

  const bool ok = *sum == htp::checksum(host, n);
  std::printf("%s: loaded %zu MiB, device checksum %s\n", dev->properties().name.c_str(), n >> 20,
              ok ? "matches" : "DIFFERS");
  dev->deallocate(htp::memory_kind::pinned_host, sum, sizeof(std::uint64_t));
  dev->deallocate(htp::memory_kind::device, hbm, n);
  dev->deallocate(htp::memory_kind::pinned_host, host, n);
  return ok ? 0 : 1;
}
