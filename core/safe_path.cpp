#include "core/safe_path.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <optional>
#include <vector>

#include "core/error.hpp"

namespace sbx {

namespace {
long sys_openat2(int dirfd, const char* path, open_how* how) {
  return ::syscall(SYS_openat2, dirfd, path, how, sizeof(*how));
}

// Set once openat2 answered ENOSYS (gVisor, kernels < 5.6), or by
// SBX_SAFE_PATH_PORTABLE=1 so the unit tests can run the same escapes
// against the portable walk on a kernel that has openat2.
std::atomic<bool> g_portable{std::getenv("SBX_SAFE_PATH_PORTABLE") != nullptr &&
                             std::string_view(std::getenv("SBX_SAFE_PATH_PORTABLE")) == "1"};

// Linux's own limit on symlinks followed in one lookup.
constexpr int kMaxSymlinks = 40;

void push_components(std::deque<std::string>& todo, std::string_view path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    auto part = path.substr(i, j - i);
    if (!part.empty() && part != ".") parts.emplace_back(part);
    i = j + 1;
  }
  todo.insert(todo.begin(), parts.begin(), parts.end());
}

// The symlink's target, or nullopt when `name` is not a symlink.
std::optional<std::string> symlink_target(int dir, const std::string& name) {
  std::string buf(256, '\0');
  for (;;) {
    ssize_t n = ::readlinkat(dir, name.c_str(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINVAL) return std::nullopt;  // exists, not a symlink
      if (errno == ENOENT) return std::nullopt;  // let the open report it (or create it)
      throw sys_error(name, errno);
    }
    if (static_cast<size_t>(n) < buf.size()) return buf.substr(0, static_cast<size_t>(n));
    buf.resize(buf.size() * 2);
  }
}

// What openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) does, in user space:
// one component at a time, never letting the kernel follow a link or a "..".
// ".." pops a stack of directory fds that starts at the root, so neither a
// symlink nor a concurrent rename can climb above it; symlink targets are
// spliced into the remaining path (absolute ones restart at the root), so a
// magic link's text is resolved inside the root like any other.
// A NUL ends the name the kernel sees: "..\0x" would reach openat as ".."
// (out of the root, in the walk below) and "a\0/../b" as "a". No path has one.
void refuse_nul(std::string_view path) {
  if (path.find('\0') != std::string_view::npos)
    throw Error(Errc::invalid_argument, "a path must not contain a NUL byte");
}

Fd open_portable(int root_fd, std::string_view path, int flags, mode_t mode) {
  std::vector<Fd> stack;  // directories below the root; empty = at the root
  auto cur = [&] { return stack.empty() ? root_fd : stack.back().get(); };
  std::deque<std::string> todo;
  push_components(todo, path);
  int links = 0;
  const bool follow_last = !(flags & O_NOFOLLOW);
  while (!todo.empty()) {
    std::string name = std::move(todo.front());
    todo.pop_front();
    if (name == "..") {
      if (!stack.empty()) stack.pop_back();
      continue;
    }
    const bool last = todo.empty();
    if (!last || follow_last) {
      if (auto target = symlink_target(cur(), name)) {
        if (++links > kMaxSymlinks) throw sys_error(std::string(path), ELOOP);
        if (!target->empty() && (*target)[0] == '/') stack.clear();
        push_components(todo, *target);
        continue;
      }
    }
    if (last) {
      for (;;) {
        int fd = ::openat(cur(), name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd >= 0) return Fd(fd);
        if (errno == EINTR) continue;
        // O_NOFOLLOW meeting a link the caller wanted followed: it was swapped in
        // after the check above; resolve it again.
        if (errno == ELOOP && follow_last && symlink_target(cur(), name)) {
          todo.push_back(name);
          break;
        }
        // O_PATH | O_NOFOLLOW on a link opens the link itself, as openat2 does.
        throw sys_error(std::string(path), errno);
      }
      continue;
    }
    int fd = ::openat(cur(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if ((err == ENOTDIR || err == ELOOP) && symlink_target(cur(), name)) {
        todo.push_front(name);  // became a link since the check: resolve it again
        continue;
      }
      throw sys_error(std::string(path), err);
    }
    stack.emplace_back(fd);
  }
  // The path named the root or a directory reached through ".." and links.
  int fd = ::openat(cur(), ".", (flags & ~(O_CREAT | O_EXCL | O_TRUNC)) | O_CLOEXEC);
  if (fd < 0) throw sys_error(std::string(path), errno);
  return Fd(fd);
}
}  // namespace

std::string clean_path(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    auto part = path.substr(i, j - i);
    if (!part.empty() && part != ".") parts.push_back(part);
    i = j + 1;
  }
  std::string out;
  for (auto p : parts) {
    out += '/';
    out += p;
  }
  return out.empty() ? "/" : out;
}

Fd open_in_root(int root_fd, std::string_view path, int flags, mode_t mode) {
  refuse_nul(path);
  if (g_portable.load(std::memory_order_relaxed)) return open_portable(root_fd, path, flags, mode);
  std::string rel = clean_path(path);
  // openat2 with RESOLVE_IN_ROOT treats a leading "/" as the root itself.
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  // O_TMPFILE includes the O_DIRECTORY bit: test it whole, or every directory open would pass a mode (EINVAL).
  how.mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? mode : 0;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  for (;;) {
    long fd = sys_openat2(root_fd, rel.c_str(), &how);
    if (fd >= 0) return Fd(static_cast<int>(fd));
    if (errno == EINTR || errno == EAGAIN) continue;  // EAGAIN: a racing rename; the kernel asks to retry
    if (errno == ENOSYS) {  // gVisor, or a kernel older than 5.6
      g_portable.store(true, std::memory_order_relaxed);
      return open_portable(root_fd, path, flags, mode);
    }
    throw sys_error(std::string(path), errno);
  }
}

std::pair<Fd, std::string> open_parent_in_root(int root_fd, std::string_view path) {
  refuse_nul(path);
  std::string clean = clean_path(path);
  if (clean == "/") throw Error(Errc::invalid_argument, "the root directory itself cannot be the target");
  auto slash = clean.rfind('/');
  std::string name = clean.substr(slash + 1);
  std::string parent = slash == 0 ? "/" : clean.substr(0, slash);
  if (name == "..") {
    // "/a/.." names a directory, not an entry; resolve it fully and use its parent's view.
    throw Error(Errc::invalid_argument, "path '" + std::string(path) + "' must not end in '..'");
  }
  return {open_in_root(root_fd, parent, O_PATH | O_DIRECTORY), name};
}

bool openat2_supported() {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT;
  long fd = sys_openat2(AT_FDCWD, "/", &how);
  if (fd < 0) return errno != ENOSYS;
  ::close(static_cast<int>(fd));
  return true;
}

}  // namespace sbx
