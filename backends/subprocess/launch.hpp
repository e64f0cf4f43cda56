// Starting a sandbox's init (the agent) in fresh namespaces: a private mount
// tree (an overlay over the read-only base whose upper is the sandbox's disk, fresh /proc, minimal
// /dev), its own PID, network (loopback only, or a network jail's
// namespace joined by setns), IPC, UTS and cgroup namespaces, and a user
// namespace that maps the sandbox's root to an unprivileged host uid range
// of its own.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/common/cgroup.hpp"

namespace sbx::subprocess {

struct LaunchPlan {
  std::string state_dir;              ///< the sandbox's private directory on the host
  std::string lower;                  ///< read-only base directory (skeleton or --image)
  std::vector<std::string> ro_binds;  ///< host dirs bind-mounted read-only at the same path (host view)
  std::string layer_dev;              ///< the loop device of the sandbox's disk image (the writable layer)
  bool persistent = false;            ///< the layer must mount again later (no volatile overlay)
  uint32_t uid_base = 0;              ///< host uid/gid of the sandbox's root
  std::string workdir;                ///< created and owned by the sandbox's root
  std::string hostname = "sandbox";
  std::string agent_path;             ///< the sbx-agent binary on the host
  std::string title = "sbx-agent";    ///< the agent's argv[0]: what its process shows in ps
  std::string netns;                  ///< network namespace to join (a jail's); empty = a fresh loopback-only one
  std::string resolv_conf;            ///< written to the sandbox's /etc/resolv.conf when not empty
};

struct Launched {
  pid_t pid = 0;           ///< host pid of the sandbox's init
  uint64_t start_time = 0; ///< its start time, clock ticks since boot
};

/// Starts the sandbox; returns once the agent has been exec'd (the caller
/// then waits for it to answer on <state_dir>/agent.sock).
Launched launch(const LaunchPlan& plan, const cgroup::Group& group);


}  // namespace sbx::subprocess
