// Memory snapshots on runsc (`sbx snapshot --memory`, docs/snapshots.md).
// `runsc checkpoint` saves the sentry (the container's whole kernel: its
// processes, their memory, open files) into an image directory and ends the
// sandbox; `runsc restore` starts a sandbox from that image. This runsc cannot
// save a socket bound on the host ("Cannot save endpoint with bound host
// socket", and the failed checkpoint ends the sandbox), and the agent's
// listening socket is one (--host-uds=all): so the agent first lets go of every
// host socket (proto detach) and listens again at SIGUSR1, which the host sends
// to the restored container's init once runsc reaches it.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "backends/common/cgroup.hpp"

namespace sbx::runsc {

/// One runsc container as the checkpoint steps need it.
struct Container {
  std::vector<std::string> global;  ///< runsc and the global flags of its root and platform
  std::string id;
  std::string dir;  ///< the sandbox's state directory: bundle/, sock/, agent.log, sandbox.pid
};

/// `runsc checkpoint` into the directory `image`; the sandbox ends. Throws with runsc's words.
void checkpoint(const Container& c, const std::string& image);

/// `runsc restore --detach` of `image` with c.dir's bundle, inside `group`, then SIGUSR1 to its
/// agent. Returns the sandbox's pid once `runsc kill` reached it; a restore command that has not
/// returned by then is killed (the sandbox it started stays). Throws timeout after timeout_ms.
pid_t restore(const Container& c, const std::string& image, const cgroup::Group& group, int timeout_ms);

/// Makes the agent's share writable for a new socket (an old one removed).
void unlock_share(const std::string& sock_dir);

/// Waits until the agent's socket exists in sock_dir, then locks the share: from then on it
/// belongs to nobody, so sandboxed code cannot replace the socket with one of its own.
/// `alive` tells a dead sandbox from a slow one; `log` is quoted in errors.
void await_agent_socket(const std::string& sock_dir, const std::function<bool()>& alive, const std::string& log,
                        int timeout_ms);

/// The end of a log file for an error message, or "(empty log)".
std::string log_tail(const std::string& path, size_t max = 1500);

}  // namespace sbx::runsc
