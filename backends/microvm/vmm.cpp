#include "backends/microvm/vmm.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "backends/common/process.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/unix_socket.hpp"

namespace sbx::microvm {

namespace {

using nlohmann::json;

// Reads one "\n"-terminated line a byte at a time, so nothing after it is consumed.
std::string read_line(int fd, int timeout_ms) {
  std::string line;
  while (line.size() < 4096) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) throw Error(Errc::timeout, "no answer within " + std::to_string(timeout_ms) + " ms");
    char c;
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (c == '\n') return line;
    line += c;
  }
  throw Error(Errc::protocol, "the connection ended before a full line: '" + line + "'");
}

// A session on QEMU's monitor socket: the greeting and qmp_capabilities, then
// commands, each answered in turn; events QEMU sends meanwhile ({"event": ...}) are skipped.
class Qmp {
 public:
  explicit Qmp(const std::string& socket_path) : s_(connect_unix(socket_path, "QEMU's QMP socket")) {
    read_line(s_.get(), 5000);  // {"QMP": {"version": ...}}
    execute("qmp_capabilities");
  }
  /// The command's "return"; `pass`, when given, travels with it (SCM_RIGHTS: getfd).
  json execute(const std::string& cmd, const json& args = nullptr, int pass = -1) {
    json req{{"execute", cmd}};
    if (!args.is_null()) req["arguments"] = args;
    std::string line = req.dump() + "\n";
    if (pass >= 0) {
      ssize_t n = send_passing(s_.get(), line, pass, true);
      if (n <= 0) throw sys_error("sending a descriptor to QEMU", errno);
      line.erase(0, static_cast<size_t>(n));
    }
    write_all(s_.get(), line);
    for (;;) {
      json j = json::parse(read_line(s_.get(), 5000), nullptr, false);
      if (j.is_discarded() || j.contains("event") || j.contains("QMP")) continue;
      if (j.contains("error")) throw Error(Errc::io, "QMP " + cmd + " failed: " + j["error"].dump());
      return j.value("return", json::object());
    }
  }

 private:
  Fd s_;
};

// Polls `done` every 50 ms: a migration of a few hundred MiB under TCG takes seconds.
template <class F>
void wait_migration(const std::string& what, F done) {
  for (int waited = 0; !done(); waited += 50) {
    if (waited > 120'000) throw Error(Errc::timeout, what + " did not finish within 120 s");
    ::usleep(50'000);
  }
}

// The migration's state; "failed" throws with QEMU's reason.
std::string migration_status(Qmp& q, const std::string& what) {
  json m = q.execute("query-migrate");
  std::string status = m.value("status", "");
  if (status == "failed" || status == "cancelled") throw Error(Errc::io, what + " failed: " + m.value("error-desc", status));
  return status;
}

class Qemu : public Vmm {
 public:
  explicit Qemu(std::string bin) : bin_(std::move(bin)) {}
  std::string name() const override { return "qemu"; }
  std::string binary() const override { return bin_; }
  std::string kernel_file() const override { return "vmlinuz"; }
  bool relayed() const override { return true; }
  bool tap_inherited() const override { return true; }
  bool layer_by_fd() const override { return true; }
  std::vector<ApiRequest> boot_requests(const VmPlan&) const override { return {}; }

  std::vector<std::string> command_line(const VmPlan& p) const override {
    std::vector<std::string> a = {
        bin_,
        // microvm: no PCI, no firmware option ROMs; the ISA serial port is the console.
        "-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on",
        // TCG: a 64 MiB translation cache instead of QEMU's default 1 GiB keeps an idle VM small.
        "-accel", p.kvm ? "kvm" : "tcg,tb-size=64",
        "-cpu", p.kvm ? "host" : "max",
        "-m", std::to_string(p.memory_mb),
        "-smp", std::to_string(p.vcpus),
        "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
        // QMP, for sbx pause/resume (stop/cont): the vCPUs stop, the guest's memory stays.
        "-qmp", "unix:" + p.dir + "/qmp.sock,server=on,wait=off",
        "-kernel", p.kernel, "-initrd", p.initrd,
        "-append", base_cmdline(p),
        "-serial", "file:" + p.console_log,
        // The writable layer (an image's disk after it), then the agent's port (the guest finds it by name).
        "-device", "virtio-blk-device,drive=layer",
    };
    // From an fd set, QEMU dups the descriptor whose access mode a (re)open asks for. No
    // image locks: the layer is this VM's alone, and the read-only descriptor's lock would
    // refuse the read-write one when the source takes its disk back after a migration.
    std::string layer = "file=" + p.disk;
    if (p.layer_fds) {
      layer = "file.filename=/dev/fdset/1,file.driver=file,file.locking=off";
      for (int fd : kLayerFds) a.insert(a.end() - 2, {"-add-fd", "fd=" + std::to_string(fd) + ",set=1"});
    }
    a.insert(a.end() - 2, {"-drive", "id=layer," + layer + ",format=raw,if=none,cache=unsafe"});
    // The image's root: read-only to the guest (the block device says so; the
    // guest's /init tells the two disks apart by that) and to QEMU, which
    // opens it O_RDONLY, so many VMs share one file and the host's page cache.
    if (!p.image_disk.empty())
      a.insert(a.end(), {"-drive", "id=image,file=" + p.image_disk + ",format=raw,if=none,readonly=on",
                         "-device", "virtio-blk-device,drive=image"});
    a.insert(a.end(), {
        "-device", "virtio-serial-device",
        // QEMU is the client: the VM monitor listens and relays (see agent/vm_monitor.hpp).
        "-chardev", "socket,id=agent,path=" + p.dir + "/serial.sock",
        "-device", "virtserialport,chardev=agent,name=agent",
    });
    // The jail's tap, already open (QEMU never opens or configures it itself);
    // no vhost: the in-kernel data path would bypass nothing here, but needs /dev/vhost-net.
    if (p.tap_fd >= 0)
      a.insert(a.end(), {"-netdev", "tap,id=n0,fd=" + std::to_string(p.tap_fd) + ",vhost=off",
                         "-device", "virtio-net-device,netdev=n0"});
    // QEMU's own seccomp filter: no exec, no obsolete calls, no scheduler or
    // resource changes. With -runas, QEMU must still call setuid once after
    // the filter is in (it kills itself with SIGSYS otherwise), and once it is
    // unprivileged it cannot regain root anyway; without, no set*id at all.
    if (p.incoming) a.insert(a.end(), {"-incoming", "defer"});
    a.push_back("-sandbox");
    a.push_back(p.runas.empty() ? "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
                                : "on,obsolete=deny,spawn=deny,resourcecontrol=deny");
    if (!p.runas.empty()) {
      a.push_back("-runas");
      a.push_back(p.runas);
    }
    return a;
  }

  Fd connect(const std::string& vm_dir) const override {
    return connect_unix(vm_dir + "/agent.sock", "the micro-VM's relay");
  }

  void set_paused(const std::string& vm_dir, bool paused) const override {
    Qmp(vm_dir + "/qmp.sock").execute(paused ? "stop" : "cont");
  }

  // QEMU's migration into a descriptor (fd: over getfd; its file: and exec: targets do
  // not work in 7.2). Stopped first, the VM stays stopped: cont runs it on.
  void save_memory(const std::string& vm_dir, int fd) const override {
    Qmp q(vm_dir + "/qmp.sock");
    q.execute("getfd", {{"fdname", "sbxmem"}}, fd);
    q.execute("migrate", {{"uri", "fd:sbxmem"}});
    wait_migration("saving the VM's memory", [&] { return migration_status(q, "saving the VM's memory") == "completed"; });
  }

  // Started with -incoming defer: the state comes in, and the VM is as the source was
  // when saved, stopped: cont runs it. One QMP session throughout (QMP serves one client).
  void load_memory(const std::string& vm_dir, int fd) const override {
    Qmp q(vm_dir + "/qmp.sock");
    q.execute("getfd", {{"fdname", "sbxmem"}}, fd);
    q.execute("migrate-incoming", {{"uri", "fd:sbxmem"}});
    std::string state;
    wait_migration("restoring the VM's memory", [&] {
      migration_status(q, "restoring the VM's memory");
      state = q.execute("query-status").value("status", "");
      return state != "inmigrate";
    });
    if (state == "paused") q.execute("cont");
    else if (state != "running") throw Error(Errc::io, "the restored VM is " + state + ", not running");
  }

 private:
  std::string bin_;
};

class CloudHypervisor : public Vmm {
 public:
  explicit CloudHypervisor(std::string bin) : bin_(std::move(bin)) {}
  std::string name() const override { return "cloud-hypervisor"; }
  std::string binary() const override { return bin_; }
  std::string kernel_file() const override { return "vmlinux"; }
  bool relayed() const override { return false; }
  bool tap_inherited() const override { return false; }

  std::vector<std::string> command_line(const VmPlan& p) const override {
    // Only the API socket here: the VM itself is described by vm.create.
    return {bin_, "--api-socket", "path=" + api_socket(p)};
  }

  std::vector<ApiRequest> boot_requests(const VmPlan& p) const override {
    json disks = json::array({{{"path", p.disk}}});
    if (!p.image_disk.empty()) disks.push_back({{"path", p.image_disk}, {"readonly", true}});
    json cfg = {
        {"cpus", {{"boot_vcpus", p.vcpus}, {"max_vcpus", p.vcpus}}},
        {"memory", {{"size", p.memory_mb << 20}}},
        {"payload", {{"kernel", p.kernel}, {"initramfs", p.initrd}, {"cmdline", base_cmdline(p)}}},
        {"disks", disks},
        {"vsock", {{"cid", 3}, {"socket", p.dir + "/vsock.sock"}}},
        {"serial", {{"mode", "File"}, {"file", p.console_log}}},
        {"console", {{"mode", "Off"}}},
    };
    std::vector<ApiRequest> out = {{"PUT", "/api/v1/vm.create", cfg.dump()}};
    // cloud-hypervisor ignores descriptor numbers in vm.create's body: a tap
    // fd reaches it only over the API socket (SCM_RIGHTS) with vm.add-net,
    // which before vm.boot adds the NIC to the VM's configuration.
    if (p.tap_fd >= 0) out.push_back({"PUT", "/api/v1/vm.add-net", json{{"id", "n0"}}.dump(), p.tap_fd});
    out.push_back({"PUT", "/api/v1/vm.boot", ""});
    return out;
  }

  Fd connect(const std::string& vm_dir) const override {
    // cloud-hypervisor's vsock device on the host is a unix socket: one
    // connection per stream, opened with "CONNECT <port>" and answered "OK <n>".
    Fd s = connect_unix(vm_dir + "/vsock.sock", "the micro-VM's vsock socket");
    write_all(s.get(), "CONNECT " + std::to_string(kAgentVsockPort) + "\n");
    std::string line = with_context("connecting to the guest agent over vsock", [&] { return read_line(s.get(), 5000); });
    if (line.rfind("OK ", 0) != 0)
      throw Error(Errc::unavailable, "the guest's vsock port " + std::to_string(kAgentVsockPort) + " refused: " + line);
    return s;
  }

  void set_paused(const std::string& vm_dir, bool paused) const override {
    send_api_request(vm_dir + "/api.sock", {"PUT", paused ? "/api/v1/vm.pause" : "/api/v1/vm.resume", ""}, 5000);
  }

 private:
  std::string bin_;
};

#if defined(__x86_64__)
uint64_t raw_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC_RAW, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}

// One TSC reading and the raw clock's time at it: the middle of the tightest
// of a few clock-TSC-clock brackets. A single clock-then-TSC pair is off by
// however long the thread was preempted between the two, which on a loaded
// host came to milliseconds: the guest's clock then ran ~10% fast.
struct TscAt {
  uint64_t ns = 0, tsc = 0, width = UINT64_MAX;
};

TscAt tsc_at() {
  TscAt best;
  for (int i = 0; i < 8; ++i) {
    const uint64_t a = raw_ns(), c = __rdtsc(), b = raw_ns();
    if (b - a < best.width) best = {a + (b - a) / 2, c, b - a};
  }
  return best;
}
#endif

}  // namespace

uint64_t host_tsc_khz() {
#if defined(__x86_64__)
  // Measured once per process against the kernel's raw clock over 20 ms
  // (~0.01% off). QEMU's TCG gives the guest the host's TSC as it is (rdtsc).
  static const uint64_t khz = [] {
    const TscAt a = tsc_at();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const TscAt b = tsc_at();
    return (b.tsc - a.tsc) * 1'000'000ull / (b.ns - a.ns);  // cycles per ms
  }();
  return khz;
#else
  return 0;
#endif
}

std::string base_cmdline(const VmPlan& p) {
  // tsc_early_khz: without it the guest's timer calibration under TCG hangs
  // most boots. It must be the host's TSC rate, the guest's TSC under TCG: a
  // fixed 2.445 GHz made the guest's clock run 18% slow on a 2.0 GHz host
  // (sleep, timeouts, the idle time gc reads from the agent).
  // panic=-1 with -no-reboot: a guest whose init (the agent) dies stops.
  std::string c = "console=ttyS0 quiet panic=-1";
  if (!p.kvm)
    if (uint64_t khz = host_tsc_khz()) c += " tsc_early_khz=" + std::to_string(khz);
  if (!p.cmdline_args.empty()) c += " " + p.cmdline_args;
  return c;
}

std::string http_bytes(const ApiRequest& r) {
  std::string s = r.method + " " + r.path + " HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n";
  if (!r.body.empty()) s += "Content-Type: application/json\r\n";
  s += "Content-Length: " + std::to_string(r.body.size()) + "\r\nConnection: close\r\n\r\n" + r.body;
  return s;
}

void send_api_request(const std::string& socket_path, const ApiRequest& r, int timeout_ms) {
  Fd s = connect_unix(socket_path, "the VMM's API socket");
  std::string bytes = http_bytes(r);
  if (r.fd >= 0) {
    // The descriptor rides with the request's bytes (whatever of them one sendmsg takes).
    ssize_t n = send_passing(s.get(), bytes, r.fd, true);
    if (n <= 0) throw sys_error("sending a descriptor to the VMM's API socket", errno);
    bytes.erase(0, static_cast<size_t>(n));
  }
  write_all(s.get(), bytes);
  std::string status = read_line(s.get(), timeout_ms);
  // "HTTP/1.1 204 No Content"
  auto sp = status.find(' ');
  int code = sp == std::string::npos ? 0 : std::atoi(status.c_str() + sp + 1);
  if (code < 200 || code > 299) {
    std::string rest;
    char buf[2048];
    pollfd p{s.get(), POLLIN, 0};
    if (::poll(&p, 1, 500) > 0) {
      ssize_t n = ::read(s.get(), buf, sizeof buf);
      if (n > 0) rest.assign(buf, static_cast<size_t>(n));
    }
    throw Error(Errc::io, r.method + " " + r.path + " failed: " + status + (rest.empty() ? "" : " " + rest.substr(0, 800)));
  }
}

std::unique_ptr<Vmm> make_qemu(const std::string& binary) { return std::make_unique<Qemu>(binary); }
std::unique_ptr<Vmm> make_cloud_hypervisor(const std::string& binary) { return std::make_unique<CloudHypervisor>(binary); }

std::string find_program(const std::string& name, const char* override_env) {
  if (const char* o = std::getenv(override_env); o && *o) return ::access(o, X_OK) == 0 ? o : "";
  const char* path = std::getenv("PATH");
  std::istringstream in(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string d; std::getline(in, d, ':');)
    if (!d.empty() && ::access((d + "/" + name).c_str(), X_OK) == 0) return d + "/" + name;
  for (const char* d : {"/usr/local/bin", "/usr/bin", "/usr/sbin"})
    if (::access((std::string(d) + "/" + name).c_str(), X_OK) == 0) return std::string(d) + "/" + name;
  return "";
}

std::string program_version(const std::string& binary, bool* ok) {
  try {
    proc::RunOptions o;
    o.timeout_ms = 10'000;
    auto r = proc::run({binary, "--version"}, o);
    *ok = r.status == 0;
    std::string line = r.output.substr(0, r.output.find('\n'));
    return line.empty() ? "exit " + std::to_string(r.status) : line;
  } catch (const Error& e) {
    *ok = false;
    return e.what();
  }
}

}  // namespace sbx::microvm
