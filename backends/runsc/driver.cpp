#include "backends/runsc/driver.hpp"

#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "backends/common/cgroup.hpp"
#include "backends/common/disk.hpp"
#include "backends/common/hostview.hpp"
#include "backends/common/net/dns.hpp"
#include "backends/common/net/jail.hpp"
#include "backends/common/own_dir.hpp"
#include "backends/common/probes.hpp"
#include "backends/common/process.hpp"
#include "backends/runsc/bundle.hpp"
#include "backends/runsc/checkpoint.hpp"
#include "backends/runsc/runsc.hpp"
#include "core/agent_binary.hpp"
#include "core/agent_client.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/unix_socket.hpp"
#include "core/fsutil.hpp"
#include "core/safe_path.hpp"

namespace sbx::runsc {

namespace {

using nlohmann::json;

constexpr int kStartTimeoutMs = 30'000;
// Host tasks of gVisor's own (Go runtime threads of the sentry and the gofer)
// in a sandbox's cgroup: 64 at idle here under ptrace, and each command adds its stub.
constexpr uint64_t kRuntimeTasks = 160;

Limits with_runtime_allowance(Limits l) {
  if (l.pids) l.pids += kRuntimeTasks;
  return l;
}


void unmount(const std::string& path) {
  // Lazy: a process that still holds it (a gofer being reaped) cannot make teardown fail.
  while (::umount2(path.c_str(), MNT_DETACH) == 0) {
  }
}

std::string str(const SandboxRecord& rec, const char* key, const std::string& dflt) {
  auto it = rec.driver_data.find(key);
  return it != rec.driver_data.end() && it->is_string() ? it->get<std::string>() : dflt;
}

// The host's busybox-static: one static binary whose ls and stat applets use
// plain fstatat, so it runs in any root.
constexpr const char* kBusybox = "/usr/bin/busybox";

// Makes the sandbox's own directories in its root overlay (never through a
// link it planted: own_dir::make) and returns those to bind back writable. One
// it replaced with a link or a file gets no bind: runsc resolves a bind's
// source on the host, so a link there would hand it a host directory.
std::vector<std::string> make_own_dirs(const std::string& rootfs, const std::vector<std::string>& dirs) {
  Fd root(::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) throw sys_error("opening the sandbox's root " + rootfs, errno);
  std::vector<std::string> made;
  for (const auto& d : dirs) {
    bool replaced = false;
    if (int e = own_dir::make(root.get(), d.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(-1), &replaced))
      throw sys_error("making the sandbox's own directory " + d, e);
    if (!replaced) made.push_back(d);
  }
  return made;
}

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Runs a tool from a thread of its own whose private mount namespace covers
// /proc/sys/net with an empty tmpfs; the tool (and what it leaves running)
// inherits that namespace, the rest of sbx and the host never see it.
proc::RunResult run_hiding_proc_sys_net(const std::vector<std::string>& args, const proc::RunOptions& o) {
  proc::RunResult r;
  std::exception_ptr failure;
  std::thread t([&] {
    try {
      // CLONE_FS first: a thread shares its filesystem context, and only an unshared one may get a mount namespace.
      if (::unshare(CLONE_FS | CLONE_NEWNS) != 0) throw sys_error("creating a mount namespace for runsc", errno);
      // Private before anything is mounted: the tmpfs must not propagate to the host's /proc.
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        throw sys_error("making runsc's mounts private", errno);
      if (::mount("sbx-hide", "/proc/sys/net", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555") != 0)
        throw sys_error("hiding /proc/sys/net from runsc", errno);
      r = proc::run(args, o);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  t.join();
  if (failure) std::rethrow_exception(failure);
  return r;
}

class RunscDriver : public Driver {
 public:
  explicit RunscDriver(const Config& cfg) : cfg_(cfg) {}

  void start(SandboxRecord& rec, const std::string& dir) override {
    std::string bin = find_binary();
    Platform platform = choose_platform(cfg_.state_dir);
    std::string root = root_dir(cfg_.state_dir);
    // Recorded, so teardown finds everything whatever name the state root is reached by later.
    rec.driver_data["cgroup_scope"] = scope();
    rec.driver_data["runsc_root"] = root;
    rec.driver_data["platform"] = platform.name;
    make_dirs(root, 0700);
    // The group holds gVisor itself too: the sentry's and the gofer's threads
    // count as tasks, so --pids gets an allowance for them on top.
    Limits limits = with_runtime_allowance(rec.spec.limits);
    // A fresh sandbox boots without its CPU cap: gVisor's boot is Go on every
    // core, and the default one-core quota throttled it (create took 317 ms
    // against 216 uncapped, medians here). Nothing of the user's runs before
    // the agent answers (the first exec comes after create returns), and the
    // cap is set then. A restore resumes the user's processes at once, so it
    // keeps the cap throughout.
    bool fresh = str(rec, "restore_from", "").empty();
    Limits boot = limits;
    if (fresh) boot.cpus = 0;
    auto group = with_context("creating the cgroup", [&] { return cgroup::Group::create(scope(), rec.id, boot); });
    fault::point("create.cgroup");

    // The writable layer: the sandbox's disk image (capped at the disk limit
    // by its size), mounted on the host until destroy(), under an overlay
    // whose lower layer is the read-only base. gVisor writes through its gofer
    // into this overlay, so no file lands in gVisor's memory-backed overlay
    // (runsc's --overlay stays off) and none counts toward --memory.
    std::string lower = rec.spec.image.empty() ? hostview::ensure_skeleton(cfg_.state_dir) : rec.spec.image;
    std::string layer = dir + "/layer", rootfs = dir + "/rootfs", sock = dir + "/sock", bundle = dir + "/bundle";
    for (auto* d : {&layer, &rootfs, &bundle}) make_dirs(*d, 0700);
    make_dirs(sock, 0700);
    unlock_share(sock);
    with_context("preparing the sandbox's disk", [&] {
      disk::Loop loop = disk::attach(disk::ensure_image(cfg_.state_dir, dir, rec.spec.limits.disk_mb));
      disk::mount(loop, layer);  // from here the mount holds the device; the fd closes on return
    });
    fault::point("create.disk");
    make_dirs(layer + "/upper", 0755);
    make_dirs(layer + "/work", 0755);
    // volatile: a scratch layer needs no syncs; a persistent one must mount again after a reboot,
    // which overlayfs refuses for a workdir a volatile mount used.
    std::string ovl = "lowerdir=" + lower + ",upperdir=" + layer + "/upper,workdir=" + layer + "/work";
    if (!rec.spec.persistent) ovl += ",volatile";
    if (::mount("overlay", rootfs.c_str(), "overlay", MS_NOSUID | MS_NODEV, ovl.c_str()) != 0)
      throw sys_error("mounting the sandbox's root overlay at " + rootfs, errno);
    fault::point("create.overlay");

    BundlePlan plan;
    plan.rootfs = rootfs;
    if (rec.spec.image.empty()) plan.ro_binds = hostview::bind_dirs();
    plan.sock_dir = sock;
    plan.agent_path = find_agent_binary();
    // Made here, as the host's root, before the root turns read-only; the check
    // first makes sure no symlink of the image bends them onto the host.
    auto own = hostview::own_dirs(rec.spec.workdir);
    hostview::check_own_dirs(lower, own);
    plan.rw_dirs = make_own_dirs(rootfs, own);
    plan.file_binds = statx_workarounds(plan, platform.name);
    bool jailed = rec.spec.network == "jail";
    if (jailed) {
      // gVisor's netstack takes over the jail's eth0 (runsc --network=sandbox); the host filters it.
      auto jail = net::setup(net::request_for(rec, cfg_, "runsc"));
      rec.driver_data["netjail"] = net::describe(jail);
      plan.netns = jail.netns;
      std::string text = jail.resolv_conf();
      if (int e = net::dns::write_resolv_conf((rootfs + "/etc").c_str(), text.data(), text.size()))
        throw sys_error("writing the sandbox's /etc/resolv.conf", e);
      fault::point("create.jail");
    }
    write_file_atomic(bundle + "/config.json", oci_spec(plan).dump(2), 0600, Durability::survive_process);

    // The sandbox's stdio (the agent's stderr) and runsc's own errors go to the log.
    std::string log = dir + "/agent.log";
    Fd logfd(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!logfd) throw sys_error("cannot create " + log, errno);
    // `runsc run` is started inside the sandbox's cgroup: the sandbox (sentry),
    // the gofer and the ptrace stubs it forks all land there, so the limits
    // and the OOM counter cover the whole container, as with the subprocess driver.
    proc::RunOptions o;
    o.timeout_ms = kStartTimeoutMs;
    o.output_fd = logfd.get();
    o.group = &group;
    // No OOM tricks: on an OOM kill the kernel picks the sentry or a ptrace
    // stub, and gVisor 20221219 cannot survive losing either, so the memory
    // limit ends the whole sandbox (the oom_kill counter still names the cause).
    auto args = global_args(bin, root, platform.name);
    if (jailed) {
      std::replace(args.begin(), args.end(), std::string("--network=none"), std::string("--network=sandbox"));
      // This runsc decides "am I in the host's namespace?" by whether
      // /proc/sys/net/core/rmem_default exists, which recent Linux (6.11 on)
      // shows in every namespace (gVisor issue 10704), and then refuses the jail's.
      // run_hiding_proc_sys_net starts it where an empty tmpfs hides /proc/sys/net.
    }
    pid_t pid = 0;
    std::string image = str(rec, "restore_from", "");
    if (!image.empty()) {
      pid = runsc::restore({args, rec.id, dir}, image, group, kStartTimeoutMs);
      rec.driver_data.erase("restore_from");
    } else {
      pid = run_container(rec, dir, args, o, jailed);
    }
    fault::point("create.runsc");
    rec.agent_pid = pid;
    rec.agent_start = proc::start_time(pid);
    if (!rec.agent_start) throw Error(Errc::io, "the runsc sandbox exited at once: " + log_tail(log));
    await_agent_socket(sock, [&] { return alive(rec); }, log, kStartTimeoutMs);
    if (fresh) with_context("setting the sandbox's CPU cap", [&] { group.set_limits(limits); });
  }

  // `runsc run`: the sandbox's pid, from --pid-file rather than a `runsc state` afterwards
  // (another runsc start costs ~40 ms).
  pid_t run_container(const SandboxRecord& rec, const std::string& dir, std::vector<std::string> args,
                      const proc::RunOptions& o, bool jailed) {
    std::string log = dir + "/agent.log";
    for (auto a : {"run", "--detach", "--pid-file"}) args.push_back(a);
    args.push_back(dir + "/sandbox.pid");
    args.push_back("--bundle");
    args.push_back(dir + "/bundle");
    args.push_back(rec.id);
    auto r = jailed ? run_hiding_proc_sys_net(args, o) : proc::run(args, o);
    if (r.timed_out)
      throw Error(Errc::timeout, "runsc did not start the sandbox within " + std::to_string(kStartTimeoutMs / 1000) +
                                     " s on platform " + str(rec, "platform", "?"))
          .set_hint("try SBX_RUNSC_PLATFORM=ptrace; log: " + log_tail(log, 400));
    if (r.status != 0) throw Error(Errc::io, "runsc run failed (exit " + std::to_string(r.status) + "): " + log_tail(log));
    pid_t pid = 0;
    try {
      pid = static_cast<pid_t>(std::stol(read_file_if_exists(dir + "/sandbox.pid").value_or("")));
    } catch (const std::exception&) {
    }
    if (pid <= 0) throw Error(Errc::io, "runsc run left no sandbox pid in " + dir + "/sandbox.pid: " + log_tail(log));
    return pid;
  }

  void checkpoint(SandboxRecord& rec, const std::string& dir, const std::string& memory,
                  const std::string& layer) override {
    if (auto why = memory_snapshots_off())
      throw Error(Errc::unavailable, "memory snapshots on runsc are off: " + *why)
          .set_hint("snapshot its files only (leave --memory out); docs/snapshots.md");
    check_saveable(rec);
    Container c{runsc_global(rec), rec.id, dir};
    AgentClient(connect(rec, dir)).detach();
    try {
      runsc::checkpoint(c, memory);
    } catch (Error& e) {
      // This runsc ends the sandbox when a checkpoint fails; one that survived gets its agent back.
      if (alive(rec)) {
        unlock_share(dir + "/sock");
        runsc(rec, {"kill", rec.id, "USR1"});
        await_agent_socket(dir + "/sock", [&] { return alive(rec); }, dir + "/agent.log", 10'000);
      } else {
        e.add_context("the sandbox ended with it");
      }
      throw;
    }
    // The sentry exits once it saved: then nothing writes the layer, and the copy is of that moment.
    proc::kill_pinned(rec.agent_pid, rec.agent_start, 10'000);
    ::sync();
    disk::copy_image(disk::image_path(dir), layer);
    // The source runs on from its own checkpoint, as every copy will.
    runsc(rec, {"delete", "--force", rec.id});
    unlock_share(dir + "/sock");
    auto group = cgroup::Group::open(str(rec, "cgroup_scope", scope()), rec.id);
    rec.agent_pid = runsc::restore(c, memory, group, kStartTimeoutMs);
    rec.agent_start = proc::start_time(rec.agent_pid);
    await_agent_socket(dir + "/sock", [&] { return alive(rec); }, dir + "/agent.log", kStartTimeoutMs);
  }

  void seed_memory(SandboxRecord& rec, const std::string& /*dir*/, const std::string& memory) override {
    if (auto why = memory_snapshots_off()) throw Error(Errc::unavailable, "memory snapshots on runsc are off: " + *why);
    check_saveable(rec);
    rec.driver_data["restore_from"] = memory;
  }

  Probe memory_snapshots() override {
    auto why = memory_snapshots_off();
    return {!why, "memory snapshots (snapshot --memory)",
            why ? *why : "runsc checkpoint/restore; network none only (SBX_RUNSC_MEMORY_SNAPSHOTS=0 turns them off)",
            "docs/snapshots.md", true};
  }

  // On unless the operator turns them off: a checkpoint ends the source sandbox, which
  // runs on only from its own restore, so a host where this runsc cannot restore (it
  // says "cannot allocate memory" with stacked file binds) loses the sandbox.
  static std::optional<std::string> memory_snapshots_off() {
    const char* v = std::getenv("SBX_RUNSC_MEMORY_SNAPSHOTS");
    if (!v || std::string(v) != "0") return std::nullopt;
    return "turned off on this host (SBX_RUNSC_MEMORY_SNAPSHOTS=0)";
  }

  // Where this runsc rejects statx(AT_NO_AUTOMOUNT), GNU ls and stat fail on
  // every path ("Invalid argument"); busybox's applets stand in for them, bound
  // read-only over the two binaries of the sandbox's root. Each file once: on a
  // merged-/usr root /bin/ls is /usr/bin/ls, and two binds stacked on one file
  // (four in all) make this runsc's restore of a checkpoint fail with "cannot
  // allocate memory" (docs/snapshots.md).
  std::vector<std::pair<std::string, std::string>> statx_workarounds(const BundlePlan& plan, const std::string& platform) {
    std::vector<std::pair<std::string, std::string>> out;
    if (!is_regular(kBusybox) || !statx_broken(cfg_.state_dir, platform)) return out;
    bool usr_bound = std::find(plan.ro_binds.begin(), plan.ro_binds.end(), "/usr") != plan.ro_binds.end();
    Fd root(::open(plan.rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    std::set<std::pair<dev_t, ino_t>> bound;
    for (const char* tool : {"/usr/bin/ls", "/usr/bin/stat", "/bin/ls", "/bin/stat"}) {
      struct stat st {};
      if (usr_bound && std::string_view(tool).rfind("/usr/", 0) == 0) {
        if (::stat(tool, &st) != 0) continue;
      } else {
        // Resolved as the sandbox will see it: the image's own links stay inside its root.
        try {
          if (!root || ::fstat(open_in_root(root.get(), tool, O_PATH | O_CLOEXEC).get(), &st) != 0) continue;
        } catch (const Error&) {
          continue;
        }
      }
      if (S_ISREG(st.st_mode) && bound.insert({st.st_dev, st.st_ino}).second) out.emplace_back(tool, kBusybox);
    }
    return out;
  }

  Fd connect(const SandboxRecord& /*rec*/, const std::string& dir) override { return connect_unix(dir + "/sock/agent.sock", "the sandbox's agent"); }

  bool alive(const SandboxRecord& rec) override {
    // The sandbox (sentry) process: it exits when the container's init, the agent, does.
    return proc::alive(rec.agent_pid, rec.agent_start);
  }

  void destroy(const SandboxRecord& rec, const std::string& dir) override {
    if (!valid_sandbox_id(rec.id)) return;
    std::string root = str(rec, "runsc_root", root_dir(cfg_.state_dir));
    std::string scope = str(rec, "cgroup_scope", this->scope());
    // Everything runsc started for this sandbox is in its cgroup: killing the
    // group ends the sentry, the gofer and the stubs at once, without waiting
    // on runsc's own (slower) shutdown.
    if (alive(rec)) ::kill(rec.agent_pid, SIGKILL);
    cgroup::Group::open(scope, rec.id).destroy();
    fault::point("rm.cgroup");
    // Then runsc forgets the container (its state files under --root).
    if (known_to_runsc(root, rec.id)) {
      auto g = global_args(find_binary(), root, "ptrace");
      call(g, {"kill", "--all", rec.id, "KILL"}, 10'000);
      auto r = call(g, {"delete", "--force", rec.id}, 20'000);
      if (r.status != 0 && known_to_runsc(root, rec.id))
        throw Error(Errc::io, "runsc delete " + rec.id + " failed: " + r.output.substr(0, 500));
      fault::point("rm.runsc");
    }
    if (!dir.empty()) {
      unmount(dir + "/rootfs");
      unmount(dir + "/layer");
      fault::point("rm.mounts");
      disk::release(dir);
      // Not when `sbx start` clears a persistent sandbox's last run: its disk is what it starts on.
      if (!rec.driver_data.value("keep_disk", false)) disk::dispose(cfg_.state_dir, dir);
    }
    net::teardown(rec.id);
    cgroup::remove_scope_if_empty(scope);
  }

  uint64_t oom_kills(const SandboxRecord& rec) override {
    return cgroup::Group::open(str(rec, "cgroup_scope", scope()), rec.id).oom_kills();
  }
  // gVisor's sentry and gofer do not survive a refused clone: a fork bomb ends the sandbox.
  uint64_t pids_limit_hits(const SandboxRecord& rec) override {
    return cgroup::Group::open(str(rec, "cgroup_scope", scope()), rec.id).pids_limit_hits();
  }

  void copy_layer(const SandboxRecord& /*rec*/, const std::string& dir, const std::string& dest) override {
    disk::copy_image(disk::image_path(dir), dest);
  }
  void seed_layer(const SandboxRecord& /*rec*/, const std::string& dir, const std::string& layer,
                  uint32_t from_uid_base) override {
    // gVisor's gofer writes as the host's root: no id range to move.
    disk::seed_image(layer, dir, from_uid_base, from_uid_base);
  }
  // gVisor's own: the sentry stops every task of the container (its memory stays in the sentry).
  void pause(const SandboxRecord& rec, const std::string& /*dir*/) override { runsc_state_change(rec, "pause"); }
  void resume(const SandboxRecord& rec, const std::string& /*dir*/) override { runsc_state_change(rec, "resume"); }

  bool set_limits(const SandboxRecord& rec, const Limits& limits) override {
    // The caps are the host cgroup's that holds the whole container, not gVisor's own.
    cgroup::Group::open(str(rec, "cgroup_scope", scope()), rec.id).set_limits(with_runtime_allowance(limits));
    return true;
  }

  std::vector<std::string> orphans(const std::set<std::string>& live_ids) override {
    // Cgroups of this scope are the subprocess driver's to report (same scope,
    // same names); here: containers runsc still knows and mounts left in state dirs.
    std::vector<std::string> out;
    for (auto& id : listed(root_dir(cfg_.state_dir)))
      if (!live_ids.count(id) && valid_sandbox_id(id)) out.push_back("runsc container " + id);
    std::string prefix = cfg_.state_dir + "/sandboxes/";
    auto mi = read_file_if_exists("/proc/self/mountinfo").value_or("");
    std::istringstream in(mi);
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      std::string a, b, c, d, mp;
      f >> a >> b >> c >> d >> mp;
      if (mp.rfind(prefix, 0) != 0) continue;
      std::string rest = mp.substr(prefix.size());
      auto slash = rest.find('/');
      std::string id = rest.substr(0, slash);
      std::string leaf = slash == std::string::npos ? "" : rest.substr(slash + 1);
      if (!live_ids.count(id) && valid_sandbox_id(id) && (leaf == "rootfs" || leaf == "layer"))
        out.push_back("mount " + mp);
    }
    for (auto& id : net::leftovers(cfg_.state_dir, "runsc", live_ids)) out.push_back("netjail " + id);
    return out;
  }

  void reap_orphan(const std::string& what) override {
    if (what.rfind("runsc container ", 0) == 0) {
      SandboxRecord ghost;
      ghost.id = what.substr(16);
      destroy(ghost, "");
    } else if (what.rfind("mount ", 0) == 0) {
      unmount(what.substr(6));
    } else if (what.rfind("netjail ", 0) == 0) {
      net::teardown(what.substr(8));
    }
  }

 private:
  std::string scope() const { return cgroup::scope_for(cfg_.state_dir); }

  proc::RunResult runsc(const SandboxRecord& rec, const std::vector<std::string>& args) {
    return call(global_args(find_binary(), str(rec, "runsc_root", root_dir(cfg_.state_dir)),
                            str(rec, "platform", "ptrace")),
                args);
  }

  std::vector<std::string> runsc_global(const SandboxRecord& rec) const {
    return global_args(find_binary(), str(rec, "runsc_root", root_dir(cfg_.state_dir)), str(rec, "platform", "ptrace"));
  }

  // A jailed sandbox's network is the netstack's state over the jail's veth (--network=sandbox):
  // whether this runsc restores that into another namespace is not known, so it is refused.
  static void check_saveable(const SandboxRecord& rec) {
    if (rec.spec.network != "none")
      throw Error(Errc::unavailable, "memory snapshots on runsc need --network none (this sandbox's is " +
                                         rec.spec.network + ")")
          .set_hint("snapshot its files only (leave --memory out), or create the sandbox with --network none");
  }

  void runsc_state_change(const SandboxRecord& rec, const std::string& verb) {
    auto r = runsc(rec, {verb, rec.id});
    if (r.status == 0) return;
    // runsc refuses to resume a running container (or pause a paused one). A pause
    // that sbx's death cut short leaves just that: the record says paused, gVisor
    // never froze. Already in the state asked for is done.
    auto st = runsc(rec, {"state", rec.id});
    json state = json::parse(st.output, nullptr, false);
    if (st.status == 0 && state.is_object() && state.value("status", "") == (verb == "pause" ? "paused" : "running"))
      return;
    throw Error(Errc::io, "runsc " + verb + " " + rec.id + " failed: " + r.output.substr(0, 500));
  }

  static bool known_to_runsc(const std::string& root, const std::string& id) {
    // runsc keeps "<sandbox id>_sand:<container id>.state" (and a lock) per container under --root.
    if (!path_exists(root)) return false;
    for (auto& l : listed(root))
      if (l == id) return true;
    return false;
  }

  static std::vector<std::string> listed(const std::string& root) {
    std::vector<std::string> ids;
    if (!path_exists(root)) return ids;
    try {
      auto r = call(global_args(find_binary(), root, "ptrace"), {"list", "-quiet"}, 10'000);
      std::istringstream in(r.output);
      for (std::string id; in >> id;) ids.push_back(id);
    } catch (const Error&) {
    }
    return ids;
  }

  Config cfg_;
};

}  // namespace

std::vector<Probe> probe(const Config& cfg, bool deep) {
  std::vector<Probe> out;
  out.push_back(probes::running_as_root("runsc needs it to start sandboxes"));
  bool root = out.back().ok;
  std::string bin;
  try {
    bin = find_binary();
  } catch (const Error& e) {
    out.push_back({false, "runsc", e.message(), e.hint()});
    return out;
  }
  bool ok = false;
  std::string ver = version(bin, &ok);
  out.push_back({ok, "runsc", bin + ": " + ver, "reinstall runsc (apt-get install --reinstall runsc)"});
  if (!ok || !root) return out;
  out.push_back(probes::cgroup_controllers(nullptr, "; runsc runs with --ignore-cgroups inside sbx's group"));
  if (out.back().ok) out.push_back(probes::cgroup_attach());
  try {
    // The kvm probe can take 5 s (it hangs on nested PVM hosts until its
    // timeout): doctor probes once per boot and caches the choice (delete
    // /run/sbx/runsc-platform to probe again); a health check never probes.
    std::optional<Platform> known = deep ? std::optional<Platform>(choose_platform(cfg.state_dir, false))
                                         : cached_platform(cfg.state_dir);
    if (!known) {
      out.push_back({true, "platform", "not chosen yet: probed at the first runsc sandbox (or run `sbx doctor`)", ""});
      return out;
    }
    Platform p = *known;
    out.push_back({true, "platform", p.name + ": " + p.why, ""});
    if (deep) {
      std::string smoke_why = smoke(cfg.state_dir, p.name, 15'000);
      out.push_back({smoke_why.empty(), "smoke run (runsc do /bin/true on " + p.name + ")",
                     smoke_why.empty() ? "passed" : smoke_why, "see `runsc --platform=" + p.name + " do /bin/true`"});
      if (smoke_why.empty() && statx_broken(cfg.state_dir, p.name)) {
        bool bb = is_regular(kBusybox);
        out.push_back({bb, "statx", std::string("this runsc refuses statx(AT_NO_AUTOMOUNT), which GNU ls and stat use; ") +
                                        (bb ? "busybox's ls and stat stand in for them inside sandboxes" : "ls and stat fail inside sandboxes"),
                       "apt-get install busybox-static", true});
      }
    }
  } catch (const Error& e) {
    out.push_back({false, "platform", e.what(), e.hint()});
  }
  try {
    out.push_back({true, "sbx-agent", find_agent_binary() + " (seccomp confinement on; gVisor implements seccomp)", ""});
  } catch (const Error& e) {
    out.push_back({false, "sbx-agent", e.message(), e.hint()});
  }
  return out;
}

std::unique_ptr<Driver> make(const Config& cfg) { return std::make_unique<RunscDriver>(cfg); }

}  // namespace sbx::runsc
