// The virtual machine monitors the microvm driver can run a guest with. One
// class per VMM: its command line, the requests on its API socket that
// configure and boot the VM, and how the host opens a stream to the guest's
// agent. Adding Firecracker is one more class here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/fd.hpp"

namespace sbx::microvm {

/// Everything one VM is made of, decided by the driver.
struct VmPlan {
  std::string dir;          ///< the VM's runtime directory (sockets, logs)
  std::string kernel;       ///< vmlinuz for QEMU, the ELF vmlinux for cloud-hypervisor
  std::string initrd;       ///< the agent's cpio followed by the base initramfs
  std::string disk;         ///< the sandbox's writable layer (raw ext4 image)
  std::string image_disk;   ///< the --image's root as a raw ext4 image, attached read-only ("" = busybox guest)
  std::string console_log;  ///< where the guest's serial console goes
  unsigned vcpus = 1;
  uint64_t memory_mb = 256;
  bool kvm = false;          ///< hardware virtualization; else TCG (QEMU only)
  std::string cmdline_args;  ///< extra guest kernel arguments (sbx.workdir=... sbx.pids=...)
  std::string runas;         ///< uid:gid QEMU drops to after opening its files ("" = stay)
  bool incoming = false;     ///< start waiting for a saved VM's state (load_memory) instead of booting
  bool layer_fds = false;    ///< the VMM inherits the layer at kLayerFds (read-write, read-only) instead of opening `disk`
  /// --network jail: the descriptor of the jail's tap (backends/common/net,
  /// Attach::tap), the guest's one NIC. For a VMM that inherits it
  /// (tap_inherited()) this is its number in the VMM's own table; otherwise
  /// the number in this process, sent along with the API request that adds
  /// the NIC. -1 (--network none): the guest has no NIC at all.
  int tap_fd = -1;
};

/// One HTTP request on a VMM's API socket.
struct ApiRequest {
  std::string method;  ///< PUT
  std::string path;    ///< /api/v1/vm.create
  std::string body;    ///< JSON, may be empty
  int fd = -1;         ///< a descriptor sent with it (SCM_RIGHTS), -1 for none
};

/// The bytes of an HTTP/1.1 request on a unix socket.
std::string http_bytes(const ApiRequest& r);
/// Sends a request on the unix socket at `socket_path` and checks for a 2xx answer.
void send_api_request(const std::string& socket_path, const ApiRequest& r, int timeout_ms);

/// The number a VMM that inherits the tap finds it at (the VM monitor passes it on).
inline constexpr int kInheritedTapFd = 3;
/// Where a VMM that takes its layer as descriptors (Vmm::layer_by_fd) inherits them: read-write, read-only.
inline constexpr int kLayerFds[2] = {4, 5};
/// The vsock port the guest agent listens on under cloud-hypervisor.
inline constexpr uint32_t kAgentVsockPort = 1024;
/// The guest kernel arguments every VMM shares (the console, the timer fix under TCG).
std::string base_cmdline(const VmPlan& plan);
/// The host's TSC rate in kHz (x86-64; 0 elsewhere): what a TCG guest's TSC runs at.
uint64_t host_tsc_khz();

class Vmm {
 public:
  virtual ~Vmm() = default;
  /// "qemu" or "cloud-hypervisor", as recorded and shown by doctor.
  virtual std::string name() const = 0;
  /// The VMM binary.
  virtual std::string binary() const = 0;
  /// Which kernel file of the guest image it boots ("vmlinuz" or "vmlinux").
  virtual std::string kernel_file() const = 0;
  /// argv of the VMM process.
  virtual std::vector<std::string> command_line(const VmPlan& plan) const = 0;
  /// Requests on its API socket that configure and boot the VM (empty: the command line does it all).
  virtual std::vector<ApiRequest> boot_requests(const VmPlan& plan) const = 0;
  /// Where those requests go.
  virtual std::string api_socket(const VmPlan& plan) const { return plan.dir + "/api.sock"; }
  /// Whether the VMM gets the tap by inheritance (at kInheritedTapFd) rather than through its API.
  virtual bool tap_inherited() const = 0;
  /// Whether it takes the writable layer as inherited descriptors (VmPlan::layer_fds).
  virtual bool layer_by_fd() const { return false; }
  /// Whether the guest channel is one byte stream the VM monitor relays for many clients.
  virtual bool relayed() const = 0;
  /// A new stream to the guest's agent (VM dir as in VmPlan::dir).
  virtual Fd connect(const std::string& vm_dir) const = 0;
  /// Stops (paused) or continues the guest's vCPUs through the VMM's API.
  virtual void set_paused(const std::string& vm_dir, bool paused) const = 0;
  /// Writes a stopped VM's whole state (memory, devices) to `fd`; the VM stays stopped.
  /// Throws unavailable where the VMM cannot.
  virtual void save_memory(const std::string& /*vm_dir*/, int /*fd*/) const {
    throw Error(Errc::unavailable, name() + " cannot save a VM's memory here").set_hint("memory snapshots of micro-VMs need QEMU");
  }
  /// Loads what save_memory wrote from `fd` into a VM started with VmPlan::incoming,
  /// which then runs on from there.
  virtual void load_memory(const std::string& /*vm_dir*/, int /*fd*/) const {
    throw Error(Errc::unavailable, name() + " cannot restore a VM's memory here");
  }
};

/// QEMU with the microvm machine type: virtio-mmio devices, a virtio-serial port for the agent.
std::unique_ptr<Vmm> make_qemu(const std::string& binary);
/// cloud-hypervisor: configured and booted through its API socket, the agent reached over vsock.
std::unique_ptr<Vmm> make_cloud_hypervisor(const std::string& binary);

/// The first executable named `name` on PATH (or `override` when set), or "".
std::string find_program(const std::string& name, const char* override_env);
/// First line of `binary --version`, or the reason it could not be read.
std::string program_version(const std::string& binary, bool* ok);

}  // namespace sbx::microvm
