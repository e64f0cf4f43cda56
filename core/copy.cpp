#include "core/copy.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/lazy_libs.hpp"
#include "core/units.hpp"

namespace sbx {

bool safe_relative_path(std::string_view rel) {
  if (rel.empty()) return true;
  if (rel.front() == '/') return false;
  size_t i = 0;
  while (i <= rel.size()) {
    size_t j = rel.find('/', i);
    if (j == std::string_view::npos) j = rel.size();
    auto part = rel.substr(i, j - i);
    if (part.empty() || part == "." || part == "..") return false;
    i = j + 1;
  }
  return true;
}

std::string resolve_cp_target(const std::string& dest, const DestInfo& info, const std::string& src_name,
                              bool src_is_dir, bool src_contents_only) {
  bool dest_says_dir = !dest.empty() && dest.back() == '/';
  std::string base = dest;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  if (info.exists && !info.is_dir) {
    if (src_is_dir) throw Error(Errc::invalid_argument, "cannot copy a directory onto the file " + dest);
    if (dest_says_dir) throw Error(Errc::invalid_argument, dest + " is not a directory");
    return base;
  }
  if (info.exists && info.is_dir) {
    if (src_is_dir && src_contents_only) return base;
    return (base == "/" ? "" : base) + "/" + src_name;
  }
  if (dest_says_dir && !src_is_dir)
    throw Error(Errc::not_found, "destination directory " + dest + " does not exist");
  return base;
}

namespace {

const ArchiveApi& la() { return archive_api(); }

[[noreturn]] void archive_fail(archive* a, const std::string& what) {
  const char* msg = la().archive_error_string(a);
  int err = la().archive_errno(a);
  throw Error(err == ENOSPC ? Errc::limit_exceeded : Errc::io, what + ": " + (msg ? msg : "unknown error"));
}

std::string type_name(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISLNK(m)) return "symlink";
  return "other";
}

// Both host-path and tar sources are libarchive readers; they differ in how
// entries are named (a prefix to strip) and whether to descend into directories.
class ArchiveSource : public EntrySource {
 public:
  ArchiveSource(archive* a, bool disk, std::string prefix) : a_(a), disk_(disk), prefix_(std::move(prefix)) {}
  ~ArchiveSource() override {
    if (disk_) la().archive_read_free(a_);
    else la().archive_read_free(a_);
  }
  bool next(FileEntry& e) override {
    for (;;) {
      archive_entry* ent = nullptr;
      int r = la().archive_read_next_header(a_, &ent);
      if (r == ARCHIVE_EOF) return false;
      if (r < ARCHIVE_WARN) archive_fail(a_, "reading the source");
      if (disk_ && la().archive_read_disk_can_descend(a_)) la().archive_read_disk_descend(a_);
      std::string name = la().archive_entry_pathname(ent) ? la().archive_entry_pathname(ent) : "";
      std::string rel = relative(name);
      if (rel == "\x01") continue;  // the tar's "./" itself
      e = FileEntry{};
      e.path = rel;
      e.type = type_name(la().archive_entry_filetype(ent));
      e.mode = la().archive_entry_perm(ent) & 07777;
      e.size = la().archive_entry_size_is_set(ent) ? static_cast<uint64_t>(la().archive_entry_size(ent)) : 0;
      e.mtime = la().archive_entry_mtime(ent);
      if (e.type == "symlink" && la().archive_entry_symlink(ent)) e.target = la().archive_entry_symlink(ent);
      if (const char* hl = la().archive_entry_hardlink(ent)) {
        // Hard links inside a tar become independent copies would need the data twice; refuse clearly.
        throw Error(Errc::invalid_argument, "tar entry " + name + " is a hard link to " + hl)
            .set_hint("hard links are not supported by sbx cp; archive with --hard-dereference");
      }
      if (e.type == "other") continue;  // devices, fifos, sockets are not copied
      if (!safe_relative_path(e.path))
        throw Error(Errc::invalid_argument, "refusing unsafe entry name '" + name + "' in the source");
      return true;
    }
  }
  bool read(std::string& chunk) override {
    chunk.resize(64 * 1024);
    la_ssize_t n = la().archive_read_data(a_, chunk.data(), chunk.size());
    if (n < 0) archive_fail(a_, "reading file content");
    chunk.resize(static_cast<size_t>(n));
    return n > 0;
  }

 private:
  // "" for the root; "\x01" for an entry to skip.
  std::string relative(std::string name) const {
    if (disk_) {
      if (name == prefix_) return "";
      return name.substr(prefix_.size() + 1);
    }
    while (name.rfind("./", 0) == 0) name.erase(0, 2);
    while (!name.empty() && name.back() == '/') name.pop_back();
    if (name.empty() || name == ".") return "\x01";
    return name;
  }
  archive* a_;
  bool disk_;
  std::string prefix_;
};

// Streams each file from the agent as the sink pulls it (memory stays at a
// chunk whatever the file's size). The size is the agent's at open: a file
// that grows meanwhile is cut there, one that shrinks fails in the sink.
class SandboxSource : public EntrySource {
 public:
  SandboxSource(AgentClient& agent, std::string path) : agent_(agent), path_(std::move(path)) {
    entries_ = agent_.list(path_, true);
  }
  bool next(FileEntry& e) override {
    finish_file();
    while (idx_ < entries_.size()) {
      e = entries_[idx_++];
      if (e.type == "other") continue;
      if (!safe_relative_path(e.path))
        throw Error(Errc::protocol, "the sandbox listed an unsafe name '" + e.path + "'");
      if (e.type == "file") {
        // One request at a time on this stream: the file is read to its end before the next entry.
        e.size = agent_.open_read(e.path.empty() ? path_ : path_ + "/" + e.path).size;
        left_ = e.size;
        reading_ = true;
      }
      return true;
    }
    return false;
  }
  bool read(std::string& chunk) override {
    while (reading_) {
      if (!agent_.read_chunk(chunk)) {
        reading_ = false;
        return false;
      }
      if (left_ == 0) continue;  // grown since it was opened: drained, not sent
      if (chunk.size() > left_) chunk.resize(left_);
      left_ -= chunk.size();
      if (!chunk.empty()) return true;
    }
    return false;
  }

 private:
  void finish_file() {
    std::string rest;
    while (reading_) reading_ = agent_.read_chunk(rest);
  }
  AgentClient& agent_;
  std::string path_;
  std::vector<FileEntry> entries_;
  size_t idx_ = 0;
  bool reading_ = false;
  uint64_t left_ = 0;
};

class ArchiveWriterSink : public EntrySink {
 public:
  ArchiveWriterSink(archive* a, bool disk, std::string root) : a_(a), disk_(disk), root_(std::move(root)) {}
  ~ArchiveWriterSink() override { la().archive_write_free(a_); }
  void put(const FileEntry& e, const std::function<bool(std::string&)>& content) override {
    if (!safe_relative_path(e.path)) throw Error(Errc::invalid_argument, "refusing unsafe entry name '" + e.path + "'");
    archive_entry* ent = la().archive_entry_new();
    std::string name = e.path.empty() ? root_ : root_ + "/" + e.path;
    la().archive_entry_set_pathname(ent, name.c_str());
    mode_t type = e.type == "dir" ? AE_IFDIR : e.type == "symlink" ? AE_IFLNK : AE_IFREG;
    la().archive_entry_set_filetype(ent, type);
    // Set-id bits from a sandbox never reach the host.
    la().archive_entry_set_perm(ent, e.mode & (disk_ ? 01777u : 07777u));
    la().archive_entry_set_mtime(ent, e.mtime, 0);
    if (type == AE_IFLNK) la().archive_entry_set_symlink(ent, e.target.c_str());
    if (type == AE_IFREG) la().archive_entry_set_size(ent, static_cast<la_int64_t>(e.size));
    int r = la().archive_write_header(a_, ent);
    la().archive_entry_free(ent);
    if (r < ARCHIVE_WARN) archive_fail(a_, "writing " + name);
    if (type == AE_IFREG) {
      std::string chunk;
      uint64_t written = 0;
      while (content && content(chunk)) {
        if (written + chunk.size() > e.size)
          throw Error(Errc::io, "file " + name + " grew while it was copied");
        if (la().archive_write_data(a_, chunk.data(), chunk.size()) < 0) archive_fail(a_, "writing " + name);
        written += chunk.size();
        chunk.clear();
      }
      if (written != e.size && !disk_) throw Error(Errc::io, "file " + name + " shrank while it was copied");
    }
    if (la().archive_write_finish_entry(a_) < ARCHIVE_WARN) archive_fail(a_, "finishing " + name);
  }
  void close() override {
    if (la().archive_write_close(a_) != ARCHIVE_OK) archive_fail(a_, "finishing the copy");
  }

 private:
  archive* a_;
  bool disk_;
  std::string root_;
};

class SandboxSink : public EntrySink {
 public:
  SandboxSink(AgentClient& agent, std::string target) : agent_(agent), target_(std::move(target)) {}
  void put(const FileEntry& e, const std::function<bool(std::string&)>& content) override {
    if (!safe_relative_path(e.path)) throw Error(Errc::invalid_argument, "refusing unsafe entry name '" + e.path + "'");
    std::string path = e.path.empty() ? target_ : (target_ == "/" ? "" : target_) + "/" + e.path;
    with_context("writing " + path + " in the sandbox", [&] { agent_.write_entry(path, e, content); });
  }

 private:
  AgentClient& agent_;
  std::string target_;
};

}  // namespace

std::unique_ptr<EntrySource> host_path_source(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) throw sys_error("cannot read " + path, errno);
  archive* a = la().archive_read_disk_new();
  la().archive_read_disk_set_symlink_physical(a);
  la().archive_read_disk_set_standard_lookup(a);
  std::string clean = path;
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  if (clean.size() > 2 && clean.substr(clean.size() - 2) == "/.") clean.resize(clean.size() - 2);
  if (la().archive_read_disk_open(a, clean.c_str()) != ARCHIVE_OK) {
    std::string msg = la().archive_error_string(a) ? la().archive_error_string(a) : "cannot open";
    la().archive_read_free(a);
    throw Error(Errc::io, "cannot read " + path + ": " + msg);
  }
  return std::make_unique<ArchiveSource>(a, true, clean);
}

std::unique_ptr<EntrySource> tar_source(int fd) {
  archive* a = la().archive_read_new();
  la().archive_read_support_format_all(a);
  la().archive_read_support_filter_all(a);
  if (la().archive_read_open_fd(a, fd, 64 * 1024) != ARCHIVE_OK) {
    std::string msg = la().archive_error_string(a) ? la().archive_error_string(a) : "not a tar stream";
    la().archive_read_free(a);
    throw Error(Errc::invalid_argument, "cannot read the tar stream: " + msg);
  }
  return std::make_unique<ArchiveSource>(a, false, "");
}

std::unique_ptr<EntrySource> sandbox_source(AgentClient& agent, const std::string& path) {
  return std::make_unique<SandboxSource>(agent, path);
}

std::unique_ptr<EntrySink> host_path_sink(const std::string& target) {
  // The user's own path is trusted: canonicalise its parent once, so the
  // symlink checks below only ever bite on links the copy itself brings.
  std::string t = target;
  while (t.size() > 1 && t.back() == '/') t.pop_back();
  auto slash = t.rfind('/');
  std::string parent = slash == std::string::npos ? "." : (slash == 0 ? "/" : t.substr(0, slash));
  std::string name = slash == std::string::npos ? t : t.substr(slash + 1);
  char real[PATH_MAX];
  if (!::realpath(parent.c_str(), real)) throw sys_error("destination directory " + parent, errno);
  std::string root = std::string(real) + (std::string(real) == "/" ? "" : "/") + name;
  archive* a = la().archive_write_disk_new();
  // No ARCHIVE_EXTRACT_UNLINK: with it libarchive would replace a symlink in
  // the way by a directory; without it, writing through a link is refused.
  la().archive_write_disk_set_options(a, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                        ARCHIVE_EXTRACT_SECURE_NODOTDOT);
  la().archive_write_disk_set_standard_lookup(a);
  return std::make_unique<ArchiveWriterSink>(a, true, root);
}

std::unique_ptr<EntrySink> tar_sink(int fd, const std::string& root_name) {
  archive* a = la().archive_write_new();
  la().archive_write_set_format_pax_restricted(a);
  la().archive_write_set_bytes_in_last_block(a, 1);
  if (la().archive_write_open_fd(a, fd) != ARCHIVE_OK) {
    la().archive_write_free(a);
    throw Error(Errc::io, "cannot write the tar stream");
  }
  return std::make_unique<ArchiveWriterSink>(a, false, root_name.empty() ? "." : root_name);
}

std::unique_ptr<EntrySink> sandbox_sink(AgentClient& agent, const std::string& target) {
  return std::make_unique<SandboxSink>(agent, target);
}

uint64_t transfer(EntrySource& source, EntrySink& sink, uint64_t max_bytes) {
  uint64_t total = 0;
  FileEntry e;
  while (source.next(e)) {
    if (e.type == "file" && total + e.size > max_bytes)
      throw Error(Errc::too_large, "the copy exceeds the limit of " + format_size(max_bytes))
          .set_hint("raise it with --max-size or cp_max_size in the config");
    sink.put(e, [&](std::string& chunk) {
      if (!source.read(chunk)) return false;
      total += chunk.size();
      if (total > max_bytes)
        throw Error(Errc::too_large, "the copy exceeds the limit of " + format_size(max_bytes))
            .set_hint("raise it with --max-size or cp_max_size in the config");
      return true;
    });
    fault::point("cp.entry");
  }
  sink.close();
  return total;
}

Error upload_error(const Error& e, uint64_t disk_mb) {
  // The agent's error arrives as its code and message (with strerror), not its errno.
  bool full = e.sys_errno() == ENOSPC ||
              (e.code() == Errc::limit_exceeded && std::string_view(e.what()).find(std::strerror(ENOSPC)) != std::string_view::npos);
  if (!full) return e;
  return Error(Errc::limit_exceeded, "no space left in the sandbox (disk limit " + format_size(disk_mb << 20) + ")")
      .set_hint("remove files in the sandbox, or create it with a larger --disk");
}

}  // namespace sbx
