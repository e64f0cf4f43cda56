// The runsc driver: each sandbox is an OCI container run by gVisor's runsc,
// with sbx-agent as its init. The host reaches the agent over a unix socket
// the agent creates in a directory shared with the host (runsc --host-uds=all).
#pragma once

#include <memory>
#include <vector>

#include "core/config.hpp"
#include "core/driver.hpp"

namespace sbx::runsc {

/// The probes doctor prints for this driver.
std::vector<Probe> probe(const Config& cfg, bool deep);
/// A driver instance.
std::unique_ptr<Driver> make(const Config& cfg);

}  // namespace sbx::runsc
