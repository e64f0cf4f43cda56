#include "backends/microvm/host.hpp"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/agent_client.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::microvm {

Accel detect_kvm() {
  const char* other_host = "run the micro-VM manager on a host with hardware KVM (bare metal, or a VM with nested "
                           "virtualization: /sys/module/kvm_intel/parameters/nested or kvm_amd's is Y)";
  if (!path_exists("/dev/kvm"))
    return {false, "no /dev/kvm", "load the KVM module (modprobe kvm_intel or kvm_amd; virtualization on in the firmware), or " +
                                      std::string(other_host)};
  Fd kvm(::open("/dev/kvm", O_RDWR | O_CLOEXEC));
  if (!kvm) return {false, "/dev/kvm cannot be opened (" + std::string(std::strerror(errno)) + ")",
                    "run sbx as root (or in the kvm group), and give a container --device /dev/kvm"};
  if (::ioctl(kvm.get(), KVM_GET_API_VERSION, 0) != KVM_API_VERSION)
    return {false, "/dev/kvm does not answer the KVM API (version " + std::to_string(KVM_API_VERSION) + ")", other_host};
  Fd vm(::ioctl(kvm.get(), KVM_CREATE_VM, 0));
  if (!vm) return {false, "/dev/kvm cannot create a VM (" + std::string(std::strerror(errno)) + ")", other_host};
  // PVM (nested KVM without hardware support) runs only PVM-patched guest
  // kernels: a stock kernel aborts or stalls there, so it is TCG here too.
  if (path_exists("/sys/module/kvm_pvm"))
    return {false, "/dev/kvm is PVM (kvm_pvm), which needs a PVM guest kernel",
            std::string(other_host) + "; here, serve runsc (gVisor) sandboxes with sbx-serve instead"};
  return {true, "/dev/kvm", ""};
}

Accel choose_accel() {
  const char* forced = std::getenv("SBX_MICROVM_ACCEL");
  std::string f = forced ? forced : "";
  if (f == "tcg") return {false, "SBX_MICROVM_ACCEL=tcg", "unset SBX_MICROVM_ACCEL"};
  if (f == "kvm") return {true, "SBX_MICROVM_ACCEL=kvm", ""};
  return detect_kvm();
}

std::unique_ptr<Vmm> choose_vmm(const Accel& accel) {
  const char* forced = std::getenv("SBX_MICROVM_VMM");
  std::string f = forced ? forced : "";
  if (!f.empty() && f != "qemu" && f != "cloud-hypervisor")
    throw Error(Errc::invalid_argument, "SBX_MICROVM_VMM='" + f + "' is not a VMM sbx knows").set_hint("use qemu or cloud-hypervisor");
  std::string ch = find_program("cloud-hypervisor", "SBX_CLOUD_HYPERVISOR");
  if (f == "cloud-hypervisor" || (f.empty() && !ch.empty() && accel.kvm)) {
    if (ch.empty())
      throw Error(Errc::not_found, "cloud-hypervisor not found").set_hint("install it, or set SBX_CLOUD_HYPERVISOR to its path");
    return make_cloud_hypervisor(ch);
  }
  std::string qemu = find_program("qemu-system-x86_64", "SBX_QEMU");
  if (qemu.empty())
    throw Error(Errc::not_found, "qemu-system-x86_64 not found").set_hint("apt-get install qemu-system-x86 (scripts/setup.sh does)");
  return make_qemu(qemu);
}

Probe smoke_boot(const Config& cfg, const std::function<std::unique_ptr<Driver>(const Config&)>& make) {
  using clock = std::chrono::steady_clock;
  Probe p{false, "smoke boot (a VM up to its agent's answer)", "", "see the console log the error names", false};
  auto driver = make(cfg);
  SandboxRecord rec;
  rec.id = new_sandbox_id();
  rec.spec.driver = "microvm";
  rec.spec.limits = {1, 256, 64, 16};
  std::string dir = cfg.state_dir + "/microvm/smoke-" + rec.id;
  auto t0 = clock::now();
  try {
    make_dirs(dir, 0700);
    driver->start(rec, dir);
    for (auto deadline = t0 + std::chrono::seconds(60);; std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
      try {
        AgentClient(driver->connect(rec, dir)).ping(2000);
        break;
      } catch (const Error&) {
        if (!driver->alive(rec)) throw Error(Errc::unavailable, "the VM exited: " + read_file_if_exists(dir + "/console.log").value_or("").substr(0, 800));
        if (clock::now() > deadline) throw Error(Errc::timeout, "the agent did not answer within 60 s");
      }
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t0).count();
    p.ok = true;
    p.detail = "booted and answered in " + std::to_string(ms) + " ms";
  } catch (const Error& e) {
    p.detail = e.what();
  }
  try {
    driver->destroy(rec, dir);
    remove_tree(dir);
  } catch (const Error&) {
  }
  return p;
}

}  // namespace sbx::microvm
