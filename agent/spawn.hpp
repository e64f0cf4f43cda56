// Starting a command inside the sandbox and stopping it with all it started.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "core/fd.hpp"

namespace sbx::agent {

struct SpawnRequest {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cwd;
  bool stdin_open = false;  ///< a pipe for stdin; otherwise /dev/null
  bool confine = true;      ///< drop capabilities and load the seccomp filter
};

struct Spawned {
  pid_t pid = -1;
  Fd out, err, in;  ///< non-blocking pipe ends held by the agent
};

/// Why a spawn failed before the command ran (exec or chdir failure).
struct SpawnFailure {
  int exit_code;        ///< 127 not found, 126 not executable, 125 other
  std::string message;  ///< for the user, e.g. "nosuch: command not found"
};

/// Forks and execs; on failure before exec returns the failure instead of a process.
/// The child is a session leader, so its pid is also its process group.
Spawned spawn(const SpawnRequest& req, SpawnFailure& failure);

/// SIGKILLs pid, its process group and session, and every descendant still
/// traceable through parent links (read from /proc), twice to catch forks in flight.
void kill_tree(pid_t pid);

/// Tells an exec's shim that the host wants the command gone (Ctrl-C, SIGTERM,
/// SIGHUP): once the command ends, the shim kills whatever it left running, as
/// a timeout would, before it reports the command's own status. Sent to the
/// shim alone, before the host's signal goes to the command's group.
void end_tree_with_command(pid_t shim);

}  // namespace sbx::agent
