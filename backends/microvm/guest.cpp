#include "backends/microvm/guest.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

#include "backends/common/process.hpp"
#include "core/agent_binary.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::microvm {

namespace {

std::string hex8(uint32_t v) {
  char b[9];
  std::snprintf(b, sizeof b, "%08X", v);
  return b;
}

// One newc entry: header, name (NUL-terminated), padding to 4, data, padding to 4.
void cpio_entry(std::string& out, const std::string& name, uint32_t mode, const std::string& data, uint32_t ino) {
  out += "070701";
  for (uint32_t v : {ino, mode, 0u, 0u, 1u, 0u, static_cast<uint32_t>(data.size()), 0u, 0u, 0u, 0u,
                     static_cast<uint32_t>(name.size() + 1), 0u})
    out += hex8(v);
  out += name;
  out += '\0';
  while (out.size() % 4) out += '\0';
  out += data;
  while (out.size() % 4) out += '\0';
}

}  // namespace

GuestDir find_guest() {
  std::string tried;
  auto usable = [&](const std::string& d) {
    tried += (tried.empty() ? "" : ", ") + d;
    return path_exists(d + "/vmlinuz") && path_exists(d + "/initrd.cpio.gz");
  };
  // A clean path for doctor to show ("/usr/local/lib/sbx/guest", not ".../bin/../lib/...").
  auto found = [](const std::string& d, const std::string& how) {
    char real[PATH_MAX];
    return GuestDir{::realpath(d.c_str(), real) ? std::string(real) : d, how};
  };
  if (const char* env = std::getenv("SBX_GUEST_DIR"); env && *env) {
    if (usable(env)) return found(env, "SBX_GUEST_DIR");
  }
  std::string self = sbx_binary_dir();
  if (!self.empty()) {
    if (usable(self + "/guest")) return found(self + "/guest", "beside the sbx binary");
    if (usable(self + "/../lib/sbx/guest")) return found(self + "/../lib/sbx/guest", "installed, from the sbx binary");
  }
  if (usable(SBX_BUILD_GUEST_DIR)) return found(SBX_BUILD_GUEST_DIR, "the build tree sbx was built in");
  throw Error(Errc::not_found, "the micro-VM guest image is missing (looked in " + tried + ")")
      .set_hint("build it with `scripts/build-guest.sh build/guest` (scripts/setup.sh does), "
                "install it with `cmake --install`, or set SBX_GUEST_DIR");
}

std::string find_guest_dir() { return find_guest().path; }

std::string guest_build_date(const std::string& guest_dir) {
  auto d = read_file_if_exists(guest_dir + "/build-date");
  if (!d) return "unknown";
  while (!d->empty() && d->back() == '\n') d->pop_back();
  return *d;
}

std::string agent_cpio(const std::string& agent_bytes) {
  std::string out;
  cpio_entry(out, "sbin", 040755, "", 1);
  cpio_entry(out, "sbin/sbx-agent", 0100755, agent_bytes, 2);
  cpio_entry(out, "TRAILER!!!", 0, "", 0);
  while (out.size() % 512) out += '\0';
  return out;
}

std::string prepare_initrd(const std::string& guest_dir, const std::string& agent_path, const std::string& cache_dir) {
  struct stat a {}, b {};
  std::string base = guest_dir + "/initrd.cpio.gz";
  if (::stat(agent_path.c_str(), &a) != 0) throw sys_error(agent_path, errno);
  if (::stat(base.c_str(), &b) != 0) throw sys_error(base, errno);
  // Identity by size and mtime: a rebuilt agent or image gets a new file, and
  // a running VM keeps the one it booted from.
  std::string key = std::to_string(a.st_size) + "-" + std::to_string(a.st_mtim.tv_sec) + "-" +
                    std::to_string(b.st_size) + "-" + std::to_string(b.st_mtim.tv_sec);
  std::string path = cache_dir + "/initrd-" + key + ".img";
  if (path_exists(path)) return path;
  make_dirs(cache_dir, 0755);
  write_file_atomic(path, agent_cpio(read_file(agent_path)) + read_file(base), 0644, Durability::survive_process);
  // Initrds of an older agent or image: QEMU reads its initrd whole at start,
  // so no running VM needs its file any more.
  if (DIR* d = ::opendir(cache_dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      // Finished files only: another sbx may be writing its own (*.img.tmp.N) right now.
      bool finished = name.size() > 4 && name.compare(name.size() - 4, 4, ".img") == 0;
      if (name.rfind("initrd-", 0) == 0 && finished && cache_dir + "/" + name != path)
        ::unlink((cache_dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  return path;
}

namespace {

std::string e2fsprogs(const std::string& tool) {
  return path_exists("/sbin/" + tool) ? "/sbin/" + tool : "/usr/sbin/" + tool;
}

// mkfs.ext4 (e2fsprogs) into a fresh sparse file of size_mb at path.
void mkfs_ext4(const std::string& path, uint64_t size_mb, std::vector<std::string> options, const std::string& what,
               int timeout_ms) {
  {
    Fd f(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!f) throw sys_error("cannot create " + path, errno);
    if (::ftruncate(f.get(), static_cast<off_t>(size_mb << 20)) != 0) throw sys_error("cannot size " + path, errno);
  }
  std::vector<std::string> argv = {e2fsprogs("mkfs.ext4"), "-q", "-F"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back(path);
  proc::RunOptions o;
  o.timeout_ms = timeout_ms;
  auto r = proc::run(argv, o);
  if (r.status != 0)
    throw Error(Errc::io, "mkfs.ext4 of " + what + " failed (exit " + std::to_string(r.status) + "): " + r.output.substr(0, 500))
        .set_hint("apt-get install e2fsprogs");
}

struct TreeSize {
  uint64_t bytes = 0;   ///< data and directory blocks, 4 KiB each
  uint64_t inodes = 0;  ///< every entry (hard links once)
  dev_t dev = 0;        ///< the top directory's filesystem: the whole tree must be on it
};

// What a copy of the tree below dirfd takes on ext4. Never follows a link
// and never leaves the directory's filesystem view (openat of the names found).
void measure(int dirfd, const std::string& path, TreeSize& t, std::set<std::pair<dev_t, ino_t>>& seen) {
  DIR* d = ::fdopendir(dirfd);
  if (!d) {
    int e = errno;
    ::close(dirfd);
    throw sys_error("cannot read " + path, e);
  }
  struct Closer {
    DIR* d;
    ~Closer() { ::closedir(d); }
  } closer{d};
  while (auto* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) throw sys_error("cannot stat " + path + "/" + name, errno);
    if (S_ISDIR(st.st_mode) && st.st_dev != t.dev)
      throw Error(Errc::invalid_argument, "the image spans filesystems: " + path + "/" + name + " is a mount point")
          .set_hint("give --image a directory holding one root filesystem (sbx image build makes one), not a live system's /");
    if (st.st_nlink > 1 && !S_ISDIR(st.st_mode) && !seen.insert({st.st_dev, st.st_ino}).second) continue;
    t.inodes++;
    t.bytes += (static_cast<uint64_t>(st.st_size) + 4095) / 4096 * 4096;
    if (!S_ISDIR(st.st_mode)) continue;
    int sub = ::openat(::dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) throw sys_error("cannot open " + path + "/" + name, errno);
    measure(sub, path + "/" + name, t, seen);
  }
}

std::string parent_of(const std::string& path) {
  auto slash = path.find_last_of('/', path.size() > 1 && path.back() == '/' ? path.size() - 2 : std::string::npos);
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

}  // namespace

void make_layer_disk(const std::string& path, uint64_t size_mb) {
  // Small disks get no journal (it would not fit); nothing is reserved for root.
  std::vector<std::string> opts = {"-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1"};
  if (size_mb < 64) opts.insert(opts.end(), {"-O", "^has_journal"});
  mkfs_ext4(path, size_mb, opts, "the writable layer", 30'000);
}

void make_image_disk(const std::string& dir, const std::string& path) {
  Fd root(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root)
    throw sys_error("cannot read the image directory " + dir, errno)
        .set_hint("--image names a directory holding a root filesystem (sbx image ls lists the built ones)");
  TreeSize t;
  struct stat st {};
  if (::fstat(root.get(), &st) != 0) throw sys_error("cannot stat " + dir, errno);
  t.dev = st.st_dev;
  std::set<std::pair<dev_t, ino_t>> seen;
  measure(root.release(), dir, t, seen);
  // Room for ext4's own metadata (inode tables at 256 bytes an inode, bitmaps,
  // directory growth) on top of the data; the file is sparse, so slack costs
  // nothing on the host.
  uint64_t inodes = t.inodes + t.inodes / 4 + 256;
  uint64_t mb = (t.bytes + t.bytes / 8 + inodes * 256) / (1 << 20) + 64;
  // Read-only forever: no journal, nothing reserved, 4 KiB blocks and 256-byte
  // inodes whatever the size (mke2fs picks 1 KiB and 128 for small ones).
  mkfs_ext4(path, mb,
            {"-b", "4096", "-I", "256", "-N", std::to_string(inodes), "-m", "0", "-O", "^has_journal", "-E",
             "lazy_itable_init=1,nodiscard", "-L", "sbx-image", "-d", dir},
            "the image " + dir, 600'000);
  // mke2fs always makes /lost+found: the guest's root holds what the directory holds.
  if (!path_exists(dir + "/lost+found")) {
    proc::RunOptions o;
    o.timeout_ms = 30'000;
    auto r = proc::run({e2fsprogs("debugfs"), "-w", "-R", "rmdir lost+found", path}, o);
    if (r.status != 0) throw Error(Errc::io, "debugfs could not tidy " + path + ": " + r.output.substr(0, 300));
  }
}

std::string image_disk_cache(const std::string& image) {
  std::string entry = parent_of(image);
  return path_exists(entry + "/image.json") ? entry + "/rootfs.ext4" : "";
}

std::string image_disk(const std::string& image, const std::string& per_sandbox) {
  std::string cache = image_disk_cache(image);
  if (!cache.empty() && path_exists(cache)) return cache;  // a store image never changes: neither does its disk
  // A store on a read-only filesystem cannot keep one: a copy per sandbox then.
  if (cache.empty() || ::access(parent_of(cache).c_str(), W_OK) != 0) {
    make_image_disk(image, per_sandbox);
    return per_sandbox;
  }
  // One maker per image; the others wait for its file instead of making their own.
  Fd lock = lock_file(cache + ".lock");
  if (path_exists(cache)) return cache;
  std::string tmp = cache + ".tmp." + std::to_string(::getpid());
  try {
    make_image_disk(image, tmp);
    // Durable before it is visible: it is never rebuilt, so a torn one would stay torn.
    Fd f(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC));
    if (!f || ::fsync(f.get()) != 0 || ::chmod(tmp.c_str(), 0644) != 0) throw sys_error("cannot finish " + tmp, errno);
    if (::rename(tmp.c_str(), cache.c_str()) != 0) throw sys_error("cannot rename " + tmp + " to " + cache, errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  Fd d(::open(parent_of(cache).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d) ::fsync(d.get());
  return cache;
}

}  // namespace sbx::microvm
