// Uses the installed package: a sim device, a copy round trip, a checksum.
#include <htp/checksum.hpp>
#include <htp/sim_device.hpp>

#include <cstdio>
#include <vector>

int main() {
  auto dev = htp::make_sim_device();
  htp::stream s(*dev);
  std::vector<unsigned char> in(4096), out(4096);
  htp::fill_pattern(in.data(), in.size(), 7);
  void* d = dev->allocate(htp::memory_kind::device, in.size());
  dev->copy_async(d, in.data(), in.size(), htp::copy_direction::host_to_device, s);
  dev->copy_async(out.data(), d, out.size(), htp::copy_direction::device_to_host, s);
  s.synchronize();
  dev->deallocate(htp::memory_kind::device, d, in.size());
  const bool ok = htp::checksum(in.data(), in.size()) == htp::checksum(out.data(), out.size());
  std::printf("htp consumer: round trip %s\n", ok ? "ok" : "CORRUPT");
  return ok ? 0 : 1;
}
