// What the agent does to a command between fork and exec so that it runs with
// nothing: no capabilities (bounding set emptied, so even uid 0 regains none on
// exec), no_new_privs, and a seccomp filter refusing the kernel's riskier doors.
#pragma once

namespace sbx::agent {

/// Drops every capability for good and sets no_new_privs. Returns 0 or an errno.
int drop_privileges();
/// Compiles the seccomp filter (libseccomp) once, before any fork. Returns 0 or an errno.
int prepare_seccomp_filter();
/// Installs the compiled filter on the calling process: one prctl, safe
/// between fork and exec. Returns 0 or an errno.
int load_seccomp_filter();

}  // namespace sbx::agent
