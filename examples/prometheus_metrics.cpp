// Serving htp's metrics to Prometheus. A small pager runs a few steps on the sim backend, then
//  - without arguments, the exposition goes to stdout (what a /metrics handler would return);
//  - with `--serve PORT`, a minimal HTTP server on 127.0.0.1 (loopback only) answers GET /metrics
//    for up to 3 requests or 30 seconds, whichever comes first, then exits. Point a local
//    Prometheus (or curl http://127.0.0.1:PORT/metrics) at it.
// A real engine serves the same string from its own HTTP server.
#include <htp/checksum.hpp>
#include <htp/pager.hpp>
#include <htp/prometheus.hpp>
#include <htp/sim_device.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string run_and_expose() {
  auto dev = htp::make_sim_device();
  htp::pager_config cfg;
  cfg.hbm_budget_bytes = 8 << 20;
  cfg.host_budget_bytes = 32 << 20;
  cfg.slab_bytes = 2 << 20;
  htp::pager pager(*dev, cfg);
  htp::stream compute(*dev);
  std::vector<unsigned char> w(3 << 20);
  std::vector<htp::tensor_handle> layers;
  for (int i = 0; i < 6; ++i) {
    htp::fill_pattern(w.data(), w.size(), static_cast<std::uint64_t>(i));
    layers.push_back(pager.register_tensor("layer" + std::to_string(i), w.size(),
                                           htp::tensor_kind::weight, w.data()));
  }
  pager.set_schedule(layers, /*cyclic=*/true);
  for (int step = 0; step < 3; ++step) {
    for (auto h : layers) {
      pager.acquire(h, compute);
      pager.release(h, compute);
    }
  }
  compute.synchronize();
  return htp::to_prometheus(pager.metrics());
}

/// Answers up to `max_requests` HTTP requests on 127.0.0.1:port with `body`, for at most
/// `max_seconds`. Returns 0, or 1 if the socket cannot be set up.
int serve(int port, const std::string& body, int max_requests, int max_seconds) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 1;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // loopback only, never another interface
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 4) != 0) {
    std::perror("prometheus_metrics: bind/listen on 127.0.0.1");
    ::close(fd);
    return 1;
  }
  std::printf("serving http://127.0.0.1:%d/metrics (%d requests or %d s)\n", port, max_requests,
              max_seconds);
  std::fflush(stdout);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(max_seconds);
  for (int served = 0; served < max_requests;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) continue;
    char request[1024];
    (void)::recv(c, request, sizeof request, 0);  // any request gets the exposition
    const std::string response = std::string("HTTP/1.0 200 OK\r\nContent-Type: ") +
                                 htp::prometheus_content_type +
                                 "\r\nContent-Length: " + std::to_string(body.size()) +
                                 "\r\nConnection: close\r\n\r\n" + body;
    (void)::send(c, response.data(), response.size(), MSG_NOSIGNAL);
    ::close(c);
    ++served;
  }
  ::close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string body = run_and_expose();
  if (argc == 3 && std::strcmp(argv[1], "--serve") == 0)
    return serve(std::atoi(argv[2]), body, 3, 30);
  std::fputs(body.c_str(), stdout);
  return 0;
}
