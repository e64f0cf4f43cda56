// The host-side companion of a micro-VM (sbx-agent --vm-monitor): it starts
// the VMM as its child (which dies with it), and for VMMs whose guest channel
// is one byte stream (QEMU's virtio-serial port) it relays the agent protocol
// between that stream and any number of host clients on a unix socket.
//
// Why a relay: every `sbx` process connects on its own and expects that
// closing its stream ends only its own commands, as a vanished client does
// with the agent. One virtio-serial port is one stream, so the relay gives
// each client a disjoint set of channel ids on it, and when a client goes
// away it sends the agent a KILL for that client's commands. A client that
// stops reading gets its commands stopped (SIGSTOP) until it catches up, so
// the one stream never stalls every other client.
#pragma once

#include <string>
#include <vector>

namespace sbx::agent {

struct MonitorOptions {
  std::string dir;                ///< serial.sock (QEMU connects) and agent.sock (clients) live here
  bool relay = false;             ///< relay the agent protocol (QEMU); else only supervise (cloud-hypervisor)
  std::vector<std::string> vmm;   ///< the VMM's argv
};

/// Runs until the VMM exits (its status is returned) or SIGTERM (the VMM is killed).
int run_vm_monitor(const MonitorOptions& opts);

}  // namespace sbx::agent
