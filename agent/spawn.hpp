// Starting a command inside the sandbox and stopping it with all it started.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/fd.hpp"

namespace sbx::agent {

struct SpawnRequest {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cwd;
  bool stdin_open = false;  ///< a pipe for stdin; otherwise /dev/null (no effect with tty)
  bool confine = true;      ///< drop capabilities and load the seccomp filter
  bool tty = false;         ///< on a new terminal: its controlling tty, stdin, stdout and stderr
  uint16_t rows = 0, cols = 0;  ///< the terminal's size (0: 24 x 80)
};

struct Spawned {
  pid_t pid = -1;
  /// Non-blocking ends held by the agent: pipes, or with tty all three are the
  /// terminal's master (err empty: a terminal has one output).
  Fd out, err, in;
  Fd term;  ///< tty: the master again, for window sizes
  /// tty on a kernel whose terminals send no signals (terminal_sends_signals):
  /// input goes through feed_terminal, and the shim raises the typed signals.
  bool signal_keys = false;
};

/// Why a spawn failed before the command ran (exec or chdir failure).
struct SpawnFailure {
  int exit_code;        ///< 127 not found, 126 not executable, 125 other
  std::string message;  ///< for the user, e.g. "nosuch: command not found"
};

/// Sets every signal's disposition to the default, once at the agent's start.
/// A signal the agent ignored (as inherited from whoever started it) would
/// stay ignored in every command it starts, across exec; with none ignored,
/// the shim need not reset 64 dispositions on each spawn. The agent itself
/// takes its signals through a signalfd and installs no handler.
/// fresh: the agent was started by a kernel (gVisor's sentry starting a
/// container's init), so no disposition needs resetting.
void reset_signal_dispositions(bool fresh);

/// Forks and execs; on failure before exec returns the failure instead of a process.
/// The child is a session leader, so its pid is also its process group. When
/// the command ends, whatever it left running is killed (agent/tree.hpp)
/// before the child mirrors the command's status: a foreground exec's
/// leftovers end with it, as a timeout's do.
Spawned spawn(const SpawnRequest& req, SpawnFailure& failure);

}  // namespace sbx::agent
