#include "server/preflight.hpp"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/fsutil.hpp"

namespace sbx::server {

namespace {

constexpr int kCapNetAdmin = 12;
constexpr int kCapNetRaw = 13;
constexpr int kCapSysAdmin = 21;

struct Missing {
  std::string what;  ///< what is lacking and what it is for
  std::string flag;  ///< the container flag that gives it
};

bool has_capability(int cap) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> cap) & 1;
  return false;
}

// The sandboxes' writable layers are ext4 images on loop devices (backends/common/disk.hpp).
void check_loop(std::vector<Missing>& out) {
  Fd ctl(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!ctl) {
    out.push_back({"/dev/loop-control cannot be opened (" + std::string(std::strerror(errno)) +
                       "): the sandboxes' disk layers are loop devices",
                   "--device /dev/loop-control --device-cgroup-rule 'b 7:* rwm' --cap-add MKNOD"});
    return;
  }
  int n = ::ioctl(ctl.get(), LOOP_CTL_GET_FREE);
  if (n < 0) return;  // none free now: a create says so itself
  std::string dev = "/dev/loop" + std::to_string(n);
  Fd loop(::open(dev.c_str(), O_RDWR | O_CLOEXEC));
  if (loop) return;
  if (errno == ENOENT)
    out.push_back({dev + " does not exist: a container's /dev has only the loop devices of its start, and the "
                         "image's entrypoint makes the rest with mknod",
                   "--cap-add MKNOD"});
  else
    out.push_back({dev + " cannot be opened (" + std::string(std::strerror(errno)) +
                       "): the device cgroup does not allow loop devices",
                   "--device-cgroup-rule 'b 7:* rwm'"});
}

// Each sandbox gets its own memory/pids/cpu group (backends/common/cgroup.hpp).
void check_cgroups(std::vector<Missing>& out) {
  std::vector<std::string> roots;
  for (const char* c : {"memory", "pids", "cpu"})
    if (path_exists(std::string("/sys/fs/cgroup/") + c)) roots.push_back(std::string("/sys/fs/cgroup/") + c);
  if (roots.empty()) roots.push_back("/sys/fs/cgroup");  // the unified (v2) hierarchy
  for (auto& r : roots) {
    struct statvfs st{};
    if (::statvfs(r.c_str(), &st) == 0 && (st.f_flag & ST_RDONLY)) {
      out.push_back({r + " is read-only: the sandboxes' memory, pids and CPU limits are cgroups",
                     "-v /sys/fs/cgroup:/sys/fs/cgroup:rw"});
      return;
    }
  }
}

// The network jail (server.default_network, `jail` unless set): a veth pair,
// addresses and nftables rules in the manager's namespace, per-namespace
// sysctls, and runsc's netstack on a raw socket.
void check_network_jail(std::vector<Missing>& out) {
  if (!has_capability(kCapNetAdmin))
    out.push_back({"CAP_NET_ADMIN is missing: the network jail makes a veth pair and nftables rules per sandbox",
                   "--cap-add NET_ADMIN"});
  if (!has_capability(kCapNetRaw))
    out.push_back({"CAP_NET_RAW is missing: runsc's network stack reads the jail's veth through a raw socket",
                   "--cap-add NET_RAW"});
  struct statvfs st{};
  if (::statvfs("/proc/sys/net", &st) == 0 && (st.f_flag & ST_RDONLY))
    out.push_back({"/proc/sys is read-only: the network jail sets per-namespace sysctls (net.ipv6.conf.*.disable_ipv6)",
                   "--security-opt unmask=/proc/sys"});
}

// The image sets SBX_PREFLIGHT=smoke: in a container, seccomp, AppArmor or a
// masked /proc can stop runsc where a host would not. Not by default: a smoke
// run costs a second or more at every start (and hosts run `sbx doctor`).
bool smoke_wanted() {
  const char* v = std::getenv("SBX_PREFLIGHT");
  return v && std::string(v) == "smoke";
}

void check_runsc(const Config& cfg, const DriverTable& drivers, std::vector<Missing>& out) {
  if (::geteuid() != 0) {
    out.push_back({"sbx serve runs as uid " + std::to_string(::geteuid()) + ": runsc, the mounts and the cgroups need root",
                   "--user 0"});
    return;
  }
  if (!has_capability(kCapSysAdmin))
    out.push_back({"CAP_SYS_ADMIN is missing: the sandboxes' root overlays and disk layers are mounts, and runsc "
                   "makes namespaces",
                   "--cap-add SYS_ADMIN"});
  check_loop(out);
  check_cgroups(out);
  if (cfg.default_network == "jail") check_network_jail(out);
  const DriverInfo* d = find_driver(drivers, "runsc");
  if (!d || !out.empty()) return;
  // The deep probe runs runsc for real (`runsc do /bin/true`).
  for (auto& p : d->probe(cfg, smoke_wanted()))
    if (!p.ok && !p.advisory) out.push_back({p.name + ": " + p.detail + (p.remedy.empty() ? "" : " (" + p.remedy + ")"), ""});
}

}  // namespace

void preflight(const Config& cfg, const DriverTable& drivers, const std::string& driver) {
  std::vector<Missing> missing;
  if (driver == "runsc") check_runsc(cfg, drivers, missing);
  if (missing.empty()) return;
  std::string what, flags;
  for (auto& m : missing) {
    what += (what.empty() ? "" : "; ") + m.what;
    if (!m.flag.empty()) flags += (flags.empty() ? "" : " ") + m.flag;
  }
  throw Error(Errc::unavailable, "the " + driver + " driver cannot run here: " + what)
      .set_hint(flags.empty() ? "`sbx doctor` in the same place shows the details; docs/deploy.md lists the container flags"
                              : "in a container, add " + flags + " (docs/deploy.md says why each is needed)");
}

}  // namespace sbx::server
