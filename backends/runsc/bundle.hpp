// The OCI bundle of one runsc sandbox: config.json naming the sandbox's root
// (an overlay of its private, size-capped writable layer over the read-only
// base), the read-only host binds of the host view, and /.sbx, the directory
// the host shares with the agent for its socket.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sbx::runsc {

struct BundlePlan {
  std::string rootfs;                 ///< merged root on the host (overlay mount point)
  std::vector<std::string> ro_binds;  ///< host dirs bound read-only at the same path
  /// Read-only file binds {destination inside, host source}, mounted after ro_binds.
  std::vector<std::pair<std::string, std::string>> file_binds;
  std::string sock_dir;               ///< host dir bound at /.sbx (agent socket)
  std::string agent_path;             ///< host sbx-agent, bound read-only at /.sbx/sbx-agent
  std::string hostname = "sandbox";
  /// The sandbox's own writable directories (/tmp, /root, the workdir, ...):
  /// bound read-write from the root's overlay over a read-only root. Also keeps
  /// /tmp off gVisor's default sentry-memory tmpfs, in the size-capped layer.
  std::vector<std::string> rw_dirs;
  bool confine = true;                ///< false adds --no-confine (only if gVisor refuses seccomp)
  std::string netns;                  ///< a network jail's namespace file; empty = a fresh one (runsc --network=none)
};

/// Inside the container: where the agent binary and its socket live.
inline constexpr const char* kShareDir = "/.sbx";

/// The config.json of the bundle.
nlohmann::json oci_spec(const BundlePlan& plan);

}  // namespace sbx::runsc
