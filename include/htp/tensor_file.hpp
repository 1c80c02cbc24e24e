// A file tensors are read from when they are paged in: a checkpoint shard, a safetensors file.
// See docs/pager.md, "File-backed tensors".
//
// A file-backed tensor (pager::register_file_tensor) has no host copy: each page-in reads its
// bytes from the file in transfer chunks, through a few pinned bounce buffers of the transfer
// engine, so host RAM holds only what is in flight (and whatever the kernel's page cache keeps,
// which it may drop). Weights only: nothing is ever written back to a file.
//
// A modelled file (tensor_file::modelled) is the timing-only twin: no file, reads write nothing
// and take bytes / rate on one modelled device shared by every reader (an NVMe array), so the
// scale simulator (sim_config::timing_only) can run a model whose weights no machine here holds.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace htp {

class tensor_file {
 public:
  /// Opens `path` read-only. @throws htp::invalid_argument if it cannot be opened (the message
  /// has the path and the system's reason); htp::io_error if it opens but cannot be examined
  /// (fstat fails).
  static std::shared_ptr<tensor_file> open(const std::string& path);
  /// A modelled file of `size_bytes` read at `read_bytes_per_second` (every reader together),
  /// plus `latency_ns` per read. @throws htp::invalid_argument if the size or rate is 0.
  static std::shared_ptr<tensor_file> modelled(std::string name, std::uint64_t size_bytes,
                                               std::uint64_t read_bytes_per_second,
                                               std::uint64_t latency_ns = 0);
  /// Closes the file. Never throws.
  ~tensor_file();
  tensor_file(const tensor_file&) = delete;
  tensor_file& operator=(const tensor_file&) = delete;

  const std::string& name() const noexcept { return name_; }  ///< the path, or the modelled name
  std::uint64_t size() const noexcept { return size_; }
  bool is_modelled() const noexcept { return fd_ < 0; }

  /// Reads [offset, offset + bytes) into `dst` (host memory), blocking until done; a modelled
  /// file writes nothing and returns when its modelled read ends. Thread-safe (pread).
  /// @throws htp::invalid_argument if the range is empty or runs past the end of the file;
  /// htp::io_error if the read fails (the file ended early, an I/O error), with the path.
  void read(void* dst, std::size_t bytes, std::uint64_t offset) const;
  /// Bytes read since it was opened (all readers). Thread-safe.
  /// Never throws.
  std::uint64_t bytes_read() const;

 private:
  tensor_file(std::string name, int fd, std::uint64_t size, std::uint64_t rate,
              std::uint64_t latency_ns);

  std::string name_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t rate_ = 0;  // modelled only
  std::chrono::nanoseconds latency_{0};
  mutable std::mutex mutex_;
  mutable std::uint64_t bytes_read_ = 0;
  mutable std::chrono::steady_clock::time_point next_free_{};  // modelled: the device's queue
};

}  // namespace htp
