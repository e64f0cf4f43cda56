#include "backends/subprocess/driver.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backends/common/cgroup.hpp"
#include "backends/common/disk.hpp"
#include "backends/common/hostview.hpp"
#include "backends/common/net/forwarder.hpp"
#include "backends/common/net/jail.hpp"
#include "backends/common/probes.hpp"
#include "backends/common/process.hpp"
#include "backends/subprocess/launch.hpp"
#include "core/agent_binary.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/unix_socket.hpp"
#include "core/fsutil.hpp"
#include "core/safe_path.hpp"

namespace sbx::subprocess {

namespace {


class SubprocessDriver : public Driver {
 public:
  explicit SubprocessDriver(const Config& cfg) : cfg_(cfg) {}

  void start(SandboxRecord& rec, const std::string& dir) override {
    // Recorded, so teardown finds the group whatever name the state root is reached by later.
    rec.driver_data["cgroup_scope"] = scope();
    auto group = with_context("creating the cgroup", [&] { return cgroup::Group::create(scope(), rec.id, rec.spec.limits); });
    fault::point("create.cgroup");
    LaunchPlan plan;
    plan.state_dir = dir;
    if (rec.spec.image.empty()) {
      plan.lower = hostview::ensure_skeleton(cfg_.state_dir);
      plan.ro_binds = hostview::bind_dirs();
    } else {
      plan.lower = rec.spec.image;
    }
    // The layer's disk, capped at --disk by its size; the open device goes
    // when this returns, leaving the sandbox's mount its only user.
    disk::Loop layer = with_context("preparing the sandbox's disk", [&] {
      return disk::attach(disk::ensure_image(cfg_.state_dir, dir, rec.spec.limits.disk_mb));
    });
    fault::point("create.disk");
    plan.layer_dev = layer.path();
    plan.persistent = rec.spec.persistent;
    plan.uid_base = rec.uid_base;
    plan.workdir = rec.spec.workdir;
    plan.agent_path = find_agent_binary();
    plan.title = sandbox_process_title(rec);
    if (rec.spec.network == "jail") {
      auto jail = net::setup(net::request_for(rec, cfg_, "subprocess"));
      rec.driver_data["netjail"] = net::describe(jail);
      plan.netns = jail.netns;
      plan.resolv_conf = jail.resolv_conf();
      fault::point("create.jail");
    }
    Launched l = launch(plan, group);
    rec.agent_pid = l.pid;
    rec.agent_start = l.start_time;
    fault::point("create.agent");
  }

  Fd connect(const SandboxRecord& /*rec*/, const std::string& dir) override { return connect_unix(dir + "/agent.sock", "the sandbox's agent"); }
  bool agent_passes_sockets() const override { return true; }

  bool alive(const SandboxRecord& rec) override {
    return proc::alive(rec.agent_pid, rec.agent_start);
  }

  void destroy(const SandboxRecord& rec, const std::string& dir) override {
    // Killing the init ends the PID namespace (the kernel kills the rest) and
    // with it the mount namespace that holds the writable layer, whose loop
    // device then detaches itself; the cgroup sweep and release() below catch
    // anything that raced. A paused sandbox is thawed first: a frozen init takes no SIGKILL on v1.
    if (!rec.id.empty()) cgroup::Group::open(scope_of(rec), rec.id).thaw_if_frozen();
    proc::kill_pinned(rec.agent_pid, rec.agent_start);
    fault::point("rm.killed");
    if (!rec.id.empty()) {
      cgroup::Group::open(scope_of(rec), rec.id).destroy();
      fault::point("rm.cgroup");
      // The last sandbox of a state root takes the root's parent group with it
      // (fails harmlessly while others remain): one state root per CI job must not pile up groups.
      cgroup::remove_scope_if_empty(scope_of(rec));
      net::teardown(rec.id);
      fault::point("rm.jail");
    }
    if (!dir.empty()) {
      disk::release(dir);
      fault::point("rm.disk");
      // Not when `sbx start` clears a persistent sandbox's last run: its disk is what it starts on.
      if (!rec.driver_data.value("keep_disk", false)) disk::dispose(cfg_.state_dir, dir);
    }
  }

  uint64_t oom_kills(const SandboxRecord& rec) override { return cgroup::Group::open(scope_of(rec), rec.id).oom_kills(); }

  // The cgroup freezer: every process of the sandbox is in its group.
  void copy_layer(const SandboxRecord& /*rec*/, const std::string& dir, const std::string& dest) override {
    disk::copy_image(disk::image_path(dir), dest);
  }
  void seed_layer(const SandboxRecord& rec, const std::string& dir, const std::string& layer,
                  uint32_t from_uid_base) override {
    disk::seed_image(layer, dir, from_uid_base, rec.uid_base);
  }
  void pause(const SandboxRecord& rec, const std::string& /*dir*/) override {
    cgroup::Group::open(scope_of(rec), rec.id).freeze(true);
  }
  void resume(const SandboxRecord& rec, const std::string& /*dir*/) override {
    cgroup::Group::open(scope_of(rec), rec.id).freeze(false);
  }

  bool set_limits(const SandboxRecord& rec, const Limits& limits) override {
    cgroup::Group::open(scope_of(rec), rec.id).set_limits(limits);
    return true;
  }

  std::vector<std::string> orphans(const std::set<std::string>& live_ids) override {
    std::vector<std::string> out;
    for (auto& name : cgroup::Group::list_all(scope()))
      if (!live_ids.count(name) && valid_sandbox_id(name)) out.push_back("cgroup sbx/" + scope() + "/" + name);
    for (auto& id : net::leftovers(cfg_.state_dir, "subprocess", live_ids)) out.push_back("netjail " + id);
    // Loop devices of the state root's disks: this driver reports those of runsc sandboxes too (same images).
    for (auto& l : disk::leftovers(cfg_.state_dir, live_ids)) out.push_back(l);
    // The host-wide DNS forwarder of every driver's jails: dead while a jail needs it, or alive with none.
    if (auto what = net::forwarder::needs_reconcile(); !what.empty()) out.push_back(what);
    return out;
  }

  void reap_orphan(const std::string& what) override {
    const std::string prefix = "cgroup sbx/" + scope() + "/";
    if (what.rfind(prefix, 0) == 0) {
      cgroup::Group::open(scope(), what.substr(prefix.size())).destroy();
      cgroup::remove_scope_if_empty(scope());
    } else if (what.rfind("netjail ", 0) == 0) {
      net::teardown(what.substr(8));
    } else if (what.rfind("loop ", 0) == 0) {
      disk::reap(what);
    } else if (what.rfind("dns-forwarder ", 0) == 0) {
      net::forwarder::reconcile(what);
    }
  }

 private:
  std::string scope() const { return cgroup::scope_for(cfg_.state_dir); }
  std::string scope_of(const SandboxRecord& rec) const {
    auto it = rec.driver_data.find("cgroup_scope");
    return it != rec.driver_data.end() && it->is_string() ? it->get<std::string>() : scope();
  }
  Config cfg_;
};

bool fs_supported(const std::string& name) {
  auto text = read_file_if_exists("/proc/filesystems");
  return text && text->find("\t" + name + "\n") != std::string::npos;
}

}  // namespace

std::vector<Probe> probe(const Config& cfg, bool /*deep*/) {
  std::vector<Probe> out;
  out.push_back(probes::running_as_root("the subprocess driver maps sandbox ids and mounts filesystems"));
  auto max_ns = read_file_if_exists("/proc/sys/user/max_user_namespaces");
  bool userns = max_ns && std::atoi(max_ns->c_str()) > 0;
  out.push_back({userns, "user namespaces", max_ns ? "max_user_namespaces=" + std::string(max_ns->substr(0, max_ns->find('\n'))) : "no /proc/sys/user/max_user_namespaces",
                 "enable user namespaces: sysctl user.max_user_namespaces=15000"});
  bool ovl = fs_supported("overlay");
  out.push_back({ovl, "overlayfs", ovl ? "listed in /proc/filesystems" : "not in /proc/filesystems", "modprobe overlay"});
  out.push_back(probes::cgroup_controllers());
  if (out.back().ok) out.push_back(probes::cgroup_attach());
  auto status = read_file_if_exists("/proc/self/status");
  bool seccomp = status && status->find("Seccomp:") != std::string::npos;
  out.push_back({seccomp, "seccomp", seccomp ? "supported by the kernel" : "kernel without CONFIG_SECCOMP_FILTER",
                 "use a kernel with seccomp filters"});
  bool o2 = openat2_supported();
  out.push_back({o2, "openat2 (safe paths for cp)", o2 ? "supported" : "kernel older than 5.6", "use Linux 5.6 or newer"});
  try {
    out.push_back({true, "sbx-agent", find_agent_binary(), ""});
  } catch (const Error& e) {
    out.push_back({false, "sbx-agent", e.message(), e.hint()});
  }
  (void)cfg;
  return out;
}

std::unique_ptr<Driver> make(const Config& cfg) { return std::make_unique<SubprocessDriver>(cfg); }

}  // namespace sbx::subprocess
