#include <htp/tensor_file.hpp>

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace htp {

tensor_file::tensor_file(std::string name, int fd, std::uint64_t size, std::uint64_t rate,
                         std::uint64_t latency_ns)
    : name_(std::move(name)), fd_(fd), size_(size), rate_(rate),
      latency_(static_cast<std::int64_t>(latency_ns)) {}

std::shared_ptr<tensor_file> tensor_file::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HTP_EXPECTS(fd >= 0, invalid_argument, "tensor_file::open('", path, "'): ", std::strerror(errno),
              "; give a readable file");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw io_error(detail::concat("tensor_file::open('", path, "'): fstat failed: ",
                                  std::strerror(e), "; check the file system the file is on"),
                   path, e);
  }
  return std::shared_ptr<tensor_file>(
      new tensor_file(path, fd, static_cast<std::uint64_t>(st.st_size), 0, 0));
}

std::shared_ptr<tensor_file> tensor_file::modelled(std::string name, std::uint64_t size_bytes,
                                                   std::uint64_t read_bytes_per_second,
                                                   std::uint64_t latency_ns) {
  HTP_EXPECTS(size_bytes > 0 && read_bytes_per_second > 0, invalid_argument,
              "tensor_file::modelled('", name, "', ", size_bytes, " bytes, ", read_bytes_per_second,
              " B/s): the size and the rate must be positive");
  return std::shared_ptr<tensor_file>(
      new tensor_file(std::move(name), -1, size_bytes, read_bytes_per_second, latency_ns));
}

tensor_file::~tensor_file() {
  if (fd_ >= 0) ::close(fd_);
}

void tensor_file::read(void* dst, std::size_t bytes, std::uint64_t offset) const {
  HTP_EXPECTS(bytes > 0 && offset <= size_ && bytes <= size_ - offset, invalid_argument,
              "tensor_file::read('", name_, "', ", bytes, " bytes at ", offset, "): the file has ",
              size_, " bytes");
  if (fd_ < 0) {
    std::chrono::steady_clock::time_point done;
    {
      std::lock_guard lock(mutex_);
      const auto ns =
          static_cast<std::int64_t>(static_cast<double>(bytes) * 1e9 / static_cast<double>(rate_));
      const auto start = std::max(std::chrono::steady_clock::now(), next_free_);
      next_free_ = start + latency_ + std::chrono::nanoseconds(ns);
      done = next_free_;
      bytes_read_ += bytes;
    }
    std::this_thread::sleep_until(done);
    return;
  }
  auto* out = static_cast<char*>(dst);
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::pread(fd_, out + got, bytes - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : 0;
      throw io_error(
          detail::concat(
              "tensor_file::read('", name_, "', ", bytes, " bytes at ", offset, "): ",
              n == 0 ? "the file ended early (truncated since it was opened?)" : std::strerror(e),
              "; restore the file (same size and contents as when it was opened)"),
          name_, e);
    }
    got += static_cast<std::size_t>(n);
  }
  std::lock_guard lock(mutex_);
  bytes_read_ += bytes;
}

std::uint64_t tensor_file::bytes_read() const {
  std::lock_guard lock(mutex_);
  return bytes_read_;
}

}  // namespace htp
