// The subprocess driver: a sandbox is a tree of processes in their own
// namespaces under a cgroup, with the agent as its init. Unlike the
// operator guide's "subprocess" (no isolation at all), this one is a real
// container: see launch.hpp for what it gets.
#pragma once

#include <memory>
#include <vector>

#include "core/config.hpp"
#include "core/driver.hpp"

namespace sbx::subprocess {

/// The probes doctor prints for this driver.
std::vector<Probe> probe(const Config& cfg, bool deep);
/// A driver instance.
std::unique_ptr<Driver> make(const Config& cfg);

}  // namespace sbx::subprocess
