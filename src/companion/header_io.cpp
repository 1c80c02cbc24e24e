// The header readers' shared file access and JSON value checks (header_io.hpp).
#include "header_io.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <cerrno>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace htp::detail {

header_file::header_file(const std::string& path, const char* what) : path_(path), what_(what) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    throw io_error(concat("cannot open the ", what, " '", path, "': ", std::strerror(e),
                          "; give the path of a readable file"),
                   path, e);
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    throw io_error(concat("cannot examine the ", what, " '", path, "' (fstat): ", std::strerror(e),
                          "; check the file system it is on"),
                   path, e);
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

header_file::~header_file() {
  if (fd_ >= 0) ::close(fd_);
}

void header_file::read(void* dst, std::size_t bytes, std::uint64_t offset) const {
  auto* out = static_cast<char*>(dst);
  for (std::size_t done = 0; done < bytes;) {
    const ::ssize_t n = ::pread(fd_, out + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      throw io_error(concat("reading ", bytes, " bytes at ", offset, " of the ", what_, " '", path_,
                            "' failed: ", std::strerror(e), "; check the file and its disk"),
                     path_, e);
    }
    if (n == 0) {
      throw io_error(concat("the ", what_, " '", path_, "' ended at byte ", offset + done,
                            " while reading its header (it shrank while being read?)"),
                     path_, 0);
    }
    done += static_cast<std::size_t>(n);
  }
}

std::uint64_t load_u64(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = v << 8 | p[k];
  return v;
}

bool as_count(const nlohmann::json& v, std::uint64_t& out) noexcept {
  if (v.is_number_unsigned()) {
    out = v.get<std::uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
    out = static_cast<std::uint64_t>(v.get<std::int64_t>());
    return true;
  }
  return false;
}

bool as_shape(const nlohmann::json& v, std::vector<std::int64_t>& out, std::size_t& bad) {
  bad = std::numeric_limits<std::size_t>::max();
  if (!v.is_array()) return false;
  out.clear();
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint64_t d = 0;
    if (!as_count(v[i], d) || d > std::uint64_t{std::numeric_limits<std::int64_t>::max()}) {
      bad = i;
      return false;
    }
    out.push_back(static_cast<std::int64_t>(d));
  }
  return true;
}

bool shape_bits(const std::vector<std::int64_t>& shape, std::size_t bits,
                std::uint64_t& out) noexcept {
  std::uint64_t total = bits;
  for (const std::int64_t d : shape) {
    if (__builtin_mul_overflow(total, static_cast<std::uint64_t>(d), &total)) return false;
  }
  out = total;
  return true;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += concat(i ? ", " : "", shape[i]);
  return s + "]";
}

std::string shown(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return std::string(text);
  return std::string(text.substr(0, limit)) + "...";
}

}  // namespace htp::detail
