// sbx port-forward: a listener on the host's loopback whose connections are
// relayed to a port inside a sandbox through Backend::open_port (over the
// agent's stream, so it works on every driver and with --network none).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "core/backend.hpp"
#include "core/fd.hpp"

namespace sbx {

struct ForwardPorts {
  uint16_t local = 0;   ///< 0: any free port
  uint16_t remote = 0;
};

/// "[LOCAL:]REMOTE" as docker and kubectl take it: LOCAL omitted means the
/// same number as REMOTE, LOCAL 0 any free port. Throws usage on anything else.
ForwardPorts parse_forward_ports(const std::string& spec);

class PortForwarder {
 public:
  /// Checks that the sandbox runs and listens on 127.0.0.1:ports.local
  /// (throws conflict when another process holds it).
  PortForwarder(Backend& backend, std::string id, ForwardPorts ports);
  ~PortForwarder();
  PortForwarder(const PortForwarder&) = delete;
  PortForwarder& operator=(const PortForwarder&) = delete;

  /// The port listened on (the chosen one for 0).
  uint16_t local_port() const { return local_; }
  /// Relays each connection until stop_fd is readable; a connection that
  /// cannot be opened (nothing listens in the sandbox) is reported to
  /// on_error and closed, and the forwarder goes on. Throws the error when the
  /// sandbox is gone (removed, dead). Returns with every connection closed.
  void run(int stop_fd, const std::function<void(const Error&)>& on_error);

 private:
  struct Conn;
  void serve(Conn& c, const std::function<void(const Error&)>& on_error);
  void reap(bool all);

  Backend& backend_;
  std::string id_;
  uint16_t remote_;
  uint16_t local_ = 0;
  Fd listen_;
  Fd wake_r_, wake_w_;  // a connection thread ended (or found the sandbox gone)
  std::mutex mu_;
  std::list<std::unique_ptr<Conn>> conns_;
  std::unique_ptr<Error> fatal_;
};

}  // namespace sbx
