#include "core/safe_path.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>

#include <cerrno>
#include <vector>

#include "core/error.hpp"

namespace sbx {

namespace {
long sys_openat2(int dirfd, const char* path, open_how* how) {
  return ::syscall(SYS_openat2, dirfd, path, how, sizeof(*how));
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
    if (errno == ENOSYS)
      throw Error(Errc::unavailable, "this kernel lacks openat2 (Linux 5.6 or newer is needed)", ENOSYS);
    throw sys_error(std::string(path), errno);
  }
}

std::pair<Fd, std::string> open_parent_in_root(int root_fd, std::string_view path) {
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
