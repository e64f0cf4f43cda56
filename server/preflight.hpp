// What `sbx serve` checks before it listens: that the host (most often a
// container) gives the default driver what it needs, so a manager that could
// never start a sandbox refuses at once, naming the missing capability, device
// or mount and the podman/docker flag that gives it, instead of answering every
// create with a mount or loop-device error. Driver-aware: only the default
// driver's needs are checked (today: runsc's).
#pragma once

#include <string>

#include "core/config.hpp"
#include "core/driver.hpp"

namespace sbx::server {

/// Throws Errc::unavailable listing every missing prerequisite of `driver`
/// (with the flags that give them as the hint); returns quietly when all are
/// there or when the driver has no preflight. With SBX_PREFLIGHT=smoke (the
/// manager image sets it) the driver's deep probe, a `runsc do /bin/true`
/// smoke run, must pass too.
void preflight(const Config& cfg, const DriverTable& drivers, const std::string& driver);

}  // namespace sbx::server
