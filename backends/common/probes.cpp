#include "backends/common/probes.hpp"

#include <unistd.h>

#include <algorithm>

#include "core/fsutil.hpp"

namespace sbx::probes {

Probe running_as_root(const std::string& needed_for) {
  bool root = ::geteuid() == 0;
  return {root, "running as root", root ? "uid 0" : "uid " + std::to_string(::geteuid()),
          "run sbx as root (" + needed_for + ")"};
}

Probe cgroup_controllers(std::vector<cgroup::Controller>* found, const std::string& note) {
  std::string why;
  auto ctrls = cgroup::detect(&why);
  std::string names;
  for (auto& c : ctrls) names += (names.empty() ? "" : ", ") + c.name + (c.v2 ? " (v2 at " : " (v1 at ") + c.root + ")";
  size_t caps = std::count_if(ctrls.begin(), ctrls.end(), [](const cgroup::Controller& c) { return c.name != "freezer"; });
  bool all = caps == 3;
  if (found) *found = ctrls;
  return {all, "cgroups", all ? names + note : (names.empty() ? why : "only " + names),
          "mount the memory, pids and cpu cgroup controllers (v1 or v2)"};
}

Probe cgroup_attach() {
  auto mode = cgroup::attach_mode(read_file_if_exists("/proc/mounts").value_or(""));
  Probe p{mode.favor_dynmods, "cgroup attach", "", "", true};
  if (mode.favor_dynmods) {
    p.detail = "no RCU grace period per sandbox (favordynmods on " + mode.mount + ")";
    return p;
  }
  p.detail = "each sandbox's move into its cgroups waits for an RCU grace period (7-30 ms per create on a nested VM)";
  // Until reboot; the boot option makes it stay. The kernel's trade: forks and exits take a slower lock.
  p.remedy = (mode.mount.empty() ? std::string() : "mount -o remount," + mode.options + ",favordynmods " + mode.mount + ", or ") +
             "boot with cgroup_favordynmods=true (docs/speed.md)";
  return p;
}

}  // namespace sbx::probes
