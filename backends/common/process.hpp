// Host processes a driver starts or watches: killing one pinned by its start
// time (core/pinned_pid.hpp tells a live pid from a recycled one), and running
// a helper tool (runsc, ...) with a deadline so a hung tool can never hang sbx.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/pinned_pid.hpp"

namespace sbx::cgroup {
class Group;
}

namespace sbx::proc {

/// SIGKILLs pid if it is still the process that started at `start` (a pidfd
/// pins it, so a recycled pid is never hit) and waits up to timeout_ms for it to go.
void kill_pinned(pid_t pid, uint64_t start, int timeout_ms = 5000);

/// The name a forked process that never execs (a supervisor) shows in ps:
/// otherwise its /proc/PID/cmdline stays the argv of the sbx call that forked
/// it (`sbx serve --listen ...`). Prepared before fork; applied in the child.
class Title {
 public:
  /// `title` becomes the cmdline; its first word (15 characters at most) the comm.
  explicit Title(std::string title);
  /// In the child: raw system calls only. The cmdline becomes the title
  /// (PR_SET_MM_MAP, no capability needed); on a kernel without it, the
  /// title cut to the length of the argv it overwrites.
  void apply() const;

 private:
  std::string text_;  ///< the new cmdline, with its NUL
  std::string comm_;
  std::vector<unsigned long long> stat_;  ///< this process's /proc/self/stat fields, 1-based (its memory layout)
};

struct RunOptions {
  int timeout_ms = 30'000;           ///< SIGKILL the tool (and its process group) after this long
  int output_fd = -1;                ///< stdout+stderr go here instead of being captured
  const cgroup::Group* group = nullptr;  ///< joined before exec, so every descendant is inside
};

struct RunResult {
  int status = -1;       ///< exit code; 128+N when killed by signal N
  bool timed_out = false;
  bool ready = false;    ///< run()'s `ready` said so before the tool exited
  std::string output;    ///< stdout+stderr, when captured (capped at 64 KiB)
};

/// Runs argv (argv[0] a path) with stdin from /dev/null and waits for it.
/// Throws only when it cannot be started at all.
RunResult run(const std::vector<std::string>& argv, const RunOptions& opts = {});
/// run() with an output_fd, asking `ready` every 20 ms while the tool runs; once it is true the
/// wait ends and the tool's process group is killed (RunResult::ready): for a tool that did
/// its work but does not exit (this runsc's restore --detach).
RunResult run(const std::vector<std::string>& argv, const RunOptions& opts, const std::function<bool()>& ready);

}  // namespace sbx::proc
