// `sbx cp`: moving files and trees between the host, tar streams and a
// sandbox, with docker cp's naming rules. Every transfer is a stream of
// entries (metadata, then content) from a source to a sink, so the same code
// serves host paths, tar on stdin/stdout and, for the server, HTTP bodies.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/agent_client.hpp"
#include "core/error.hpp"

namespace sbx {

/// Produces entries one at a time, content after each file's metadata.
class EntrySource {
 public:
  virtual ~EntrySource() = default;
  /// The next entry (path relative to the transfer's root; "" is the root), or false at the end.
  virtual bool next(FileEntry& entry) = 0;
  /// The next chunk of the current file's content, or false when it is complete.
  virtual bool read(std::string& chunk) = 0;
};

/// Consumes entries.
class EntrySink {
 public:
  virtual ~EntrySink() = default;
  /// Writes one entry; for files, `content` is pulled until it returns false.
  virtual void put(const FileEntry& entry, const std::function<bool(std::string&)>& content) = 0;
  /// Called once after the last entry.
  virtual void close() {}
};

/// The tree (or file) at a host path. Symlinks are copied as links, not followed.
std::unique_ptr<EntrySource> host_path_source(const std::string& path);
/// A tar stream read from fd (any format libarchive reads, compressed or not).
std::unique_ptr<EntrySource> tar_source(int fd);
/// A tree (or file) inside a sandbox, read through its agent.
std::unique_ptr<EntrySource> sandbox_source(AgentClient& agent, const std::string& path);

/// Writes below a host directory as `target` (root entry = target itself).
/// Entry names with "..", absolute paths or links to follow are refused;
/// set-id bits are never restored on the host.
std::unique_ptr<EntrySink> host_path_sink(const std::string& target);
/// Writes a pax tar stream to fd; the root entry is named `root_name`.
std::unique_ptr<EntrySink> tar_sink(int fd, const std::string& root_name);
/// Writes inside a sandbox as `target`, through its agent.
std::unique_ptr<EntrySink> sandbox_sink(AgentClient& agent, const std::string& target);

/// Moves every entry from source to sink; throws limit_exceeded once more
/// than max_bytes of file content has passed.
uint64_t transfer(EntrySource& source, EntrySink& sink, uint64_t max_bytes);

/// An upload's error as the user should see it: a write that found the sandbox's
/// disk full (ENOSPC inside the sandbox) becomes "no space left in the sandbox
/// (disk limit 1G)" with what to do; any other error comes back unchanged.
Error upload_error(const Error& e, uint64_t disk_mb);

/// What a `cp` destination looks like before the copy.
struct DestInfo {
  bool exists = false;
  bool is_dir = false;
};

/// docker cp's rule for where a source lands: into an existing directory
/// under the source's own name, else as the destination path itself.
/// `src_contents_only` is the "SRC/." form (copy the contents, not the directory).
std::string resolve_cp_target(const std::string& dest, const DestInfo& info, const std::string& src_name,
                              bool src_is_dir, bool src_contents_only);

/// Whether an entry's relative path is safe to join below a target ("a/b", never "../x" or "/x").
bool safe_relative_path(std::string_view rel);

}  // namespace sbx
