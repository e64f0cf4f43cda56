#include "core/fsutil.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/error.hpp"

namespace sbx {

std::optional<std::string> read_file_if_exists(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::nullopt;
    throw sys_error("cannot open " + path, errno);
  }
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw sys_error("cannot read " + path, errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::optional<std::string> proc_cmdline(const std::string& pid) {
  try {
    return read_file_if_exists("/proc/" + pid + "/cmdline");
  } catch (const Error& e) {
    if (e.code() == Errc::not_found) return std::nullopt;  // ESRCH: it exited after the open
    throw;
  }
}

std::string read_file(const std::string& path) {
  auto s = read_file_if_exists(path);
  if (!s) throw Error(Errc::not_found, path + " does not exist");
  return *s;
}

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw sys_error("write failed", errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

bool read_exact(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw sys_error("read failed", errno);
    }
    if (r == 0) {
      if (got == 0) return false;
      throw Error(Errc::protocol, "unexpected end of stream");
    }
    got += static_cast<size_t>(r);
  }
  return true;
}

void write_file_atomic(const std::string& path, std::string_view data, unsigned mode, Durability durability) {
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string tmp = path + ".tmp." + std::to_string(rng());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd) throw sys_error("cannot create " + tmp, errno);
  try {
    write_all(fd.get(), data);
    if (durability == Durability::survive_crash && ::fsync(fd.get()) != 0) throw sys_error("cannot sync " + tmp, errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fd.reset();
  // Without fsync, an existing target is swapped with the temp file rather than
  // renamed over: ext4 starts writing back a file renamed over another
  // (auto_da_alloc), which cost ~0.12 ms a save here, and a swap does not.
  // Readers see the old or the new file either way; the old one then goes.
  if (durability == Durability::survive_process &&
      ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
    ::unlink(tmp.c_str());
    return;
  }
  // No target yet (ENOENT), or a filesystem without the swap (EINVAL): a rename.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw sys_error("cannot rename " + tmp + " to " + path, e);
  }
  if (durability == Durability::survive_crash) {
    Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (d) ::fsync(d.get());
  }
}

void write_knob(const std::string& path, std::string_view value) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) throw sys_error("cannot open " + path, errno);
  ssize_t n = ::write(fd.get(), value.data(), value.size());
  if (n < 0) throw sys_error("cannot write '" + std::string(value) + "' to " + path, errno);
}

void make_dirs(const std::string& path, unsigned mode) {
  if (path.empty()) return;
  // The whole path first: its parents nearly always exist, and a walk from /
  // costs a syscall per part (a sandbox's create makes ~15 directories).
  if (::mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return;
  if (errno != ENOENT) throw sys_error("cannot create directory " + path, errno);
  if (auto slash = path.find_last_of('/'); slash != std::string::npos && slash != 0)
    make_dirs(path.substr(0, slash), mode);
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) throw sys_error("cannot create directory " + path, errno);
}

namespace {
void remove_at(int parent, const char* name, dev_t dev, const char* last = nullptr);

// Removes what the directory holds; `last`, if named, after everything else.
void remove_entries(DIR* d, dev_t dev, const char* last) {
  bool has_last = false;
  while (auto* ent = ::readdir(d)) {
    if (!std::strcmp(ent->d_name, ".") || !std::strcmp(ent->d_name, "..")) continue;
    if (last && !std::strcmp(ent->d_name, last)) {
      has_last = true;
      continue;
    }
    remove_at(::dirfd(d), ent->d_name, dev);
  }
  if (has_last) remove_at(::dirfd(d), last, dev);
}

// ENOENT anywhere is someone else's removal of the same tree having got there first.
void remove_at(int parent, const char* name, dev_t dev, const char* last) {
  struct stat st {};
  if (::fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return;
    throw sys_error(std::string("cannot stat ") + name, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    if (st.st_dev != dev)  // a mount point: never descend into another filesystem
      throw Error(Errc::conflict, std::string(name) + " is still a mount point");
    int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return;
    if (fd < 0) throw sys_error(std::string("cannot open ") + name, errno);
    DIR* d = ::fdopendir(fd);
    if (!d) {
      ::close(fd);
      throw sys_error(std::string("cannot read ") + name, errno);
    }
    try {
      remove_entries(d, dev, last);
    } catch (...) {
      ::closedir(d);
      throw;
    }
    ::closedir(d);
    if (::unlinkat(parent, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
      throw sys_error(std::string("cannot remove ") + name, errno);
  } else if (::unlinkat(parent, name, 0) != 0 && errno != ENOENT) {
    throw sys_error(std::string("cannot remove ") + name, errno);
  }
}
}  // namespace

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (auto* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(std::move(n));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

void remove_tree(const std::string& path) { remove_tree_last(path, nullptr); }

void remove_tree_last(const std::string& path, const char* last) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw sys_error("cannot stat " + path, errno);
  }
  with_context("removing " + path, [&] { remove_at(AT_FDCWD, path.c_str(), st.st_dev, last); });
}

void flock_wait(int fd, bool exclusive, const std::string& path) {
  while (::flock(fd, exclusive ? LOCK_EX : LOCK_SH) != 0) {
    if (errno != EINTR) throw sys_error("cannot lock " + path, errno);
  }
}

Fd lock_file(const std::string& path, bool exclusive) {
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) throw sys_error("cannot open lock " + path, errno);
  flock_wait(fd.get(), exclusive, path);
  return fd;
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace sbx
