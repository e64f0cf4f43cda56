#include "agent/raw.hpp"

#include <fcntl.h>

// The vfork child returns on its parent's stack, so the return address is
// kept in a register across the call, as libc's own vfork does; unlike it,
// a failure is returned, not stored in errno.
__asm__(
    ".section .text.sbx_raw_vfork,\"ax\",@progbits\n"
    ".globl sbx_raw_vfork\n"
    ".type sbx_raw_vfork,@function\n"
    "sbx_raw_vfork:\n"
    "  popq %rdi\n"
    "  movl $58, %eax\n"  // SYS_vfork
    "  syscall\n"
    "  pushq %rdi\n"
    "  ret\n"
    ".size sbx_raw_vfork, .-sbx_raw_vfork\n"
    ".section .text.sbx_raw_sigreturn,\"ax\",@progbits\n"
    ".globl sbx_raw_sigreturn\n"
    ".type sbx_raw_sigreturn,@function\n"
    "sbx_raw_sigreturn:\n"
    "  movl $15, %eax\n"  // SYS_rt_sigreturn
    "  syscall\n"
    ".size sbx_raw_sigreturn, .-sbx_raw_sigreturn\n"
    ".text\n");

namespace sbx::agent::raw {

bool status_mask(const char* field, unsigned long& mask) {
  char buf[4096];  // the whole file is ~1.5 KB
  long fd = sys(SYS_openat, AT_FDCWD, "/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  long len = 0, n;
  while (len < static_cast<long>(sizeof buf) - 1 && (n = sys(SYS_read, fd, buf + len, sizeof buf - 1 - len)) > 0)
    len += n;
  sys(SYS_close, fd);
  buf[len] = 0;
  for (char* line = buf; *line;) {
    const char* f = field;
    char* c = line;
    while (*f && *c == *f) ++f, ++c;
    if (!*f && *c == ':') {
      ++c;
      while (*c == ' ' || *c == '\t') ++c;
      unsigned long v = 0;
      int digits = 0;
      for (;; ++c, ++digits) {
        int d = *c >= '0' && *c <= '9' ? *c - '0' : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10 : -1;
        if (d < 0) break;
        v = v << 4 | static_cast<unsigned>(d);
      }
      if (digits == 0 || digits > 16) return false;
      mask = v;
      return true;
    }
    while (*line && *line != '\n') ++line;
    if (*line) ++line;
  }
  return false;
}

}  // namespace sbx::agent::raw
