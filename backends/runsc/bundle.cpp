#include "backends/runsc/bundle.hpp"

namespace sbx::runsc {

using nlohmann::json;

namespace {
// Docker's default set: what a container's root ordinarily holds. The agent
// drops all of them (and installs its seccomp filter) before running a command.
const std::vector<std::string> kCaps = {
    "CAP_CHOWN",  "CAP_DAC_OVERRIDE", "CAP_FOWNER",           "CAP_FSETID",      "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID",       "CAP_SETPCAP",          "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
    "CAP_MKNOD",  "CAP_AUDIT_WRITE",  "CAP_SETFCAP"};

json mount(const std::string& dst, const std::string& type, const std::string& src, std::vector<std::string> opts) {
  return {{"destination", dst}, {"type", type}, {"source", src}, {"options", std::move(opts)}};
}
}  // namespace

json oci_spec(const BundlePlan& plan) {
  std::string share = kShareDir;
  // gVisor's sentry starts the container's init with every signal disposition
  // default: the agent need not reset 62 of them, a sentry round trip each.
  std::vector<std::string> args = {share + "/sbx-agent", "--listen", share + "/agent.sock", "--fresh-signals"};
  if (!plan.confine) args.push_back("--no-confine");
  // No /dev mount: runsc gives the container gVisor's own /dev (null, zero,
  // urandom, tty, ...), none of it a host device.
  json mounts = json::array({
      mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
      mount("/dev/pts", "devpts", "devpts", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}),
      mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}),
      mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
  });
  for (auto& b : plan.ro_binds) mounts.push_back(mount(b, "bind", b, {"rbind", "ro", "nosuid", "nodev"}));
  for (auto& [dst, src] : plan.file_binds) mounts.push_back(mount(dst, "bind", src, {"bind", "ro", "nosuid", "nodev"}));
  // gVisor's container root is real root (uid 0 owns the base's files), so a
  // read-only root is what keeps the base unwritable; the sandbox's own
  // directories come back writable, from the same size-capped overlay.
  for (auto& d : plan.rw_dirs) mounts.push_back(mount(d, "bind", plan.rootfs + d, {"rbind", "rw", "nosuid", "nodev"}));
  // The share is writable only because the agent must create its socket there;
  // the agent binary inside it is a separate read-only bind.
  mounts.push_back(mount(share, "bind", plan.sock_dir, {"rbind", "rw", "nosuid", "nodev", "noexec"}));
  mounts.push_back(mount(share + "/sbx-agent", "bind", plan.agent_path, {"bind", "ro", "nosuid", "nodev"}));
  json spec = {
      {"ociVersion", "1.0.2"},
      {"process",
       {{"terminal", false},
        {"user", {{"uid", 0}, {"gid", 0}}},
        {"args", args},
        {"env", {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
        {"cwd", "/"},
        {"capabilities", {{"bounding", kCaps}, {"effective", kCaps}, {"permitted", kCaps}}},
        {"rlimits", json::array({{{"type", "RLIMIT_NOFILE"}, {"hard", 65536}, {"soft", 65536}}})},
        {"noNewPrivileges", false}}},
      {"root", {{"path", plan.rootfs}, {"readonly", true}}},
      {"hostname", plan.hostname},
      {"mounts", mounts},
      {"linux",
       {{"namespaces", json::array({{{"type", "pid"}}, {{"type", "network"}}, {{"type", "ipc"}}, {{"type", "uts"}},
                                    {{"type", "mount"}}})}}},
  };
  if (!plan.netns.empty())
    for (auto& ns : spec["linux"]["namespaces"])
      if (ns["type"] == "network") ns["path"] = plan.netns;
  return spec;
}

}  // namespace sbx::runsc
