// The bookkeeping of the micro-VM relay (vm_monitor.hpp), kept free of I/O so
// it can be tested alone: which client's channel each channel id on the shared
// guest stream stands for, and what to tell the agent when a client leaves or
// falls behind.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/protocol.hpp"

namespace sbx::agent {

class RelayMap {
 public:
  /// Rewrites a frame from client `client` for the guest stream; nullopt when
  /// it belongs to no request the agent still knows (it is dropped).
  std::optional<std::string> from_client(int client, const proto::Frame& f);
  /// Rewrites a frame from the guest for its client: (client, bytes), or
  /// nullopt when that client is gone.
  std::optional<std::pair<int, std::string>> from_guest(const proto::Frame& f);
  /// Forgets a client; returns the frames that end its running commands.
  std::vector<std::string> drop_client(int client);
  /// SIGSTOP (pause) or SIGCONT (resume) frames for a client's commands and
  /// TCP connections, each paused at most once.
  std::vector<std::string> pause_client(int client, bool pause);
  /// Requests in flight (for tests and diagnostics).
  size_t open_channels() const { return routes_.size(); }

 private:
  struct Route {
    int client;
    uint32_t channel;   // the client's own id
    proto::Type kind;   // the request that opened it
    bool paused = false;
    bool background = false;  // a background exec: the channel ends at `started`
    bool client_ended = false, guest_ended = false;  // a connect's half-closes
  };
  uint32_t allocate();
  bool final_frame(const Route& r, proto::Type t) const;

  std::map<uint32_t, Route> routes_;                          // guest channel -> route
  std::map<std::pair<int, uint32_t>, uint32_t> by_client_;    // (client, channel) -> guest channel
  uint32_t next_ = 0;
};

}  // namespace sbx::agent
