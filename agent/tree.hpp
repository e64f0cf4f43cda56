// A command's process tree inside the sandbox, found through /proc: what the
// command started by parent links, in its process group or in its session
// (the shim is the session leader and, where the kernel has them, a child
// subreaper). Killing it must win against a fork bomb under a pids cap, so
// nothing here forks and every kill repeats until a scan finds none left.
#pragma once

#include <sys/types.h>

namespace sbx::agent {

/// SIGKILLs root and everything it started. Stops the tree first (a stopped
/// process cannot fork), kills it, and scans again until no member is left
/// alive, for at most about two seconds.
void kill_tree(pid_t root);

/// The same for what root started, root itself spared: the leftover rule,
/// run by a command's shim once the command has ended.
void kill_descendants(pid_t root);

/// A signal from the host for a running command: SIGKILL ends its tree; any
/// other goes to its process group and, on a terminal (term_fd >= 0), to the
/// terminal's foreground process group, where a key would send it.
void signal_command(pid_t shim, int term_fd, int sig);

/// Sends sig to every living member of root's tree except root (the shim,
/// which ignores signals anyway); SIGKILL means kill_tree.
void signal_tree(pid_t root, int sig);

}  // namespace sbx::agent
