// Making a sandbox's own directories (/root, /tmp, its workdir, ...) in its
// root, as the host's root, without ever following a symlink. The root is a
// layer the sandboxed code wrote: after a restart, a fork or `create --from`
// any component of those paths may be a link it planted toward a host path,
// and a plain mkdir/chown (or a bind mount of that source) would follow it
// onto the host.
#pragma once

#include <sys/types.h>

namespace sbx::own_dir {

/// Makes `dir` (absolute, as seen inside the sandbox, e.g. "/tmp/w/deep")
/// below the directory open at `root_fd`, component by component, never
/// following a symlink. Parents made here, and `dir` itself always, are handed
/// to uid:gid (uid (uid_t)-1: left as they are). When a component exists and
/// is not a real directory (the sandbox replaced it), nothing more is made and
/// `*replaced` is set: the sandbox keeps what it put there and the host touches
/// nothing behind it. Returns 0 or an errno. Async-signal-safe (no allocation):
/// the subprocess driver calls it between fork and exec.
int make(int root_fd, const char* dir, uid_t uid, gid_t gid, bool* replaced);

}  // namespace sbx::own_dir
