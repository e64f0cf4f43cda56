#include "core/pinned_pid.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "core/fsutil.hpp"

namespace sbx::proc {

uint64_t start_time(pid_t pid) {
  auto stat = read_file_if_exists("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return 0;
  auto close = stat->rfind(')');
  if (close == std::string::npos) return 0;
  // Fields after the command: state is the 3rd field, starttime the 22nd.
  const char* s = stat->c_str() + close + 2;
  char state = *s;
  if (state == 'Z' || state == 'X') return 0;
  int field = 3;
  while (*s && field < 22) {
    if (*s == ' ') ++field;
    ++s;
  }
  return std::strtoull(s, nullptr, 10);
}

bool alive(pid_t pid, uint64_t start) { return pid > 0 && start != 0 && start_time(pid) == start; }

uint64_t pid_namespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

}  // namespace sbx::proc
