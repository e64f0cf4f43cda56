#include "backends/common/own_dir.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace sbx::own_dir {

int make(int root_fd, const char* dir, uid_t uid, gid_t gid, bool* replaced) {
  *replaced = false;
  int dfd = ::fcntl(root_fd, F_DUPFD_CLOEXEC, 0);
  if (dfd < 0) return errno;
  const char* p = dir;
  while (*p == '/') ++p;
  bool any = false;
  while (*p != '\0') {
    any = true;
    char name[NAME_MAX + 1];
    size_t n = 0;
    while (p[n] != '\0' && p[n] != '/') ++n;
    const char* rest = p + n;
    while (*rest == '/') ++rest;
    const bool last = *rest == '\0';
    if (n > NAME_MAX) {
      ::close(dfd);
      return ENAMETOOLONG;
    }
    for (size_t i = 0; i < n; ++i) name[i] = p[i];
    name[n] = '\0';
    if ((n == 1 && name[0] == '.') || (n == 2 && name[0] == '.' && name[1] == '.')) {
      ::close(dfd);
      return EINVAL;
    }
    bool created = ::mkdirat(dfd, name, 0755) == 0;
    if (!created && errno != EEXIST) {
      int e = errno;
      ::close(dfd);
      return e;
    }
    // O_NOFOLLOW|O_DIRECTORY: a symlink (ELOOP) or a file (ENOTDIR) where a
    // directory belongs is the sandbox's own doing; leave it, go no further.
    int next = ::openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    ::close(dfd);
    if (next < 0) {
      if (e == ELOOP || e == ENOTDIR) {
        *replaced = true;
        return 0;
      }
      return e;
    }
    dfd = next;
    if ((created || last) && uid != static_cast<uid_t>(-1) && ::fchown(dfd, uid, gid) != 0) {
      e = errno;
      ::close(dfd);
      return e;
    }
    p = rest;
  }
  // "/" (a workdir at the root): the root itself is the sandbox's.
  int e = !any && uid != static_cast<uid_t>(-1) && ::fchown(dfd, uid, gid) != 0 ? errno : 0;
  ::close(dfd);
  return e;
}

}  // namespace sbx::own_dir
