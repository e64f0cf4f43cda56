// The agent's event loop: many host connections, many channels per
// connection, many commands at once, one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sbx::agent {

struct ServerOptions {
  int listen_fd = -1;              ///< a listening unix socket to accept hosts on, or -1
  std::vector<int> stream_fds;     ///< already-connected streams (virtio-serial, stdio)
  bool confine = true;             ///< confine commands (capabilities, seccomp)
  bool exit_when_streams_close = false;  ///< for --stdio use: stop when the last stream ends
  /// A micro-VM guest: the kernel is the sandbox's own, so a rise of its
  /// oom_kill count during a command that died of SIGKILL means an OOM kill,
  /// reported in the exit frame (the host cannot see the guest's counter).
  bool report_oom = false;
  bool fresh_signals = false;  ///< --fresh-signals: started with every signal disposition default
  /// Where the agent listens (runsc): it may then detach (proto detach) and
  /// listen here again at SIGUSR1. Empty: detach is refused.
  std::string listen_path;
};

/// A listening unix socket at path that only its owner (the host's root) may connect to.
/// Throws Error. Narrows the umask around the bind: for the single-threaded agent only.
int listen_owner_only(const std::string& path);

/// Runs until asked to stop (SIGTERM to a non-init agent) or, with
/// exit_when_streams_close, until every stream closed. Returns an exit status.
int serve(const ServerOptions& opts);

}  // namespace sbx::agent
