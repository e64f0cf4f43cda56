// The guest image (built by scripts/build-guest.sh) and what the driver adds
// per boot: the agent's cpio in front of the base initramfs, and each
// sandbox's writable disk.
#pragma once

#include <cstdint>
#include <string>

namespace sbx::microvm {

/// The guest image directory: $SBX_GUEST_DIR, else guest/ beside the sbx
/// binary, else <libdir>/sbx/guest. Throws not_found with the build command as hint.
std::string find_guest_dir();
/// The build date recorded in the image, or "unknown".
std::string guest_build_date(const std::string& guest_dir);

/// A newc cpio archive holding one executable, /sbin/sbx-agent, padded to 512
/// bytes so an archive placed after it is found by the kernel.
std::string agent_cpio(const std::string& agent_bytes);
/// The initrd to boot: the agent's cpio followed by the image's base
/// initramfs, cached under cache_dir by the agent's and the image's identity.
std::string prepare_initrd(const std::string& guest_dir, const std::string& agent_path, const std::string& cache_dir);

/// A sparse raw disk of size_mb formatted ext4 (mkfs.ext4 from e2fsprogs).
void make_layer_disk(const std::string& path, uint64_t size_mb);

}  // namespace sbx::microvm
