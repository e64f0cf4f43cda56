// File access for the host: read, write and list paths inside the sandbox.
// Every path resolves inside the agent's root (openat2 RESOLVE_IN_ROOT), and the
// final component is never followed, so symlinks planted by sandboxed code
// cannot redirect a copy outside the sandbox or onto another file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/fd.hpp"

namespace sbx::agent {

/// Sends one frame's bytes to the host.
using Send = std::function<void(const std::string& frame)>;

/// Starts answering a file_read request: sends ok {stat} and returns the open
/// file, whose content send_file_chunk then sends as the host keeps up.
Fd open_file_request(int root_fd, uint32_t channel, const nlohmann::json& req, const Send& send);
/// Sends the next chunk of fd as a data frame; at EOF sends end and returns false.
bool send_file_chunk(int fd, uint32_t channel, const Send& send);
/// Answers a list request: entries frames, then end.
void list_request(int root_fd, uint32_t channel, const nlohmann::json& req, const Send& send);

/// A file_write in progress: data arrives in frames until end.
class Upload {
 public:
  /// Starts the write described by req ({path, kind, mode, mtime, target}).
  /// Directories and symlinks are complete at once; files wait for data.
  Upload(int root_fd, const nlohmann::json& req);
  Upload(Upload&&) = default;
  ~Upload();
  /// Whether this is a file waiting for data frames (directories and symlinks are done at once).
  bool awaits_data() const { return static_cast<bool>(file_); }
  /// Appends file data.
  void data(std::string_view bytes);
  /// Finishes: the file appears under its name complete, never half-written.
  void finish();

 private:
  Fd dir_;
  std::string name_, tmp_;
  Fd file_;
  int64_t mtime_ = 0;
  unsigned mode_ = 0644;
  uint64_t written_ = 0;
  uint64_t flushed_ = 0;                         ///< written_ at the last fdatasync
  static constexpr uint64_t kFlushEvery = 8u << 20;
};

}  // namespace sbx::agent
