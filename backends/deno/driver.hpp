// The deno driver: a sandbox is one long-lived Deno process (agent-deno/)
// that speaks the agent protocol, keeps the sandbox's files in a SQLite
// database in its state directory, and runs Python (Pyodide) and
// JavaScript/TypeScript in Workers with no permissions of their own.
// As root, the process also gets a cgroup (memory/pids/cpu caps), a network
// namespace with nothing in it, a private mount namespace, no capabilities
// and the sandbox's own unprivileged uid.
#pragma once

#include <memory>
#include <vector>

#include "core/config.hpp"
#include "core/driver.hpp"

namespace sbx::deno {

/// The probes doctor prints for this driver (deep: also makes the Pyodide snapshot).
std::vector<Probe> probe(const Config& cfg, bool deep);
/// A driver instance.
std::unique_ptr<Driver> make(const Config& cfg);

}  // namespace sbx::deno
