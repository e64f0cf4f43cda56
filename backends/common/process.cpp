#include "backends/common/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <linux/prctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "backends/common/cgroup.hpp"
#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/fsutil.hpp"

namespace sbx::proc {

namespace {
// Fields of /proc/PID/stat (proc(5)): where the memory layout lies.
enum StatField : size_t {
  kStartCode = 26, kEndCode = 27, kStartStack = 28, kStartData = 45, kEndData = 46, kStartBrk = 47,
  kArgStart = 48, kArgEnd = 49, kEnvStart = 50, kEnvEnd = 51,
};
}  // namespace

Title::Title(std::string title) : text_(std::move(title)) {
  comm_ = text_.substr(0, std::min(text_.find(' '), size_t{15}));
  text_.push_back('\0');
  auto stat = read_file_if_exists("/proc/self/stat");
  auto close = stat ? stat->rfind(')') : std::string::npos;
  if (close == std::string::npos) return;
  // After the command: the state (field 3), then numbers.
  stat_.assign(4, 0);
  const char* s = stat->c_str() + close + 4;
  for (char* end = nullptr; *s; s = end) {
    stat_.push_back(std::strtoull(s, &end, 10));
    if (end == s) break;
  }
  if (stat_.size() <= kEnvEnd) stat_.clear();
}

void Title::apply() const {
  ::prctl(PR_SET_NAME, comm_.c_str(), 0, 0, 0);
  if (stat_.empty()) return;
  auto at = [&](StatField f) { return static_cast<__u64>(stat_[f]); };
  prctl_mm_map map{};
  map.start_code = at(kStartCode);
  map.end_code = at(kEndCode);
  map.start_data = at(kStartData);
  map.end_data = at(kEndData);
  map.start_brk = at(kStartBrk);
  map.brk = static_cast<__u64>(::syscall(SYS_brk, 0));  // now, not when the parent read its stat
  map.start_stack = at(kStartStack);
  map.arg_start = reinterpret_cast<__u64>(text_.data());
  map.arg_end = map.arg_start + text_.size();
  map.env_start = at(kEnvStart);
  map.env_end = at(kEnvEnd);
  map.exe_fd = static_cast<__u32>(-1);
  if (::prctl(PR_SET_MM, PR_SET_MM_MAP, &map, sizeof map, 0) == 0) return;
  // Without PR_SET_MM_MAP (CONFIG_CHECKPOINT_RESTORE): overwrite the old argv, as setproctitle does.
  auto* start = reinterpret_cast<char*>(stat_[kArgStart]);
  size_t room = static_cast<size_t>(stat_[kArgEnd] - stat_[kArgStart]);
  if (!start || room == 0 || stat_[kArgEnd] < stat_[kArgStart]) return;
  size_t n = std::min(room - 1, text_.size() - 1);
  std::memcpy(start, text_.data(), n);
  std::memset(start + n, 0, room - n);
}

void kill_pinned(pid_t pid, uint64_t start, int timeout_ms) {
  if (pid <= 0 || start_time(pid) != start) return;
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (pidfd && start_time(pid) == start) {
    ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
    pollfd p{pidfd.get(), POLLIN, 0};
    ::poll(&p, 1, timeout_ms);
  } else if (!pidfd) {
    ::kill(pid, SIGKILL);
  }
}

RunResult run(const std::vector<std::string>& argv, const RunOptions& opts) { return run(argv, opts, nullptr); }

RunResult run(const std::vector<std::string>& argv, const RunOptions& opts, const std::function<bool()>& ready) {
  using namespace std::chrono;
  // Everything the child needs is built before fork: after fork in a possibly
  // multi-threaded process only raw system calls are safe.
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2], go[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
  Fd out_r(out[0]), out_w(out[1]);
  if (::pipe2(go, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
  Fd go_r(go[0]), go_w(go[1]);
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) throw sys_error("/dev/null", errno);
  Fd null_fd(devnull);
  int sink = opts.output_fd >= 0 ? opts.output_fd : out_w.get();
  pid_t pid = ::fork();
  if (pid < 0) throw sys_error("cannot fork", errno);
  if (pid == 0) {
    char c;
    if (::read(go_r.get(), &c, 1) != 1) ::_exit(127);  // the parent put us in the cgroup (or gave up)
    ::setpgid(0, 0);  // one group to kill on timeout
    if (::dup2(null_fd.get(), 0) < 0 || ::dup2(sink, 1) < 0 || ::dup2(sink, 2) < 0) ::_exit(127);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  out_w.reset();
  go_r.reset();
  auto reap = [&]() -> int {
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  };
  if (opts.group) {
    try {
      opts.group->add(pid);
    } catch (...) {
      ::kill(pid, SIGKILL);
      reap();
      throw;
    }
  }
  char c = 'G';
  write_all(go_w.get(), std::string_view(&c, 1));
  RunResult r;
  auto deadline = steady_clock::now() + milliseconds(opts.timeout_ms);
  // Read until EOF (captured output) or, for an output file, until the child exits.
  bool eof = false;
  while (!eof) {
    auto left = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    pollfd p{out_r.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, opts.output_fd >= 0 ? 20 : left)));
    if (n < 0 && errno != EINTR) break;
    if (n > 0) {
      char buf[4096];
      ssize_t got = ::read(out_r.get(), buf, sizeof buf);
      if (got <= 0) eof = true;
      else if (r.output.size() < (64u << 10)) r.output.append(buf, static_cast<size_t>(got));
    }
    if (opts.output_fd >= 0) {
      int st = 0;
      pid_t w = ::waitpid(pid, &st, WNOHANG);
      if (w == pid) {
        r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return r;
      }
      if (ready && ready()) {
        r.ready = true;
        break;
      }
    }
  }
  if (r.timed_out || r.ready) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
  }
  r.status = reap();
  return r;
}

}  // namespace sbx::proc
