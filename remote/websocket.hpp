// The remote driver's interactive calls: a WebSocket to one of the manager's
// routes (docs/api.md, "Interactive sessions"), and the client's half of a
// session: the caller's stdin, signals and window sizes out, the command's
// output in, until its exit message.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/agent_client.hpp"
#include "core/fd.hpp"
#include "core/websocket.hpp"

namespace sbx::remote_ws {

/// Called with the manager's answer when it refuses the upgrade; must throw.
using OnRefusal = std::function<void(int status, const std::string& body)>;

/// A WebSocket to `target` (path and query) of the manager at base_url (http://;
/// https:// is refused with a clear error: no TLS for WebSockets yet), sending the API key.
std::unique_ptr<ws::Connection> dial(const std::string& base_url, const std::string& shown, const std::string& api_key,
                                     const std::string& target, const OnRefusal& on_refusal);

/// How a session ended.
struct Outcome {
  std::optional<ExecResult> exit;  ///< the command's end, or nullopt when detached
  std::string error;               ///< the exit record's error (why the command did not start)
};

/// Runs the client's half of an exec or attach session: sends `first` (when
/// not null) and then io's input, hands output to io. Throws the manager's
/// error message, or protocol when the session ends without an exit.
Outcome run_session(ws::Connection& c, const nlohmann::json* first, ExecIO& io);

/// One end of a socketpair whose other end is relayed to c's binary messages
/// by a thread of its own (shutdown(SHUT_WR) on it is the tunnel's EOF).
Fd tunnel(std::unique_ptr<ws::Connection> c);

}  // namespace sbx::remote_ws
