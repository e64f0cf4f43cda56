#include "backends/microvm/guest.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

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

std::string find_guest_dir() {
  std::string tried;
  auto usable = [&](const std::string& d) {
    tried += (tried.empty() ? "" : ", ") + d;
    return path_exists(d + "/vmlinuz") && path_exists(d + "/initrd.cpio.gz");
  };
  if (const char* env = std::getenv("SBX_GUEST_DIR"); env && *env) {
    if (usable(env)) return env;
  }
  std::string self = sbx_binary_dir();
  if (!self.empty()) {
    if (usable(self + "/guest")) return self + "/guest";
    if (usable(self + "/../lib/sbx/guest")) return self + "/../lib/sbx/guest";
  }
  if (usable(SBX_BUILD_GUEST_DIR)) return SBX_BUILD_GUEST_DIR;
  throw Error(Errc::not_found, "the micro-VM guest image is missing (looked in " + tried + ")")
      .set_hint("build it with `scripts/build-guest.sh build/guest` (scripts/setup.sh does), or set SBX_GUEST_DIR");
}

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

void make_layer_disk(const std::string& path, uint64_t size_mb) {
  {
    Fd f(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!f) throw sys_error("cannot create " + path, errno);
    if (::ftruncate(f.get(), static_cast<off_t>(size_mb << 20)) != 0) throw sys_error("cannot size " + path, errno);
  }
  // Small disks get no journal (it would not fit); nothing is reserved for root.
  std::vector<std::string> argv = {"/sbin/mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1"};
  if (size_mb < 64) argv.insert(argv.end(), {"-O", "^has_journal"});
  argv.push_back(path);
  if (!path_exists(argv[0])) argv[0] = "/usr/sbin/mkfs.ext4";
  proc::RunOptions o;
  o.timeout_ms = 30'000;
  auto r = proc::run(argv, o);
  if (r.status != 0)
    throw Error(Errc::io, "mkfs.ext4 of the writable layer failed (exit " + std::to_string(r.status) + "): " + r.output.substr(0, 500))
        .set_hint("apt-get install e2fsprogs");
}

}  // namespace sbx::microvm
