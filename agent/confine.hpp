// What confines a command: no capabilities (bounding set emptied, so even uid 0
// regains none on exec), no_new_privs, and a seccomp filter refusing the
// kernel's riskier doors.
#pragma once

namespace sbx::agent {

/// What every command gives up, given up once by the agent for itself at its
/// start (the processes it forks inherit it): securebits locked so root
/// regains nothing through exec or setuid, the ambient and bounding sets
/// emptied, and no_new_privs. The agent keeps its own capabilities, and
/// execs nothing but commands, through a shim that drops them. Returns 0 or an errno.
int lock_privileges();
/// lock_privileges for the agent itself, at its start: on success, the shims
/// it starts (which share its memory) know it without asking the kernel.
int lock_agent_privileges();
/// Drops every capability for good: lock_privileges unless the agent already
/// did (known from lock_agent_privileges, else checked with two syscalls; a
/// lock costs ~45, and under gVisor's ptrace platform each call is a round
/// trip to the sentry), then the capability sets. Returns 0 or an errno.
int drop_privileges();
/// Installs the seccomp filter (libseccomp) on the calling process. The agent
/// installs it on itself once at start: every command inherits it, and no
/// exec pays for the kernel compiling a filter again. Returns 0 or an errno.
int install_seccomp_filter();

}  // namespace sbx::agent
