// What confines a command: no capabilities (bounding set emptied, so even uid 0
// regains none on exec), no_new_privs, and a seccomp filter refusing the
// kernel's riskier doors.
#pragma once

namespace sbx::agent {

/// Drops every capability for good and sets no_new_privs. Returns 0 or an errno.
int drop_privileges();
/// Installs the seccomp filter (libseccomp) on the calling process. The agent
/// installs it on itself once at start: every command inherits it, and no
/// exec pays for the kernel compiling a filter again. Returns 0 or an errno.
int install_seccomp_filter();

}  // namespace sbx::agent
