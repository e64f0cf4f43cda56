// Small filesystem helpers that report failures as sbx::Error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/fd.hpp"

namespace sbx {

/// Reads a whole (small) file.
std::string read_file(const std::string& path);
/// Reads a whole file, or nullopt when it does not exist.
std::optional<std::string> read_file_if_exists(const std::string& path);
/// Process `pid`'s command line (its arguments, each ending in NUL), or nullopt once it
/// has gone. A scan of /proc races every exit: a process listed a moment ago is gone
/// at the open (ENOENT) or between the open and the read (ESRCH).
std::optional<std::string> proc_cmdline(const std::string& pid);
/// How hard write_file_atomic works to survive a power cut.
enum class Durability {
  survive_crash,    ///< fsync the file and its directory: survives a power cut
  survive_process,  ///< no fsync: readers and a restarted process see old or new, never a part
};
/// Writes a file so that readers see the old or the new content, never a
/// part: a temp file in the same directory renamed over (or, with
/// survive_process, swapped with) the target.
void write_file_atomic(const std::string& path, std::string_view data, unsigned mode = 0644,
                       Durability durability = Durability::survive_crash);
/// Writes to an existing file such as a cgroup or /proc knob (no truncation games).
void write_knob(const std::string& path, std::string_view value);
/// mkdir -p with the given mode for the directories it creates.
void make_dirs(const std::string& path, unsigned mode = 0755);
/// rm -rf that does not cross into other filesystems (a sandbox's leftover
/// mount is never followed into the host).
void remove_tree(const std::string& path);
/// remove_tree, with the entry `last` directly under path removed after all
/// the others: as long as it can be opened, the removal is not finished.
void remove_tree_last(const std::string& path, const char* last);
/// The names in `dir` but . and .., sorted; none if it cannot be read.
std::vector<std::string> dir_entries(const std::string& dir);
/// Writes all of data to fd, retrying on EINTR and short writes.
void write_all(int fd, std::string_view data);
/// Reads exactly n bytes; returns false on EOF before the first byte.
bool read_exact(int fd, void* buf, size_t n);
/// Takes a flock on path (created if missing), exclusive or shared; released when the Fd closes.
/// Waits for flock(2) on fd (retrying on EINTR); path names it in the error.
void flock_wait(int fd, bool exclusive, const std::string& path);
Fd lock_file(const std::string& path, bool exclusive = true);
/// Whether a path exists (without following a final symlink).
bool path_exists(const std::string& path);

}  // namespace sbx
