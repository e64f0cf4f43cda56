#include "backends/common/probes.hpp"

#include <unistd.h>

#include <algorithm>

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

}  // namespace sbx::probes
