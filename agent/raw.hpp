// System calls made without libc, for code that runs in an exec's shim.
//
// The shim shares the agent's memory (spawn.cpp says why), so it must not
// touch what the agent's thread owns: libc's errno and malloc's per-thread
// cache live in that thread's TLS, which the shim shares too. Every call
// here returns the kernel's answer as is: a result, or -errno.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>

#include <type_traits>

#if !defined(__x86_64__)
#error "agent/raw.hpp: the shim's raw system calls are written for x86-64 only"
#endif

namespace sbx::agent::raw {

inline long call(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  long ret;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}

template <typename T>
long arg(T v) {
  if constexpr (std::is_null_pointer_v<T>) return 0;
  else if constexpr (std::is_pointer_v<T>) return reinterpret_cast<long>(v);
  else return static_cast<long>(v);
}

template <typename... Args>
long sys(long nr, Args... args) {
  return call(nr, arg(args)...);
}

[[noreturn]] inline void exit_group(int code) {
  for (;;) call(SYS_exit_group, code);
}

/// A hexadecimal mask of /proc/self/status ("SigIgn", "CapBnd"), read into a
/// buffer on the stack: false when /proc is not mounted or the kernel does
/// not report that field (gVisor's status has no SigIgn).
bool status_mask(const char* field, unsigned long& mask);

}  // namespace sbx::agent::raw

extern "C" {
/// vfork(2) without libc: the child's answer is 0, the parent's the child's
/// pid or -errno. Like vfork, its caller's frame is shared until the child
/// execs or exits.
long sbx_raw_vfork() __attribute__((returns_twice));
/// The return path of a signal handler installed with rt_sigaction directly
/// (SA_RESTORER): libc's own is not exported.
void sbx_raw_sigreturn();
}
