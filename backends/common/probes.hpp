// Host checks more than one driver's probe makes (doctor and /healthz show them).
#pragma once

#include <string>
#include <vector>

#include "backends/common/cgroup.hpp"
#include "core/driver.hpp"

namespace sbx::probes {

/// sbx runs as root; `needed_for` says why this driver needs it.
Probe running_as_root(const std::string& needed_for);

/// The memory, pids and cpu controllers, v1 or v2, each named with where it is
/// mounted. `found` (optional) receives what was detected, `note` is appended
/// to the detail when all three are there.
Probe cgroup_controllers(std::vector<cgroup::Controller>* found = nullptr, const std::string& note = "");

/// Whether putting a sandbox into its cgroups waits for an RCU grace period
/// (advisory: 7-30 ms of every create on this project's CI host, none with
/// favordynmods; docs/speed.md).
Probe cgroup_attach();

}  // namespace sbx::probes
