#include "agent/relay_map.hpp"

#include <signal.h>

namespace sbx::agent {

namespace {
bool opens_request(proto::Type t) {
  return t == proto::Type::exec || t == proto::Type::file_read || t == proto::Type::file_write ||
         t == proto::Type::list || t == proto::Type::ping || t == proto::Type::proc_list ||
         t == proto::Type::proc_attach || t == proto::Type::proc_signal || t == proto::Type::connect;
}

// A background exec's channel ends at `started`; its process is not the client's to end.
bool is_background(const proto::Frame& f) {
  if (f.type != proto::Type::exec) return false;
  try {
    return f.json().value("background", false);
  } catch (const std::exception&) {
    return false;  // the agent answers the garbage itself
  }
}

std::string signal_frame(uint32_t channel, int sig) {
  return proto::encode_json(proto::Type::signal, channel, {{"signal", sig}});
}
}  // namespace

uint32_t RelayMap::allocate() {
  // Ids wrap after 2^32 requests; one still in use is skipped, and 0 is never used.
  do {
    ++next_;
  } while (next_ == 0 || routes_.count(next_));
  return next_;
}

bool RelayMap::final_frame(const Route& r, proto::Type t) const {
  if (t == proto::Type::error || t == proto::Type::exit) return true;
  switch (r.kind) {
    case proto::Type::exec: return r.background && t == proto::Type::started;
    case proto::Type::file_read:
    case proto::Type::proc_attach:
    case proto::Type::list: return t == proto::Type::end;
    case proto::Type::ping:
    case proto::Type::proc_list:
    case proto::Type::proc_signal:
    case proto::Type::file_write: return t == proto::Type::ok;
    default: return false;
  }
}

std::optional<std::string> RelayMap::from_client(int client, const proto::Frame& f) {
  auto key = std::make_pair(client, f.channel);
  auto it = by_client_.find(key);
  uint32_t guest;
  if (it != by_client_.end()) {
    // Any frame on an open channel, even a second request (the agent answers
    // that with a conflict, as it would to a direct client).
    guest = it->second;
    Route& r = routes_.at(guest);
    if (r.kind == proto::Type::connect) {
      // A TCP connection ends when both sides sent end, or either an error.
      if (f.type == proto::Type::end) r.client_ended = true;
      if (f.type == proto::Type::error || (r.client_ended && r.guest_ended)) {
        by_client_.erase(it);
        routes_.erase(guest);
      }
    }
  } else if (opens_request(f.type)) {
    guest = allocate();
    routes_[guest] = Route{client, f.channel, f.type, false, is_background(f)};
    by_client_[key] = guest;
  } else {
    return std::nullopt;  // stdin, signal or data for a request that already ended
  }
  return proto::encode(f.type, guest, f.payload);
}

std::optional<std::pair<int, std::string>> RelayMap::from_guest(const proto::Frame& f) {
  auto it = routes_.find(f.channel);
  if (it == routes_.end()) return std::nullopt;
  if (it->second.kind == proto::Type::connect && f.type == proto::Type::end) it->second.guest_ended = true;
  Route r = it->second;
  if (final_frame(r, f.type) || (r.client_ended && r.guest_ended)) {
    by_client_.erase({r.client, r.channel});
    routes_.erase(it);
  }
  return std::make_pair(r.client, proto::encode(f.type, r.channel, f.payload));
}

std::vector<std::string> RelayMap::drop_client(int client) {
  std::vector<std::string> out;
  for (auto it = routes_.begin(); it != routes_.end();) {
    if (it->second.client != client) {
      ++it;
      continue;
    }
    // What the agent does for a client that vanished: end its commands (a
    // paused one is killed all the same: SIGKILL needs no SIGCONT) and detach
    // its attachers, whose background processes go on.
    if (it->second.kind == proto::Type::exec && !it->second.background) out.push_back(signal_frame(it->first, SIGKILL));
    if (it->second.kind == proto::Type::proc_attach) out.push_back(proto::encode(proto::Type::end, it->first));
    // Its TCP connections close (an error from the host aborts one).
    if (it->second.kind == proto::Type::connect)
      out.push_back(proto::encode_error(it->first, "unavailable", 0, "the host went away"));
    by_client_.erase({client, it->second.channel});
    it = routes_.erase(it);
  }
  return out;
}

std::vector<std::string> RelayMap::pause_client(int client, bool pause) {
  std::vector<std::string> out;
  for (auto& [guest, r] : routes_) {
    // A TCP connection pauses too: the agent stops reading its socket on SIGSTOP
    // (agent/tcp_relay.hpp); so does an attach or `logs -f`: the agent holds the
    // process's output for it, as it does for a slow local attacher (agent/procs.hpp).
    bool pausable = (r.kind == proto::Type::exec && !r.background) || r.kind == proto::Type::connect ||
                    r.kind == proto::Type::proc_attach;
    if (r.client != client || !pausable || r.paused == pause) continue;
    r.paused = pause;
    out.push_back(signal_frame(guest, pause ? SIGSTOP : SIGCONT));
  }
  return out;
}

}  // namespace sbx::agent
