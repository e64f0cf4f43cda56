#include "core/fault.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sbx::fault {

namespace {

struct Plan {
  std::string crash_at;  // the point's name; empty: never
  long nth = 1;
  const char* trace = nullptr;
  bool any = false;
};

const Plan& plan() {
  static const Plan p = [] {
    Plan out;
    if (const char* v = std::getenv("SBX_TEST_CRASH_AT"); v && *v) {
      out.crash_at = v;
      if (auto colon = out.crash_at.rfind(':'); colon != std::string::npos) {
        out.nth = std::max(1L, std::strtol(out.crash_at.c_str() + colon + 1, nullptr, 10));
        out.crash_at.resize(colon);
      }
    }
    if (const char* t = std::getenv("SBX_TEST_FAULT_TRACE"); t && *t) out.trace = t;
    out.any = !out.crash_at.empty() || out.trace;
    return out;
  }();
  return p;
}

std::atomic<long> reached{0};

}  // namespace

void point(const char* name) {
  const Plan& p = plan();
  if (!p.any) return;
  if (p.trace) {
    // One write(2) per line with O_APPEND: lines of concurrent writers do not interleave.
    int fd = ::open(p.trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      std::string line = std::string(name) + "\n";
      ssize_t ignored = ::write(fd, line.data(), line.size());
      (void)ignored;
      ::close(fd);
    }
  }
  if (p.crash_at == name && ++reached == p.nth) ::kill(::getpid(), SIGKILL);
}

}  // namespace sbx::fault
