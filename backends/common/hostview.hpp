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

}  // namespace sbx::hostview
