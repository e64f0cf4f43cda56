// The microvm driver: each sandbox is its own virtual machine with its own
// guest kernel (QEMU's microvm machine, or cloud-hypervisor where installed),
// sbx-agent as the guest's init, and a per-sandbox ext4 disk as the writable
// layer of an overlay over the guest image. On a host without usable KVM the
// VMs run under QEMU's TCG emulation: every code path works, but slowly, and
// TCG is not a security boundary (doctor and create say so).
#pragma once

#include <memory>
#include <vector>

#include "core/config.hpp"
#include "core/driver.hpp"

namespace sbx::microvm {

/// The probes doctor prints for this driver.
std::vector<Probe> probe(const Config& cfg, bool deep);
/// The checks of `sbx serve --require-kvm`: probe()'s, with hardware KVM
/// (detect_kvm(), whatever SBX_MICROVM_ACCEL says) required instead of advised.
std::vector<Probe> kvm_start_checks(const Config& cfg);
/// Throws unavailable naming each failed check of kvm_start_checks, with the
/// first one's remedy as the hint.
void require_checks(const std::vector<Probe>& checks);
/// A driver instance.
std::unique_ptr<Driver> make(const Config& cfg);

}  // namespace sbx::microvm
