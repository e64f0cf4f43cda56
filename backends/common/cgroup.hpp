// A sandbox's cgroup: memory, pids and CPU caps, an OOM-kill counter, and a
// way to kill everything inside. Works on cgroup v1 hierarchies, the v2
// unified hierarchy, and hybrids (this host: v1 controllers plus a v2 mount at
// /sys/fs/cgroup/unified), choosing per controller where it is attached.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/spec.hpp"

namespace sbx::cgroup {

/// Where one controller lives.
struct Controller {
  std::string name;  ///< memory | pids | cpu | freezer
  std::string root;  ///< mount of its hierarchy
  bool v2 = false;
};

/// The controllers this host offers; empty with `why` filled when none is usable.
std::vector<Controller> detect(std::string* why = nullptr);

/// Whether moving a process into a cgroup (a write to cgroup.procs) skips the
/// RCU grace period it otherwise waits for: the kernel's threadgroup lock is in
/// its "favor dynamic modifications" mode once any cgroup root is mounted with
/// favordynmods (or the kernel booted with cgroup_favordynmods=true).
struct AttachMode {
  bool favor_dynmods = false;
  std::string mount;    ///< the mount that has it, or else the one to remount (v2 first)
  std::string options;  ///< that mount's options: a cgroup2 remount resets those it is not given (nsdelegate)
};
/// Reads /proc/mounts' text (fields: source, mount point, type, options).
AttachMode attach_mode(const std::string& proc_mounts);

/// The CFS period (µs) of a cap of `cpus` CPUs: 20 ms, longer where the
/// quota would fall under the kernel's 1 ms (cgroup.cpp says why).
uint64_t cpu_period_us(double cpus);

/// The cgroup directory (below sbx/) that holds the sandboxes of one state
/// root, so that two state roots on one host (a manager and a test run, say)
/// never take each other's groups for orphans.
/// Symlinks in the path are resolved first: one state root, one scope.
std::string scope_for(const std::string& state_root);
/// Removes sbx/<scope> in every controller if it holds no group any more.
void remove_scope_if_empty(const std::string& scope);

class Group {
 public:
  /// Creates sbx/<scope>/<name> under every controller and applies the limits.
  static Group create(const std::string& scope, const std::string& name, const Limits& limits);
  /// The group sbx/<scope>/<name> whether or not it exists (for cleanup).
  static Group open(const std::string& scope, const std::string& name);

  /// Changes the caps of a group that already holds processes (a warm-pool claim).
  void set_limits(const Limits& limits) const;
  /// Moves a process into the group in every controller.
  void add(pid_t pid) const;
  /// Processes in the group (from the first controller that has it).
  std::vector<pid_t> pids() const;
  /// How many times the memory limit killed a process here.
  uint64_t oom_kills() const;
  /// How often a fork or clone was refused by the pids cap (pids.events "max").
  uint64_t pids_limit_hits() const;
  /// SIGKILLs everything inside and removes the group; idempotent.
  void destroy() const;
  /// Whether this host has a freezer for the group (`sbx pause`).
  bool can_freeze() const;
  /// Freezes (or thaws) every process in the group and waits until the
  /// kernel says all of them are; the processes keep their memory.
  void freeze(bool frozen) const;
  /// Whether the group is frozen now.
  bool frozen() const;
  /// Thaws a frozen group, quietly (before a kill: on v1 a frozen task takes no SIGKILL).
  void thaw_if_frozen() const;
  /// Whether the group exists in any controller.
  bool exists() const;

  /// Names of every group in sbx/<scope>.
  static std::vector<std::string> list_all(const std::string& scope);

 private:
  std::string scope_;
  std::string name_;
  std::vector<Controller> ctrls_;
  std::string path(const Controller& c) const;
  const Controller* freezer() const;
};

}  // namespace sbx::cgroup
