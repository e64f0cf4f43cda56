// What this host offers micro-VMs: hardware acceleration or only TCG, which
// VMM to use, and a smoke boot for doctor.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backends/microvm/vmm.hpp"
#include "core/config.hpp"
#include "core/driver.hpp"

namespace sbx::microvm {

struct Accel {
  bool kvm = false;
  std::string why;  ///< what was found ("/dev/kvm is PVM (nested)...")
  std::string fix;  ///< what makes KVM usable, when it is not
};

/// What /dev/kvm is, whatever SBX_MICROVM_ACCEL says: KVM when it opens,
/// answers the stable KVM API, creates a VM and is not PVM (which boots only
/// PVM-patched guest kernels).
Accel detect_kvm();
/// detect_kvm()'s verdict (KVM, else TCG); SBX_MICROVM_ACCEL=kvm|tcg overrides.
Accel choose_accel();
/// cloud-hypervisor when installed and KVM is usable, else QEMU;
/// SBX_MICROVM_VMM=qemu|cloud-hypervisor overrides. Throws not_found when none is installed.
std::unique_ptr<Vmm> choose_vmm(const Accel& accel);
/// Boots one VM through the driver and pings its agent; reports the time.
Probe smoke_boot(const Config& cfg, const std::function<std::unique_ptr<Driver>(const Config&)>& make);

}  // namespace sbx::microvm
