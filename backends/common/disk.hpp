// A sandbox's writable layer on disk: a sparse ext4 image in its state
// directory (<dir>/disk.img), capped at --disk by the image's size, bound to
// a loop device and mounted, so the files written inside the sandbox live on
// the host's disk and never count toward its memory limit.
//
// Why this shape (measured on the development host, ext4 root without
// project quotas and a kernel without CONFIG_QUOTA, so no per-directory
// quota is available): mkfs.ext4 per sandbox costs an exec and 20-80 ms, so
// each size is formatted once per state root into a template
// (<state>/disks/ext4-<MB>M.img, ~600 KiB of data in a sparse file) and a
// sandbox's image is a sparse copy of it (SEEK_DATA/SEEK_HOLE with
// copy_file_range, ~1 ms). The loop device is bound with LOOP_CONFIGURE and
// LO_FLAGS_AUTOCLEAR: once the filesystem is mounted sbx closes the device,
// and the kernel detaches it by itself when the last mount goes (the
// subprocess driver mounts it only inside the sandbox's own mount namespace,
// so the sandbox's end is the layer's end). release() and leftovers() catch
// what a crash left bound.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/fd.hpp"

namespace sbx::disk {

/// Mount options of a layer: no lazy inode-table zeroing thread (a sparse
/// copy's tables read as zeros already) and no cache flushes (the layer is
/// scratch space; a persistent one is unmounted cleanly on the way down).
inline constexpr const char* kMountOptions = "noinit_itable,nobarrier";

/// The image file of the sandbox whose state directory is `dir`.
std::string image_path(const std::string& dir);

/// Makes <dir>/disk.img of `mb` MiB (a sparse copy of the state root's
/// template for that size, formatted on first use) unless it exists already
/// (a persistent sandbox started again keeps its files). Returns its path.
std::string ensure_image(const std::string& state_root, const std::string& dir, uint64_t mb);

/// A loop device bound to an image. Closing `fd` once the filesystem is
/// mounted leaves the mount as the device's only user (autoclear).
struct Loop {
  Fd fd;           ///< the open /dev/loopN
  int number = -1; ///< N
  /// "/dev/loopN"
  std::string path() const;
};

/// Copies the data extents of `from` into `to` at the same offsets
/// (SEEK_DATA/SEEK_HOLE and copy_file_range): holes stay holes. `to` must be
/// sized already; `what` names the source in errors.
void sparse_copy(int from, int to, const std::string& what);

/// A sparse copy of the image `from` as `to` (written under a temp name and renamed).
void copy_image(const std::string& from, const std::string& to);

/// Makes <dir>/disk.img a sparse copy of the snapshot image `from` (create --from),
/// mounted on the host once to clear the overlay's work directory. When the copy's files belong to another sandbox's id range (from_uid_base, as
/// the subprocess driver maps them), mounts it on the host once and moves every
/// owner into this sandbox's range (to_uid_base), so its root owns its files.
void seed_image(const std::string& from, const std::string& dir, uint32_t from_uid_base, uint32_t to_uid_base);

/// Binds `image` to a free loop device (LOOP_CTL_GET_FREE, LOOP_CONFIGURE with autoclear).
Loop attach(const std::string& image);

/// Mounts the layer on the host at `target` (runsc: its gofer serves it from there).
void mount(const Loop& loop, const std::string& target);

/// Detaches the loop devices still bound to the image of `dir` (after a crash, or while
/// a dying sandbox's mount drains). Quiet when there are none.
void release(const std::string& dir);

/// Takes the image of `dir` away (into <state_root>/disks/trash) and has a
/// detached process delete it: freeing a used image's blocks costs 1-25 ms
/// that a one-shot's caller need not wait for. Quiet when there is none.
void dispose(const std::string& state_root, const std::string& dir);

/// Loop devices bound to an image under <state_root>/sandboxes/ whose sandbox id is not
/// in `live`: "loop /dev/loopN <backing file>" each, for gc's orphan report.
std::vector<std::string> leftovers(const std::string& state_root, const std::set<std::string>& live);

/// Reaps one entry of leftovers().
void reap(const std::string& what);

}  // namespace sbx::disk
