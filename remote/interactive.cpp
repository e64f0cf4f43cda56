// RemoteBackend's interactive calls (docs/api.md, "Interactive sessions"):
// exec with live stdin or a terminal, attach, logs, ps, kill and port tunnels.
#include <signal.h>

#include "core/error.hpp"
#include "remote/backend.hpp"
#include "remote/http.hpp"
#include "remote/websocket.hpp"

namespace sbx {

using nlohmann::json;

std::unique_ptr<ws::Connection> RemoteBackend::dial(const std::string& path) {
  return remote_ws::dial(url_, where(), api_key_, path,
                         [&](int status, const std::string& body) { refused(path, status, body); });
}

ExecResult RemoteBackend::ws_exec(const std::string& path, const json& first, ExecIO& io) {
  auto c = dial(path);
  remote_ws::Outcome out = remote_ws::run_session(*c, &first, io);
  if (!out.exit) throw Error(Errc::protocol, "the manager ended the exec without its exit");
  io.error = out.error;
  return *out.exit;
}

std::vector<ProcessInfo> RemoteBackend::processes(const std::string& id) {
  json answer = call_json("GET", sandbox_path(id) + "/processes", nullptr);
  try {
    return answer.at("processes").get<std::vector<ProcessInfo>>();
  } catch (const std::exception& e) {
    throw Error(Errc::protocol, std::string("the manager sent a process list sbx cannot read: ") + e.what());
  }
}

std::optional<ExecResult> RemoteBackend::attach(const std::string& id, int pid, const AttachOptions& opts, ExecIO& io) {
  std::string path = sandbox_path(id) + "/processes/" + std::to_string(pid);
  std::string tail = opts.tail_lines >= 0 ? "tail=" + std::to_string(opts.tail_lines) : "";
  if (!opts.input) {
    // Logs: the NDJSON stream, which ends with the exit line, or {"end": true} when not following.
    std::string query = (opts.follow ? "follow=1" : "follow=0") + (tail.empty() ? "" : "&" + tail);
    return stream_exec(path + "/logs?" + query, nullptr, io);
  }
  auto c = dial(path + "/attach" + (tail.empty() ? "" : "?" + tail));
  remote_ws::Outcome out = remote_ws::run_session(*c, nullptr, io);
  return out.exit;
}

void RemoteBackend::signal_process(const std::string& id, int pid, int sig) {
  json body{{"signal", sig}};
  call_json("POST", sandbox_path(id) + "/processes/" + std::to_string(pid) + "/signal", &body);
}

Fd RemoteBackend::open_port(const std::string& id, uint16_t port) {
  return remote_ws::tunnel(dial(sandbox_path(id) + "/tcp/" + std::to_string(port)));
}

}  // namespace sbx
