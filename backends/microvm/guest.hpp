// The guest image (built by scripts/build-guest.sh) and what the driver adds
// per boot: the agent's cpio in front of the base initramfs, each sandbox's
// writable disk, and the read-only disk of its --image.
#pragma once

#include <cstdint>
#include <string>

namespace sbx::microvm {

/// Where the guest image was found, and by which rule (doctor shows both).
struct GuestDir {
  std::string path;  ///< the directory, symlinks and ".." resolved
  std::string how;   ///< "SBX_GUEST_DIR", "beside the sbx binary", "installed, from the sbx binary", ...
};
/// The guest image directory: $SBX_GUEST_DIR, else guest/ beside the sbx
/// binary, else <dir of the binary>/../lib/sbx/guest (the installed layout),
/// else the build tree's. Throws not_found with the build command as hint.
GuestDir find_guest();
/// find_guest()'s directory.
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

/// A sparse raw ext4 disk at `path` holding a copy of the directory `dir`
/// (owners, modes, links, xattrs: mkfs.ext4 -d), sized to fit, without a journal.
void make_image_disk(const std::string& dir, const std::string& path);
/// Where the disk of an image is cached: dirname(image)/rootfs.ext4 when the
/// image is an entry of the image store (dirname(image)/image.json exists), else "".
std::string image_disk_cache(const std::string& image);
/// The disk to attach read-only for the image directory `image`: a store
/// image's cached disk (made now, once, atomically, when missing), or for a
/// plain directory a fresh copy at `per_sandbox` (the directory may change).
std::string image_disk(const std::string& image, const std::string& per_sandbox);

}  // namespace sbx::microvm
