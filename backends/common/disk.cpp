#include "backends/common/disk.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

#include "backends/common/process.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/spec.hpp"

namespace sbx::disk {

namespace {

constexpr int kMkfsTimeoutMs = 60'000;

std::string template_path(const std::string& state_root, uint64_t mb) {
  return state_root + "/disks/ext4-" + std::to_string(mb) + "M.img";
}

// Formats the template once per size and state root: written under a temp
// name and renamed, so a concurrent create sees either none or a whole one.
void ensure_template(const std::string& path, uint64_t mb) {
  if (path_exists(path)) return;
  make_dirs(path.substr(0, path.rfind('/')), 0700);
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    Fd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!f) throw sys_error("cannot create " + tmp, errno);
    if (::ftruncate(f.get(), static_cast<off_t>(mb << 20)) != 0) throw sys_error("sizing " + tmp, errno);
  }
  // No journal (a scratch layer; one less thing to copy and mount), no
  // reserved blocks (the cap is all the sandbox's), no discard at mkfs and
  // no table zeroing: a sparse file reads as zeros already.
  auto r = proc::run({"/sbin/mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal,^resize_inode", "-E",
                      "nodiscard,lazy_itable_init=1,assume_storage_prezeroed=1", tmp},
                     {kMkfsTimeoutMs});
  if (r.status != 0) {
    ::unlink(tmp.c_str());
    throw Error(Errc::io, "mkfs.ext4 failed (exit " + std::to_string(r.status) + "): " + r.output.substr(0, 400))
        .set_hint("apt-get install e2fsprogs");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw sys_error("installing " + path, e);
  }
}

// Only the extents that hold data: the copy of a 1 GiB template moves ~600 KiB.
std::optional<std::string> backing_file(const std::string& loop_name) {
  auto text = read_file_if_exists("/sys/block/" + loop_name + "/loop/backing_file");
  if (!text) return std::nullopt;
  while (!text->empty() && text->back() == '\n') text->pop_back();
  return text;
}

// Every bound loop device: its name (loopN) and its backing file. A deleted
// backing file shows with " (deleted)" after its path.
std::vector<std::pair<std::string, std::string>> bound() {
  std::vector<std::pair<std::string, std::string>> out;
  DIR* d = ::opendir("/sys/block");
  if (!d) return out;
  while (auto* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.rfind("loop", 0) != 0) continue;
    if (auto file = backing_file(std::string(name))) out.emplace_back(std::string(name), *file);
  }
  ::closedir(d);
  return out;
}

void detach(const std::string& loop_name) {
  Fd fd(::open(("/dev/" + loop_name).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return;
    throw sys_error("cannot open /dev/" + loop_name, errno);
  }
  // While still mounted this only marks it autoclear: the kernel detaches it at the last unmount.
  if (::ioctl(fd.get(), LOOP_CLR_FD, 0) != 0 && errno != ENXIO)
    throw sys_error("detaching /dev/" + loop_name, errno);
}

std::string strip_deleted(std::string file) {
  constexpr std::string_view kDeleted = " (deleted)";
  if (file.size() > kDeleted.size() && file.compare(file.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0)
    file.resize(file.size() - kDeleted.size());
  return file;
}

}  // namespace

void sparse_copy(int from, int to, const std::string& what) {
  off_t off = 0;
  for (;;) {
    off_t data = ::lseek(from, off, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) return;  // no data past off
      throw sys_error("reading " + what, errno);
    }
    off_t hole = ::lseek(from, data, SEEK_HOLE);
    if (hole < 0) throw sys_error("reading " + what, errno);
    loff_t in = data, out = data;
    for (size_t left = static_cast<size_t>(hole - data); left;) {
      ssize_t n = ::copy_file_range(from, &in, to, &out, left, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw sys_error("copying " + what, n < 0 ? errno : EIO);
      left -= static_cast<size_t>(n);
    }
    off = hole;
  }
}

std::string image_path(const std::string& dir) { return dir + "/disk.img"; }

std::string Loop::path() const { return "/dev/loop" + std::to_string(number); }

std::string ensure_image(const std::string& state_root, const std::string& dir, uint64_t mb) {
  std::string image = image_path(dir);
  if (path_exists(image)) return image;
  std::string tmpl = template_path(state_root, mb);
  with_context("formatting the " + std::to_string(mb) + "M disk template", [&] { ensure_template(tmpl, mb); });
  Fd from(::open(tmpl.c_str(), O_RDONLY | O_CLOEXEC));
  if (!from) throw sys_error("cannot open " + tmpl, errno);
  std::string tmp = image + ".tmp";
  Fd to(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!to) throw sys_error("cannot create " + tmp, errno);
  try {
    if (::ftruncate(to.get(), static_cast<off_t>(mb << 20)) != 0) throw sys_error("sizing " + tmp, errno);
    sparse_copy(from.get(), to.get(), "the disk template");
    if (::rename(tmp.c_str(), image.c_str()) != 0) throw sys_error("installing " + image, errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  return image;
}

Loop attach(const std::string& image) {
  Fd file(::open(image.c_str(), O_RDWR | O_CLOEXEC));
  if (!file) throw sys_error("cannot open " + image, errno);
  Fd ctl(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!ctl) throw sys_error("cannot open /dev/loop-control", errno).set_hint("modprobe loop");
  // Another process may bind the free device between the two calls: then ask again.
  for (int attempt = 0; attempt < 64; ++attempt) {
    int n = ::ioctl(ctl.get(), LOOP_CTL_GET_FREE);
    if (n < 0) throw sys_error("finding a free loop device", errno);
    Loop l;
    l.number = n;
    l.fd = Fd(::open(l.path().c_str(), O_RDWR | O_CLOEXEC));
    if (!l.fd) {
      if (errno == ENOENT) continue;  // removed meanwhile
      throw sys_error("cannot open " + l.path(), errno);
    }
    loop_config cfg{};
    cfg.fd = static_cast<__u32>(file.get());
    // Direct I/O: the image file's own page cache would hold every block a
    // second time, charged to the sandbox's memory cgroup (the loop worker
    // charges the writer's), and cgroup v1 does not throttle its dirty pages,
    // so a large upload into a small --memory sandbox could OOM-kill it.
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
    if (::ioctl(l.fd.get(), LOOP_CONFIGURE, &cfg) == 0) return l;
    if (errno != EBUSY) throw sys_error("binding " + image + " to " + l.path(), errno);
  }
  throw Error(Errc::unavailable, "no free loop device for " + image).set_hint("see `losetup -a`");
}

void mount(const Loop& loop, const std::string& target) {
  if (::mount(loop.path().c_str(), target.c_str(), "ext4", MS_NOSUID | MS_NODEV, kMountOptions) != 0)
    throw sys_error("mounting the writable layer (" + loop.path() + ") at " + target, errno);
}

void release(const std::string& dir) {
  std::string image = image_path(dir);
  for (auto& [name, file] : bound())
    if (strip_deleted(file) == image) detach(name);
}

void dispose(const std::string& state_root, const std::string& dir) {
  std::string image = image_path(dir);
  if (!path_exists(image)) return;
  std::string trash = state_root + "/disks/trash";
  make_dirs(trash, 0700);
  std::string name = dir.substr(dir.rfind('/') + 1);
  std::string target = trash + "/" + name + "-" + std::to_string(::getpid()) + ".img";
  if (::rename(image.c_str(), target.c_str()) != 0) {
    if (errno == ENOENT) return;
    throw sys_error("moving " + image + " away", errno);
  }
  // Twice forked, so the deleter is nobody's child to reap; raw calls only
  // after fork (sbx serve is multi-threaded). Should it never run, the file
  // stays in the trash, not in the sandbox's directory.
  pid_t child = ::fork();
  if (child == 0) {
    if (::fork() == 0) {
      ::close_range(3, ~0U, 0);
      ::unlink(target.c_str());
    }
    ::_exit(0);
  }
  if (child < 0) {
    ::unlink(target.c_str());
    return;
  }
  int status;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
}

std::vector<std::string> leftovers(const std::string& state_root, const std::set<std::string>& live) {
  std::vector<std::string> out;
  std::string prefix = state_root + "/sandboxes/";
  for (auto& [name, raw] : bound()) {
    std::string file = strip_deleted(raw);
    if (file.rfind(prefix, 0) != 0) continue;
    std::string rest = file.substr(prefix.size());
    auto slash = rest.find('/');
    if (slash == std::string::npos || rest.substr(slash) != "/disk.img") continue;
    std::string id = rest.substr(0, slash);
    if (valid_sandbox_id(id) && !live.count(id)) out.push_back("loop /dev/" + name + " " + file);
  }
  return out;
}

void reap(const std::string& what) {
  // "loop /dev/loopN FILE": detach only if it is still bound to that file.
  auto first = what.find(' '), second = what.find(' ', first + 1);
  if (what.rfind("loop /dev/", 0) != 0 || second == std::string::npos) return;
  std::string name = what.substr(first + 6, second - first - 6);
  auto file = backing_file(name);
  if (file && strip_deleted(*file) == what.substr(second + 1)) detach(name);
}

}  // namespace sbx::disk
