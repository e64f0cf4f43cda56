#include "backends/microvm/driver.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "backends/common/cgroup.hpp"
#include "backends/common/disk.hpp"
#include "backends/common/net/jail.hpp"
#include "backends/common/probes.hpp"
#include "backends/common/process.hpp"
#include "backends/microvm/guest.hpp"
#include "backends/microvm/host.hpp"
#include "backends/microvm/vmm.hpp"
#include "core/agent_binary.hpp"
#include "core/agent_client.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/fsutil.hpp"

namespace sbx::microvm {

namespace {

constexpr int kStartTimeoutMs = 30'000;
// An agent that does not answer a ping within this long is a hung VM.
constexpr int kHeartbeatMs = 5'000;
// What QEMU itself needs beside the guest's RAM (device state, the 64 MiB TCG
// translation cache, the relay); the VM's cgroup cap is the guest's RAM plus this.
constexpr uint64_t kVmmOverheadMb = 256;
// The host-side task cap of one VM: QEMU's vCPU, I/O and RCU threads. The
// sandbox's own --pids is enforced inside the guest (scripts/guest-init.sh).
constexpr uint64_t kVmmTasks = 128;
// The guest's RAM is the sandbox's --memory (enforced by a cgroup inside the
// guest, scripts/guest-init.sh) plus room for the guest kernel and initramfs,
// and never less than a guest needs to come up.
constexpr uint64_t kGuestKernelMb = 96;
constexpr uint64_t kMinGuestMb = 192;
// The guest's sync(2) before a pause: under TCG a few MiB of dirty pages take seconds.
constexpr int kSyncTimeoutMs = 20'000;
// In the VM directory while the guest is paused without having synced (its reason).
constexpr const char* kUnsynced = "layer-unsynced";

std::string str(const SandboxRecord& rec, const char* key, const std::string& dflt) {
  auto it = rec.driver_data.find(key);
  return it != rec.driver_data.end() && it->is_string() ? it->get<std::string>() : dflt;
}

net::JailRequest as_tap(net::JailRequest r) {
  r.attach = net::Attach::tap;
  return r;
}

std::string tail(const std::string& path, size_t max = 1200) {
  auto text = read_file_if_exists(path).value_or("");
  if (text.size() > max) text = "..." + text.substr(text.size() - max);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "(empty)" : text;
}

// The VM monitor outlives this sbx process (the sandbox persists between CLI
// calls): forked twice so it is nobody's child here and never a zombie of a
// long-running sbx serve, joined to the sandbox's cgroup before it runs.
// inherit: descriptors of this process the monitor, and so the VMM it runs, inherits,
// each at the number given with it (the tap at kInheritedTapFd, the layer's at kLayerFds).
// exe is what runs; argv[0] is only what ps shows.
pid_t launch_detached(const std::string& exe, const std::vector<std::string>& argv, const std::string& log,
                      const cgroup::Group& group, const std::vector<std::pair<int, int>>& inherit) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int go[2], report[2];
  if (::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
  Fd go_r(go[0]), go_w(go[1]), rep_r(report[0]), rep_w(report[1]);
  Fd logfd(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!logfd || !devnull) throw sys_error("cannot open " + log, errno);
  pid_t mid = ::fork();
  if (mid < 0) throw sys_error("cannot fork", errno);
  if (mid == 0) {
    ::setsid();
    pid_t pid = ::fork();
    if (pid != 0) {
      ssize_t n = ::write(rep_w.get(), &pid, sizeof pid);
      ::_exit(n == sizeof pid && pid > 0 ? 0 : 1);
    }
    char c;
    if (::read(go_r.get(), &c, 1) != 1) ::_exit(127);  // the parent put us in the cgroup (or gave up)
    if (::dup2(devnull.get(), 0) < 0 || ::dup2(logfd.get(), 1) < 0 || ::dup2(logfd.get(), 2) < 0) ::_exit(127);
    // Each first out of the way of every target number, then dup2 to its own (the copy
    // dup2 leaves has no FD_CLOEXEC). Nothing here allocates: this is a forked child.
    int moved[8];
    if (inherit.size() > 8) ::_exit(127);
    for (size_t i = 0; i < inherit.size(); ++i)
      if ((moved[i] = ::fcntl(inherit[i].first, F_DUPFD_CLOEXEC, 64)) < 0) ::_exit(127);
    for (size_t i = 0; i < inherit.size(); ++i)
      if (::dup2(moved[i], inherit[i].second) < 0) ::_exit(127);
    ::execv(exe.c_str(), args.data());
    ::_exit(127);
  }
  rep_w.reset();
  go_r.reset();
  pid_t pid = -1;
  bool got = read_exact(rep_r.get(), &pid, sizeof pid);
  int st;
  while (::waitpid(mid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!got || pid <= 0) throw Error(Errc::io, "could not start the VM monitor");
  try {
    group.add(pid);
  } catch (...) {
    ::kill(pid, SIGKILL);
    throw;
  }
  write_all(go_w.get(), "G");
  return pid;
}

class MicrovmDriver : public Driver {
 public:
  explicit MicrovmDriver(const Config& cfg) : cfg_(cfg) {}

  std::optional<std::string> start_note(const SandboxSpec& spec) override {
    std::string note;
    if (!spec.image.empty()) {
      std::string cache = image_disk_cache(spec.image);
      if (cache.empty()) note = "copying " + spec.image + " onto the VM's read-only disk (a plain directory: every create)";
      else if (!path_exists(cache)) note = "making the image's read-only disk " + cache + " (once per image)";
    }
    Accel a = choose_accel();
    if (!a.kvm)
      note += (note.empty() ? "" : "; then ") +
              std::string("booting a micro-VM under TCG emulation (") + a.why + "): a few seconds; TCG is not a security boundary";
    if (note.empty()) return std::nullopt;
    return note;
  }

  // Under TCG a boot is emulated: 3-10 s alone, and once over 30 s from a just-built
  // image disk while CI's other lane loaded both cores. A VM that dies is seen at once
  // (alive), so the longer wait only spares one that is slow.
  int ready_timeout_ms(const SandboxRecord& rec) const override {
    return str(rec, "accel", "") == "tcg" ? 120'000 : 30'000;
  }

  void start(SandboxRecord& rec, const std::string& dir) override {
    const auto& spec = rec.spec;
    check_spec(spec);
    Accel accel = choose_accel();
    auto vmm = choose_vmm(accel);
    std::string guest = find_guest_dir();
    VmPlan plan;
    plan.dir = dir + "/vm";
    plan.kernel = guest + "/" + vmm->kernel_file();
    if (!path_exists(plan.kernel))
      throw Error(Errc::not_found, "the guest image has no " + vmm->kernel_file() + " for " + vmm->name())
          .set_hint("rebuild it with scripts/build-guest.sh (apt-get install lz4 first for cloud-hypervisor's vmlinux)");
    rec.driver_data["vmm"] = vmm->name();
    rec.driver_data["accel"] = accel.kvm ? "kvm" : "tcg";
    rec.driver_data["cgroup_scope"] = scope();
    make_dirs(plan.dir, 0700);
    std::string agent = find_agent_binary();
    plan.initrd = with_context("preparing the guest's initrd",
                               [&] { return prepare_initrd(guest, agent, cfg_.state_dir + "/microvm"); });
    prepare_disks(spec, dir, plan);
    plan.console_log = dir + "/console.log";
    plan.kvm = accel.kvm;
    plan.memory_mb = std::max(spec.limits.memory_mb + kGuestKernelMb, kMinGuestMb);
    plan.vcpus = static_cast<unsigned>(std::max(1.0, std::ceil(spec.limits.cpus)));
    plan.cmdline_args = "sbx.workdir=" + spec.workdir + " sbx.pids=" + std::to_string(spec.limits.pids) +
                        " sbx.memory=" + std::to_string(spec.limits.memory_mb << 20);
    if (!vmm->relayed()) plan.cmdline_args += " sbx.vsock=" + std::to_string(kAgentVsockPort);
    // The guest's /init mounts the image's disk (the read-only one) as the overlay's lower.
    if (!plan.image_disk.empty()) plan.cmdline_args += " sbx.image=ext4";
    Fd tap;
    if (spec.network == "jail") {
      auto jail = net::setup(as_tap(net::request_for(rec, cfg_, "microvm")));
      rec.driver_data["netjail"] = net::describe(jail);
      tap = net::open_tap(jail);
      plan.tap_fd = vmm->tap_inherited() ? kInheritedTapFd : tap.get();
      // The guest's /init configures eth0 and writes /etc/resolv.conf from these (scripts/guest-init.sh).
      plan.cmdline_args += " sbx.net=" + ipv4_str(jail.sandbox_addr) + "/" + std::to_string(jail.prefix) + "," +
                           ipv4_str(jail.host_addr) + " sbx.dns=" + ipv4_str(jail.host_addr);
      fault::point("create.jail");
    }
    // QEMU reopens its disk read-only when a migration (a memory snapshot) hands it over,
    // long after -runas dropped the rights to open it by path: it gets the layer as
    // descriptors, one read-write and one read-only, to pick from instead.
    Fd layer[2];
    if (vmm->layer_by_fd()) {
      layer[0].reset(::open(plan.disk.c_str(), O_RDWR | O_CLOEXEC));
      layer[1].reset(::open(plan.disk.c_str(), O_RDONLY | O_CLOEXEC));
      if (!layer[0] || !layer[1]) throw sys_error("cannot open " + plan.disk, errno);
      plan.layer_fds = true;
    }
    // From a memory snapshot (seed_memory): QEMU waits for the saved state instead of booting.
    std::string restore = str(rec, "restore_from", "");
    plan.incoming = !restore.empty();
    if (rec.uid_base) plan.runas = std::to_string(rec.uid_base) + ":" + std::to_string(rec.uid_base);
    if (vmm->name() != "qemu") plan.runas.clear();  // -runas is QEMU's

    Limits host = spec.limits;
    host.memory_mb = plan.memory_mb + kVmmOverheadMb;
    host.pids = kVmmTasks;
    auto group = with_context("creating the cgroup", [&] { return cgroup::Group::create(scope(), rec.id, host); });
    fault::point("create.cgroup");
    std::vector<std::string> argv = {sandbox_process_title(rec), "--vm-monitor", plan.dir};
    if (vmm->relayed()) argv.push_back("--relay");
    argv.push_back("--");
    for (auto& a : vmm->command_line(plan)) argv.push_back(a);
    std::string log = dir + "/vm.log";
    std::vector<std::pair<int, int>> inherit;
    if (tap && vmm->tap_inherited()) inherit.emplace_back(tap.get(), kInheritedTapFd);
    for (size_t i = 0; i < 2; ++i)
      if (layer[i]) inherit.emplace_back(layer[i].get(), kLayerFds[i]);
    pid_t pid = launch_detached(agent, argv, log, group, inherit);
    rec.agent_pid = pid;
    rec.agent_start = proc::start_time(pid);
    fault::point("create.agent");

    // Ready to be connected to: the relay's socket (QEMU), or the VM booted through the API.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kStartTimeoutMs);
    std::string ready = vmm->relayed() ? plan.dir + "/agent.sock" : vmm->api_socket(plan);
    for (int us = 500; !path_exists(ready); us = std::min(us * 2, 20'000)) {
      if (!process_alive(rec))
        throw Error(Errc::unavailable, vmm->name() + " exited while starting: " + tail(log) + "; console: " + tail(plan.console_log));
      if (std::chrono::steady_clock::now() > deadline)
        throw Error(Errc::timeout, vmm->name() + " did not come up within 30 s: " + tail(log));
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
    for (auto& r : vmm->boot_requests(plan))
      with_context("configuring the VM through " + vmm->name() + "'s API",
                   [&] { send_api_request(vmm->api_socket(plan), r, 20'000); });
    if (!plan.incoming) return;
    with_context("restoring the VM's memory from " + restore, [&] {
      Fd state(::open((restore + "/vm.state").c_str(), O_RDONLY | O_CLOEXEC));
      if (!state) throw sys_error("cannot open " + restore + "/vm.state", errno);
      vmm->load_memory(plan.dir, state.get());
    });
    rec.driver_data.erase("restore_from");  // a restart (persistent) boots, as after a power cut
  }

  Fd connect(const SandboxRecord& rec, const std::string& dir) override {
    return vmm_of(rec)->connect(dir + "/vm");
  }

  // A pause first has the guest write back its page cache (the agent's sync(2)), then
  // stops the vCPUs; QEMU's stop drains its block layer, so every write that returned
  // before the pause is in layer.img on the host. A guest that cannot sync is still
  // paused (a hung one must be stoppable) but marked, and no snapshot is taken of it.
  void pause(const SandboxRecord& rec, const std::string& dir) override {
    std::string unsynced = dir + "/vm/" + kUnsynced;
    std::string why;
    try {
      AgentClient agent(connect(rec, dir));
      if (!agent.ping(kSyncTimeoutMs, true).value("synced", false)) why = "its agent predates the sync request";
    } catch (const Error& e) {
      why = e.what();
    }
    if (why.empty()) ::unlink(unsynced.c_str());
    else write_file_atomic(unsynced, why + "\n", 0600);
    vmm_of(rec)->set_paused(dir + "/vm", true);
  }
  void resume(const SandboxRecord& rec, const std::string& dir) override {
    vmm_of(rec)->set_paused(dir + "/vm", false);
    ::unlink((dir + "/vm/" + kUnsynced).c_str());
  }

  // The writable layer is the whole of a guest's own files (ids included: a guest has
  // its own, so none move). The copy is never mounted on the host: the guest wrote it,
  // so it is untrusted input to a kernel's ext4. The new guest's kernel replays its
  // journal when its /init mounts it (a stop is a clean point, as after a power cut with
  // nothing in flight), and overlayfs empties the work directory at mount.
  void copy_layer(const SandboxRecord& rec, const std::string& dir, const std::string& dest) override {
    if (auto why = read_file_if_exists(dir + "/vm/" + kUnsynced))
      throw Error(Errc::unavailable, "sandbox " + rec.id + "'s guest did not write back its files before the pause: " +
                                         why->substr(0, why->find('\n')))
          .set_hint("`sbx resume " + rec.id + "` and snapshot it again");
    disk::copy_image(dir + "/layer.img", dest);
  }
  void seed_layer(const SandboxRecord& /*rec*/, const std::string& dir, const std::string& layer,
                  uint32_t /*from_uid_base*/) override {
    disk::copy_image(layer, dir + "/layer.img");
  }

  // Memory and devices through QEMU's migration into a file, the layer copied at the same
  // stopped moment (after the guest's sync, as any snapshot), then the VM runs on. No NIC:
  // a jail's tap and addresses belong to one sandbox, and the restored guest would keep them.
  void checkpoint(SandboxRecord& rec, const std::string& dir, const std::string& memory,
                  const std::string& layer) override {
    if (rec.spec.network != "none")
      throw Error(Errc::unavailable, "memory snapshots of micro-VMs need --network none (this sandbox's is " +
                                         rec.spec.network + ")")
          .set_hint("snapshot its files only (leave --memory out), or create the sandbox with --network none");
    auto vmm = vmm_of(rec);
    pause(rec, dir);
    try {
      copy_layer(rec, dir, layer);
      Fd out(::open((memory + "/vm.state").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!out) throw sys_error("cannot create " + memory + "/vm.state", errno);
      vmm->save_memory(dir + "/vm", out.get());
      if (::fsync(out.get()) != 0) throw sys_error("writing " + memory + "/vm.state", errno);
      nlohmann::json saved{{"memory_mb", rec.spec.limits.memory_mb}, {"cpus", rec.spec.limits.cpus},
                           {"image", rec.spec.image}, {"accel", str(rec, "accel", "")}};
      write_file_atomic(memory + "/vm.json", saved.dump() + "\n", 0600);
    } catch (...) {
      resume(rec, dir);
      throw;
    }
    resume(rec, dir);
  }

  // The VM comes back as it was saved: its RAM, vCPUs and disks are part of its state,
  // so the new sandbox takes the saved ones whatever its own spec said.
  void seed_memory(SandboxRecord& rec, const std::string& /*dir*/, const std::string& memory) override {
    auto saved = nlohmann::json::parse(read_file_if_exists(memory + "/vm.json").value_or(""), nullptr, false);
    if (!saved.is_object()) throw Error(Errc::io, "the memory snapshot's " + memory + "/vm.json is missing or unreadable");
    if (rec.spec.network != "none")
      throw Error(Errc::unavailable, "a micro-VM from a memory snapshot runs with --network none (asked: " +
                                         rec.spec.network + ")")
          .set_hint("create it with --network none");
    std::string accel = choose_accel().kvm ? "kvm" : "tcg";
    if (saved.value("accel", "") != accel)
      throw Error(Errc::unavailable, "the memory snapshot was saved under " + saved.value("accel", "?") +
                                         "; this host runs micro-VMs under " + accel);
    rec.spec.limits.memory_mb = saved.value("memory_mb", rec.spec.limits.memory_mb);
    rec.spec.limits.cpus = saved.value("cpus", rec.spec.limits.cpus);
    rec.spec.image = saved.value("image", rec.spec.image);
    rec.driver_data["restore_from"] = memory;
  }

  Probe memory_snapshots() override {
    std::string vmm;
    try {
      vmm = choose_vmm(choose_accel())->name();
    } catch (const Error& e) {
      vmm = e.what();
    }
    bool ok = vmm == "qemu";
    return {ok, "memory snapshots (snapshot --memory)",
            ok ? "QEMU's migration into a file; network none only" : "needs QEMU (" + vmm + ")", "docs/snapshots.md", true};
  }

  bool alive(const SandboxRecord& rec) override {
    if (!process_alive(rec)) return false;
    // While it boots (create is still waiting for it) a running process is all there is to see.
    if (rec.state != SandboxState::running) return true;
    // Heartbeat: a guest whose kernel hangs keeps QEMU running but never answers.
    try {
      AgentClient agent(connect(rec, sandbox_dir(rec.id)));
      agent.ping(kHeartbeatMs);
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  void destroy(const SandboxRecord& rec, const std::string& dir) override {
    if (!valid_sandbox_id(rec.id)) return;
    // The monitor's death takes the VMM with it (PR_SET_PDEATHSIG); killing
    // the cgroup makes sure of everything else it held.
    if (process_alive(rec)) ::kill(rec.agent_pid, SIGKILL);
    std::string scope = str(rec, "cgroup_scope", this->scope());
    cgroup::Group::open(scope, rec.id).destroy();
    for (auto& pid : monitors_of(rec.id)) ::kill(pid, SIGKILL);
    cgroup::remove_scope_if_empty(scope);
    net::teardown(rec.id);  // after the VMM is gone: nothing holds the tap any more
    (void)dir;  // the disk, sockets and logs go with the sandbox's directory
  }

  // No oom_kills(): the guest kernel's OOM killer is the one that acts (the
  // sandbox's cgroup inside the guest), and the guest agent reports an OOM
  // kill in the exit frame itself (agent --serial/--vsock: report_oom), so no
  // extra round trip into the VM is paid on every exec.

  std::vector<std::string> orphans(const std::set<std::string>& live_ids) override {
    // Cgroups of this scope are the subprocess driver's to report (same
    // scope, same names); here: VM monitors whose sandbox is gone.
    std::vector<std::string> out;
    for (auto& [pid, id] : all_monitors())
      if (!live_ids.count(id)) out.push_back("vm monitor " + std::to_string(pid) + " of " + id);
    for (auto& id : net::leftovers(cfg_.state_dir, "microvm", live_ids)) out.push_back("netjail " + id);
    return out;
  }

  void reap_orphan(const std::string& what) override {
    if (what.rfind("netjail ", 0) == 0) return net::teardown(what.substr(8));
    if (what.rfind("vm monitor ", 0) != 0) return;
    pid_t pid = static_cast<pid_t>(std::strtol(what.c_str() + 11, nullptr, 10));
    for (auto& [p, id] : all_monitors())
      if (p == pid) ::kill(pid, SIGKILL);
  }

 private:
  std::string scope() const { return cgroup::scope_for(cfg_.state_dir); }
  std::string sandbox_dir(const std::string& id) const { return cfg_.state_dir + "/sandboxes/" + id; }

  static bool process_alive(const SandboxRecord& rec) {
    return proc::alive(rec.agent_pid, rec.agent_start);
  }

  // The sandbox's writable layer, and the read-only disk of its image (if any).
  static void prepare_disks(const SandboxSpec& spec, const std::string& dir, VmPlan& plan) {
    plan.disk = dir + "/layer.img";
    // A sandbox from a snapshot has its layer already (seed_layer).
    if (spec.from_snapshot.empty() || !path_exists(plan.disk))
      with_context("making the writable layer", [&] { make_layer_disk(plan.disk, spec.limits.disk_mb); });
    if (spec.image.empty()) return;  // the busybox guest: the initramfs is the root
    plan.image_disk = with_context("making the read-only disk of the image " + spec.image,
                                   [&] { return image_disk(spec.image, dir + "/image.ext4"); });
  }

  static void check_spec(const SandboxSpec& spec) {
    // none: no NIC at all; jail: one NIC on the jail's tap (start()).
    if (spec.network != "none" && spec.network != "jail")
      throw Error(Errc::unavailable, "network mode '" + spec.network + "' is not available for micro-VMs")
          .set_hint("use --network none (no network device at all) or --network jail");
    for (char c : spec.workdir)
      if (c <= ' ' || c == 0x7f)
        throw Error(Errc::invalid_argument, "a micro-VM's workdir cannot contain spaces or control characters")
            .set_hint("choose a workdir such as /work");
  }

  std::unique_ptr<Vmm> vmm_of(const SandboxRecord& rec) const {
    if (str(rec, "vmm", "qemu") == "cloud-hypervisor") return make_cloud_hypervisor(find_program("cloud-hypervisor", "SBX_CLOUD_HYPERVISOR"));
    return make_qemu(find_program("qemu-system-x86_64", "SBX_QEMU"));
  }

  // Monitors of this state root: their argv names the sandbox's VM directory.
  std::vector<std::pair<pid_t, std::string>> all_monitors() const {
    std::vector<std::pair<pid_t, std::string>> out;
    std::string prefix = cfg_.state_dir + "/sandboxes/";
    DIR* d = ::opendir("/proc");
    if (!d) return out;
    while (auto* e = ::readdir(d)) {
      char* end;
      long pid = std::strtol(e->d_name, &end, 10);
      if (*end || pid <= 1) continue;
      std::optional<std::string> cmd = proc_cmdline(e->d_name);
      if (!cmd) continue;  // it exited meanwhile: whatever it was, it is no monitor now
      std::vector<std::string> args;
      std::istringstream in(*cmd);
      for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
      if (args.size() < 3 || args[1] != "--vm-monitor" || args[2].rfind(prefix, 0) != 0) continue;
      std::string id = args[2].substr(prefix.size());
      id = id.substr(0, id.find('/'));
      if (valid_sandbox_id(id)) out.emplace_back(static_cast<pid_t>(pid), id);
    }
    ::closedir(d);
    return out;
  }

  std::vector<pid_t> monitors_of(const std::string& id) const {
    std::vector<pid_t> out;
    for (auto& [pid, owner] : all_monitors())
      if (owner == id) out.push_back(pid);
    return out;
  }

  Config cfg_;
};

}  // namespace

std::vector<Probe> probe(const Config& cfg, bool deep) {
  std::vector<Probe> out;
  out.push_back(probes::running_as_root("micro-VMs get cgroups and their own host uid"));
  bool root = out.back().ok;
  Accel accel = choose_accel();
  std::unique_ptr<Vmm> vmm;
  try {
    vmm = choose_vmm(accel);
  } catch (const Error& e) {
    out.push_back({false, "VMM", e.message(), e.hint()});
    return out;
  }
  bool ok = false;
  std::string ver = program_version(vmm->binary(), &ok);
  out.push_back({ok, "VMM " + vmm->name(), vmm->binary() + ": " + ver, "reinstall it (apt-get install --reinstall qemu-system-x86)"});
  out.push_back({accel.kvm, "acceleration", accel.kvm ? "KVM: " + accel.why
                                                       : "TCG (software emulation; not a security boundary, and slow): " + accel.why,
                 "run on a host with usable KVM for isolation and speed", true});
  std::string guest;
  try {
    auto found = find_guest();
    guest = found.path;
    out.push_back({true, "guest image", guest + " (" + found.how + "; built " + guest_build_date(guest) + ", kernel " +
                                            tail(guest + "/kernel-version", 80) + ")", ""});
  } catch (const Error& e) {
    out.push_back({false, "guest image", e.message(), e.hint()});
  }
  out.push_back(probes::cgroup_controllers());
  bool all = out.back().ok;
  if (all) out.push_back(probes::cgroup_attach());
  if (deep && ok && !guest.empty() && root && all) out.push_back(smoke_boot(cfg, [&](const Config& c) { return make(c); }));
  return out;
}

std::vector<Probe> kvm_start_checks(const Config& cfg) {
  auto checks = probe(cfg, false);
  Accel dev = detect_kvm();
  Probe kvm{dev.kvm, "KVM", dev.kvm ? "/dev/kvm works and is not PVM" : dev.why, dev.fix};
  const char* forced = std::getenv("SBX_MICROVM_ACCEL");
  if (kvm.ok && forced && std::string(forced) == "tcg") {
    kvm = {false, "KVM", "SBX_MICROVM_ACCEL=tcg forces TCG emulation", "unset SBX_MICROVM_ACCEL"};
  }
  // Replaces the advisory acceleration line: under --require-kvm it is the point.
  for (auto& c : checks)
    if (c.name == "acceleration") c = kvm;
  return checks;
}

void require_checks(const std::vector<Probe>& checks) {
  std::string failed, hint;
  for (auto& c : checks) {
    if (c.ok) continue;
    failed += (failed.empty() ? "" : "; ") + c.name + ": " + c.detail;
    if (hint.empty()) hint = c.remedy;
  }
  if (failed.empty()) return;
  throw Error(Errc::unavailable, "micro-VMs cannot run with hardware isolation here (--require-kvm): " + failed)
      .set_hint(hint.empty() ? "see `sbx doctor --driver microvm`" : hint);
}

std::unique_ptr<Driver> make(const Config& cfg) { return std::make_unique<MicrovmDriver>(cfg); }

}  // namespace sbx::microvm
