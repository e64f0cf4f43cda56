// A process named by its pid and its start time. A pid alone can be recycled
// by an unrelated process; the pair cannot. Drivers pin the agents they start
// this way, and a one-shot sandbox pins the client it lives for.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace sbx::proc {

/// Start time (clock ticks since boot) of pid, or 0 if it is gone or a zombie.
uint64_t start_time(pid_t pid);

/// Whether pid is still the process that started at `start`.
bool alive(pid_t pid, uint64_t start);

/// The inode of this process's pid namespace, or 0 if unknown: a pid names a
/// process only within its namespace.
uint64_t pid_namespace();

}  // namespace sbx::proc
