// Uses the installed package: the version header, a sim device, a copy round trip, a checksum, a
// pager, the log sink and the Prometheus exposition, and an htp exception caught across the
// library boundary.
#include <htp/checksum.hpp>
#include <htp/error.hpp>
#include <htp/log.hpp>
#include <htp/pager.hpp>
#include <htp/prometheus.hpp>
#include <htp/sim_device.hpp>
#include <htp/version.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#if defined(CUDART_VERSION) || defined(FMT_VERSION) || defined(SPDLOG_VERSION)
#error "htp's public headers pulled in CUDA, fmt or spdlog"
#endif

int main() {
  if (std::strcmp(htp::version(), HTP_VERSION_STRING) != 0) {
    std::printf("htp consumer: library %s, headers %s\n", htp::version(), HTP_VERSION_STRING);
    return 1;
  }
  int logged = 0;
  htp::set_log_sink([&](htp::log_level, std::string_view) { ++logged; });
  auto dev = htp::make_device(htp::backend::sim);
  htp::stream s(*dev);
  std::vector<unsigned char> in(4096), out(4096);
  htp::fill_pattern(in.data(), in.size(), 7);
  void* d = dev->allocate(htp::memory_kind::device, in.size());
  dev->copy_async(d, in.data(), in.size(), htp::copy_direction::host_to_device, s);
  dev->copy_async(out.data(), d, out.size(), htp::copy_direction::device_to_host, s);
  s.synchronize();
  dev->deallocate(htp::memory_kind::device, d, in.size());
  bool ok = htp::checksum(in.data(), in.size()) == htp::checksum(out.data(), out.size());

  bool caught = false;
  try {
    dev->allocate(htp::memory_kind::device, 0);
  } catch (const htp::invalid_argument&) {
    caught = true;  // the type info crossed the library boundary
  }

  htp::pager_config cfg;
  cfg.hbm_budget_bytes = 4 << 20;
  cfg.host_budget_bytes = 8 << 20;
  cfg.slab_bytes = 1 << 20;
  cfg.h2d.link_bytes_per_second = cfg.d2h.link_bytes_per_second = 1'000'000'000;
  htp::pager pager(*dev, cfg);
  std::vector<unsigned char> weight(1 << 20);
  htp::fill_pattern(weight.data(), weight.size(), 3);
  const auto h = pager.register_tensor("w", weight.size(), htp::tensor_kind::weight, weight.data());
  pager.acquire(h, s);
  pager.release(h, s);
  s.synchronize();
  const std::string text = htp::to_prometheus(pager.metrics());
  ok = ok && caught && logged > 0 && text.find("htp_faults_total 1\n") != std::string::npos;
  std::printf("htp consumer (htp %s): round trip, pager, log sink, exposition %s\n", htp::version(),
              ok ? "ok" : "BROKEN");
  return ok ? 0 : 1;
}
