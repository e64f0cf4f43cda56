// The kept output of one stream (stdout or stderr) of a background process,
// on the sandbox's disk so that no client, manager or host restart loses it.
// Bounded: the log is two segment files, the current one and the one before;
// when the current one reaches the segment size it replaces the old one and a
// new one starts. So at least the last segment's worth of output is kept, and
// at most twice that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/fd.hpp"

namespace sbx::agent {

/// The bound of one stream: at least this much of its latest output is kept (at most twice this).
inline constexpr size_t kLogSegmentBytes = 1u << 20;

class KeptLog {
 public:
  KeptLog() = default;
  /// Starts an empty log at path (and path.1); throws io when it cannot be created.
  KeptLog(std::string path, size_t segment_bytes = kLogSegmentBytes);
  /// Keeps data. A full disk loses only the kept copy (live output still flows), so write errors are ignored.
  void append(std::string_view data);
  /// What is kept, oldest first; only its last `tail_lines` lines when >= 0.
  std::string read(int64_t tail_lines = -1) const;
  /// Deletes the files (the process was dropped from the table).
  void remove();

 private:
  void rotate();
  std::string path_;
  size_t segment_ = kLogSegmentBytes;
  size_t size_ = 0;
  Fd fd_;
};

/// The last n lines of text (a final line without its newline counts as one).
std::string_view last_lines(std::string_view text, int64_t n);

}  // namespace sbx::agent
