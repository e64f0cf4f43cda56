// Talking to the runsc binary: where it is, its version, the global flags
// every call shares, and the platform choice (ptrace or kvm) with a probe
// that cannot hang sbx (the kvm platform hangs forever in nested VMs).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backends/common/process.hpp"

namespace sbx::runsc {

/// $SBX_RUNSC, else runsc on PATH (/usr/bin/runsc from Debian's package); throws not_found.
std::string find_binary();
/// First line of `runsc --version`, or why it failed.
std::string version(const std::string& bin, bool* ok);

/// runsc's own state directory for one sbx state root: `runsc --root X list` is per state root.
std::string root_dir(const std::string& state_root);

struct Platform {
  std::string name;  ///< ptrace | kvm
  std::string why;   ///< how it was chosen (doctor prints it)
};
/// SBX_RUNSC_PLATFORM if set (ptrace | kvm), else the cached probe result of
/// this state root, else a fresh probe (kvm only when /dev/kvm is there and a
/// smoke run on it finishes in time; ptrace otherwise), which is then cached.
Platform choose_platform(const std::string& state_root, bool reprobe = false);
/// The platform chosen earlier (or forced by SBX_RUNSC_PLATFORM), without probing; nullopt when none yet.
std::optional<Platform> cached_platform(const std::string& state_root);

/// Runs `runsc do CMD` (default /bin/true) on `platform` in a throwaway cgroup and runsc root,
/// killing everything it started when it takes longer than timeout_ms. Empty = it worked; else why not.
std::string smoke(const std::string& state_root, const std::string& platform, int timeout_ms,
                  const std::vector<std::string>& cmd = {"/bin/true"});

/// Whether this runsc refuses statx(AT_NO_AUTOMOUNT) with EINVAL, as gVisor
/// releases before 2023 do: GNU ls and stat (coreutils >= 9) then fail on
/// every path. Probed once per boot with `runsc do stat /` and cached like the platform.
bool statx_broken(const std::string& state_root, const std::string& platform);

/// [bin, --root R, --platform P, --network=none, --host-uds=all, --ignore-cgroups]
std::vector<std::string> global_args(const std::string& bin, const std::string& root, const std::string& platform);

/// Runs bin + global flags + args, output captured.
proc::RunResult call(const std::vector<std::string>& global, const std::vector<std::string>& args,
                     int timeout_ms = 15'000);

}  // namespace sbx::runsc
