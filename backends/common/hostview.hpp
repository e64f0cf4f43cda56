// The default read-only base of a sandbox: a skeleton directory with a
// curated /etc (no secrets: no shadow, no ssh keys, no host users), mount
// points, and the merged-/usr symlinks; the host's /usr is bind-mounted on
// it read-only at start. Nothing of /root, /home, the state root or the
// caller's working tree is ever part of it.
#pragma once

#include <string>
#include <vector>

namespace sbx::hostview {

/// Builds (once, atomically) and returns the skeleton directory under the state root.
std::string ensure_skeleton(const std::string& state_root);

/// Host directories bind-mounted read-only onto the skeleton ("/usr", and
/// "/bin", "/lib", ... on hosts whose root is not merged into /usr).
std::vector<std::string> bind_dirs();

/// The directories every sandbox's root owns and may write (/root, /tmp,
/// /var/tmp and its workdir); everything else of the base stays read-only.
std::vector<std::string> own_dirs(const std::string& workdir);

/// Refuses a base (`lower`) where a component of one of `dirs` is a symlink
/// or not a directory: the host creates those directories in the sandbox's
/// root as root, and a planted link would aim that at the host.
void check_own_dirs(const std::string& lower, const std::vector<std::string>& dirs);

}  // namespace sbx::hostview
