// Copies of a sandbox's disk image for snapshots (`sbx snapshot`) and for
// sandboxes made from one (`sbx create --from`, `sbx fork`). The state root
// here is ext4 without reflink, so a copy is a sparse one: only the blocks
// the layer holds move (an empty layer's ~600 KiB in ~1 ms).
#include <fcntl.h>
#include <ftw.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "backends/common/disk.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::disk {

namespace {

// Every sandbox's id range is this wide (core/registry.cpp).
constexpr uint32_t kIdsPerSandbox = 65536;

// nftw has no context argument; seed_image runs one walk at a time per process.
thread_local uint32_t g_from = 0, g_to = 0;
thread_local int g_walk_errno = 0;

uint32_t shifted(uint32_t id) { return id >= g_from && id - g_from < kIdsPerSandbox ? id - g_from + g_to : id; }

int shift_owner(const char* path, const struct stat* st, int /*flag*/, FTW* /*ftw*/) {
  if (::lchown(path, shifted(st->st_uid), shifted(st->st_gid)) != 0) {
    g_walk_errno = errno;
    return 1;
  }
  // chown clears set-id bits on a regular file; put them back.
  if (S_ISREG(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID)) && ::chmod(path, st->st_mode & 07777) != 0) {
    g_walk_errno = errno;
    return 1;
  }
  return 0;
}

// Readies a copied layer for its new sandbox: clears the overlay's work
// directory (scratch; a volatile mount leaves work/incompat/volatile there, and
// overlayfs refuses to mount over it again) and, when from != to, moves the
// files' owners from one sandbox's id range into the other's.
void prepare_copy(const std::string& image, const std::string& mnt, uint32_t from, uint32_t to) {
  make_dirs(mnt, 0700);
  {
    Loop loop = attach(image);
    if (::mount(loop.path().c_str(), mnt.c_str(), "ext4", MS_NOSUID | MS_NODEV, kMountOptions) != 0)
      throw sys_error("mounting " + image + " to move its owners", errno);
  }  // the mount holds the device now; autoclear detaches it at the unmount
  remove_tree(mnt + "/work");
  g_from = from, g_to = to, g_walk_errno = 0;
  int rc = from == to ? 0 : ::nftw(mnt.c_str(), shift_owner, 32, FTW_PHYS | FTW_MOUNT);
  int walk_errno = rc == 0 ? 0 : (g_walk_errno ? g_walk_errno : errno);
  if (::umount2(mnt.c_str(), 0) != 0) throw sys_error("unmounting " + mnt, errno);
  ::rmdir(mnt.c_str());
  if (rc != 0) throw sys_error("moving the owners of the files in " + image, walk_errno);
}

}  // namespace

void copy_image(const std::string& from, const std::string& to) {
  Fd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) throw sys_error("cannot open " + from, errno);
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) throw sys_error("cannot stat " + from, errno);
  std::string tmp = to + ".tmp";
  Fd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out) throw sys_error("cannot create " + tmp, errno);
  try {
    if (::ftruncate(out.get(), st.st_size) != 0) throw sys_error("sizing " + tmp, errno);
    sparse_copy(in.get(), out.get(), from);
    if (::rename(tmp.c_str(), to.c_str()) != 0) throw sys_error("installing " + to, errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

void seed_image(const std::string& from, const std::string& dir, uint32_t from_uid_base, uint32_t to_uid_base) {
  std::string image = image_path(dir);
  copy_image(from, image);
  prepare_copy(image, dir + "/seed", from_uid_base, to_uid_base);
}

}  // namespace sbx::disk
