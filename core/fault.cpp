#include "core/fault.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

namespace sbx::fault {

namespace {

struct Plan {
  std::string crash_at;  // the point's name; empty: never
  long nth = 1;
  const char* trace = nullptr;
  std::string stall_at;  // the point's name; empty: never
  long stall_ms = 0;
  bool any = false;
};

// "NAME:N" into NAME and N (fallback when there is no number).
std::pair<std::string, long> name_and_number(const char* v, long fallback) {
  std::string name = v;
  long n = fallback;
  if (auto colon = name.rfind(':'); colon != std::string::npos) {
    n = std::strtol(name.c_str() + colon + 1, nullptr, 10);
    name.resize(colon);
  }
  return {name, n};
}

const Plan& plan() {
  static const Plan p = [] {
    Plan out;
    if (const char* v = std::getenv("SBX_TEST_CRASH_AT"); v && *v) {
      std::tie(out.crash_at, out.nth) = name_and_number(v, 1);
      out.nth = std::max(1L, out.nth);
    }
    if (const char* v = std::getenv("SBX_TEST_STALL_AT"); v && *v) std::tie(out.stall_at, out.stall_ms) = name_and_number(v, 0);
    if (const char* t = std::getenv("SBX_TEST_FAULT_TRACE"); t && *t) out.trace = t;
    out.any = !out.crash_at.empty() || !out.stall_at.empty() || out.trace;
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
  if (p.stall_at == name && p.stall_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(p.stall_ms));
  if (p.crash_at == name && ++reached == p.nth) ::kill(::getpid(), SIGKILL);
}

}  // namespace sbx::fault
