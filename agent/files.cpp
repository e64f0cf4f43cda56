#include "agent/files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/json_number.hpp"
#include "core/fsutil.hpp"
#include "core/protocol.hpp"
#include "core/safe_path.hpp"

namespace sbx::agent {

using nlohmann::json;
namespace proto = sbx::proto;

namespace {

std::string type_of(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISLNK(m)) return "symlink";
  return "other";
}

json entry_json(const std::string& rel, const struct stat& st, const std::string& target) {
  json e{{"path", rel},
         {"type", type_of(st.st_mode)},
         {"mode", st.st_mode & 07777},
         {"size", S_ISREG(st.st_mode) ? st.st_size : 0},
         {"mtime", st.st_mtim.tv_sec}};
  if (S_ISLNK(st.st_mode)) e["target"] = target;
  return e;
}

std::string read_link_at(int dir, const char* name) {
  char buf[4096];
  ssize_t n = ::readlinkat(dir, name, buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

std::string req_path(const json& req) {
  auto it = req.find("path");
  if (it == req.end() || !it->is_string() || it->get<std::string>().empty())
    throw Error(Errc::invalid_argument, "request without a path");
  return it->get<std::string>();
}

// Walks a directory through fds, never following symlinks, emitting entries in batches.
class Lister {
 public:
  Lister(uint32_t ch, const Send& send) : ch_(ch), send_(send) {}
  void walk(int dir_fd, const std::string& prefix) {
    int fd = ::dup(dir_fd);
    if (fd < 0) throw sys_error("dup", errno);
    DIR* d = ::fdopendir(fd);
    if (!d) {
      ::close(fd);
      throw sys_error("cannot read directory " + prefix, errno);
    }
    ::rewinddir(d);
    std::vector<std::string> names;
    while (auto* ent = ::readdir(d)) {
      if (!std::strcmp(ent->d_name, ".") || !std::strcmp(ent->d_name, "..")) continue;
      names.emplace_back(ent->d_name);
    }
    ::closedir(d);
    for (auto& name : names) {
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // vanished meanwhile
      std::string rel = prefix.empty() ? name : prefix + "/" + name;
      add(entry_json(rel, st, S_ISLNK(st.st_mode) ? read_link_at(dir_fd, name.c_str()) : ""));
      if (S_ISDIR(st.st_mode)) {
        Fd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub) walk(sub.get(), rel);
      }
    }
  }
  void add(json e) {
    batch_.push_back(std::move(e));
    if (batch_.size() >= 256) flush();
  }
  void flush() {
    if (batch_.empty()) return;
    send_(proto::encode_json(proto::Type::entries, ch_, {{"entries", batch_}}));
    batch_ = json::array();
  }

 private:
  uint32_t ch_;
  const Send& send_;
  json batch_ = json::array();
};

}  // namespace

Fd open_file_request(int root_fd, uint32_t channel, const json& req, const Send& send) {
  std::string path = req_path(req);
  auto [dir, name] = open_parent_in_root(root_fd, path);
  struct stat st {};
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) throw sys_error(path, errno);
  if (!S_ISREG(st.st_mode))
    throw Error(Errc::invalid_argument, path + " is a " + type_of(st.st_mode) + ", not a regular file");
  Fd f(::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!f) throw sys_error(path, errno);
  send(proto::encode_json(proto::Type::ok, channel, entry_json("", st, "")));
  return f;
}

bool send_file_chunk(int fd, uint32_t channel, const Send& send) {
  std::string buf(proto::kChunk, '\0');
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw sys_error("reading a file", errno);
    }
    if (n == 0) {
      send(proto::encode(proto::Type::end, channel));
      return false;
    }
    send(proto::encode(proto::Type::data, channel, std::string_view(buf.data(), static_cast<size_t>(n))));
    return true;
  }
}

void list_request(int root_fd, uint32_t channel, const json& req, const Send& send) {
  std::string path = req_path(req);
  bool recursive = req.value("recursive", false);
  Lister lister(channel, send);
  struct stat st {};
  std::string target;
  Fd dir;
  if (clean_path(path) == "/") {
    dir = open_in_root(root_fd, "/", O_RDONLY | O_DIRECTORY);
    if (::fstat(dir.get(), &st) != 0) throw sys_error(path, errno);
  } else {
    auto [parent, name] = open_parent_in_root(root_fd, path);
    if (::fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) throw sys_error(path, errno);
    if (S_ISLNK(st.st_mode)) target = read_link_at(parent.get(), name.c_str());
    if (S_ISDIR(st.st_mode)) {
      dir.reset(::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!dir) throw sys_error(path, errno);
    }
  }
  lister.add(entry_json("", st, target));
  if (dir) {
    if (recursive) {
      lister.walk(dir.get(), "");
    } else {
      // One level only: reuse the walker on a copy that does not descend.
      Fd only(::dup(dir.get()));
      DIR* d = ::fdopendir(only.release());
      if (!d) throw sys_error(path, errno);
      while (auto* ent = ::readdir(d)) {
        if (!std::strcmp(ent->d_name, ".") || !std::strcmp(ent->d_name, "..")) continue;
        struct stat s2 {};
        if (::fstatat(dir.get(), ent->d_name, &s2, AT_SYMLINK_NOFOLLOW) != 0) continue;
        lister.add(entry_json(ent->d_name, s2, S_ISLNK(s2.st_mode) ? read_link_at(dir.get(), ent->d_name) : ""));
      }
      ::closedir(d);
    }
  }
  lister.flush();
  send(proto::encode(proto::Type::end, channel));
}

Upload::Upload(int root_fd, const json& req) {
  std::string path = req_path(req);
  std::string kind = req.value("kind", "file");
  mode_ = sbx::number_field(req, "mode", 0644u) & 07777;
  mtime_ = sbx::number_field(req, "mtime", int64_t{0});
  auto [dir, name] = open_parent_in_root(root_fd, path);
  dir_ = std::move(dir);
  name_ = name;
  struct stat st {};
  bool exists = ::fstatat(dir_.get(), name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (kind == "dir") {
    if (exists && !S_ISDIR(st.st_mode)) throw Error(Errc::conflict, path + " exists and is not a directory");
    if (!exists && ::mkdirat(dir_.get(), name_.c_str(), mode_) != 0) throw sys_error("creating " + path, errno);
    // mkdirat's mode passes through the umask; set it exactly. O_PATH fds cannot fchmod, so reopen.
    Fd d(::openat(dir_.get(), name_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (d) {
      ::fchmod(d.get(), mode_);
      if (mtime_) {
        timespec ts[2] = {{mtime_, 0}, {mtime_, 0}};
        ::futimens(d.get(), ts);
      }
    }
    dir_.reset();
  } else if (kind == "symlink") {
    std::string target = req.value("target", "");
    if (target.empty()) throw Error(Errc::invalid_argument, "symlink " + path + " without a target");
    if (exists) {
      if (S_ISDIR(st.st_mode)) throw Error(Errc::conflict, path + " exists and is a directory");
      ::unlinkat(dir_.get(), name_.c_str(), 0);
    }
    if (::symlinkat(target.c_str(), dir_.get(), name_.c_str()) != 0) throw sys_error("creating " + path, errno);
    dir_.reset();
  } else if (kind == "file") {
    if (exists && S_ISDIR(st.st_mode)) throw Error(Errc::conflict, path + " exists and is a directory");
    unsigned char rnd[6];
    if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd)) throw sys_error("getrandom", errno);
    tmp_ = ".sbx-upload-";
    for (unsigned char c : rnd) tmp_ += "0123456789abcdef"[c & 15];
    file_.reset(::openat(dir_.get(), tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!file_) throw sys_error("creating " + path, errno);
  } else {
    throw Error(Errc::invalid_argument, "unknown file kind '" + kind + "'").set_hint("kinds are file, dir, symlink");
  }
}

Upload::~Upload() {
  // An upload cut off midway (host vanished, error) leaves nothing behind.
  if (file_ && !tmp_.empty()) ::unlinkat(dir_.get(), tmp_.c_str(), 0);
}

void Upload::data(std::string_view bytes) {
  if (!file_) throw Error(Errc::protocol, "data for an upload that takes none");
  write_all(file_.get(), bytes);
  written_ += bytes.size();
  // cgroup v1 memory (this host's kind) does not throttle a group's dirty
  // pages, so an upload larger than --memory could fill it with dirty page
  // cache (the sandbox's disk is a file on a loop device) faster than
  // writeback drains it, and OOM-kill the sandbox. Flushing as it goes bounds
  // what is dirty to kFlushEvery; the flushed pages are then dropped, so an
  // upload does not push the sandbox's own working set out of its memory.
  if (written_ - flushed_ >= kFlushEvery) {
    if (::fdatasync(file_.get()) != 0) throw sys_error("writing the upload", errno);
    ::posix_fadvise(file_.get(), static_cast<off_t>(flushed_), static_cast<off_t>(written_ - flushed_), POSIX_FADV_DONTNEED);
    flushed_ = written_;
  }
}

void Upload::finish() {
  if (!file_) return;
  if (::fchmod(file_.get(), mode_) != 0) throw sys_error("chmod", errno);
  if (mtime_) {
    timespec ts[2] = {{mtime_, 0}, {mtime_, 0}};
    ::futimens(file_.get(), ts);
  }
  if (::renameat(dir_.get(), tmp_.c_str(), dir_.get(), name_.c_str()) != 0) {
    int e = errno;
    ::unlinkat(dir_.get(), tmp_.c_str(), 0);
    file_.reset();
    throw sys_error("installing " + name_, e);
  }
  file_.reset();
}

}  // namespace sbx::agent
