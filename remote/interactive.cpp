// RemoteBackend's commands: exec and one-shots (stdin whole in the request,
// or live over the exec WebSocket: docs/api.md, "Interactive sessions"),
// background starts, attach, logs, ps, kill and port tunnels.
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "core/error.hpp"
#include "core/json_number.hpp"
#include "core/units.hpp"
#include "core/wire.hpp"
#include "remote/backend.hpp"
#include "remote/http.hpp"
#include "remote/websocket.hpp"

namespace sbx {

using nlohmann::json;

namespace {

// Stdin travels whole inside the exec request (base64 when binary), and the
// manager caps exec bodies at 64 MiB: 32 MiB of stdin always fits.
constexpr size_t kMaxRemoteStdin = 32u << 20;

std::string read_all_fd(int fd, size_t cap) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw sys_error("cannot read stdin", errno);
    if (n == 0) return out;
    if (out.size() + static_cast<size_t>(n) > cap)
      throw Error(Errc::too_large, "stdin for a remote exec is sent whole and is over " + format_size(cap));
    out.append(buf, static_cast<size_t>(n));
  }
}

// The exec fields of an exec or run request (reads stdin when it is open and goes in the request).
json exec_body(const ExecRequest& req, ExecIO& io, bool with_stdin = true) {
  // JSON strings carry only UTF-8; checked before stdin is consumed.
  for (auto& a : req.argv)
    if (!valid_utf8(a)) throw Error(Errc::invalid_argument, "command arguments must be UTF-8 for a remote exec");
  for (auto& [k, v] : req.env)
    if (!valid_utf8(k) || !valid_utf8(v))
      throw Error(Errc::invalid_argument, "environment variables must be UTF-8 for a remote exec");
  json body{{"cmd", req.argv}};
  if (!req.env.empty()) body["env"] = req.env;
  if (!req.cwd.empty()) body["cwd"] = req.cwd;
  if (req.timeout_ms) body["timeout_s"] = static_cast<double>(req.timeout_ms) / 1000.0;
  if (req.tty) {
    body["tty"] = true;
    if (req.rows && req.cols) body["rows"] = req.rows, body["cols"] = req.cols;
  }
  if (req.background) body["background"] = true;
  if (req.stdin_open && with_stdin) {
    std::string data = io.stdin_fd >= 0 ? read_all_fd(io.stdin_fd, kMaxRemoteStdin) : io.stdin_data;
    if (valid_utf8(data)) body["stdin"] = std::move(data);
    else body["stdin_b64"] = base64_encode(data);
  }
  return body;
}

}  // namespace

ExecResult RemoteBackend::background(const std::string& id, const ExecRequest& req) {
  ExecIO none;
  json body = exec_body(req, none, false);
  if (req.stdin_open) body["stdin_open"] = true;
  json answer = call_json("POST", sandbox_path(id) + "/exec", &body);
  ExecResult r;
  auto pid = answer.is_object() && answer.contains("pid") ? json_number<int>(answer["pid"]) : std::nullopt;
  if (!pid || !answer["pid"].is_number_integer())
    throw Error(Errc::protocol, "the manager's answer to a background start names no pid");
  r.pid = *pid;
  return r;
}

ExecResult RemoteBackend::exec(const std::string& id, const ExecRequest& req, ExecIO& io) {
  if (req.background) return background(id, req);
  // Live input (or a terminal) streams over a WebSocket; without it, one request carries it all.
  if (req.tty || (req.stdin_open && io.stdin_fd >= 0)) return ws_exec(sandbox_path(id) + "/exec/ws", exec_body(req, io, false), io);
  return finished_exec(sandbox_path(id) + "/exec", exec_body(req, io), io);
}

OneShotResult RemoteBackend::run_once(const SandboxSpec& spec, const ExecRequest& req, ExecIO& io) {
  // /v1/run ties the sandbox to this request: a client killed mid-call leaves
  // nothing on the manager, which create + exec + delete could not promise.
  bool live = req.tty || (req.stdin_open && io.stdin_fd >= 0);
  json body = exec_body(req, io, !live);
  body["sandbox"] = spec_body(spec);
  OneShotResult out;
  out.spec = spec;
  out.exec = live ? ws_exec("/v1/run/ws", body, io) : finished_exec("/v1/run", body, io);
  return out;
}


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

namespace {

// The manager's 404 for a pid names the route that lists processes; a user of
// the CLI gets the local driver's words, with the command that lists them.
template <class F>
auto with_pid_hint(const std::string& id, int pid, F&& f) {
  try {
    return f();
  } catch (Error& e) {
    if (e.code() != Errc::not_found || std::string_view(e.what()).find("no background process") == std::string_view::npos)
      throw;
    throw Error(Errc::not_found, "no background process " + std::to_string(pid) + " in this sandbox (see `sbx ps " +
                                     id + "`)");
  }
}

}  // namespace

std::optional<ExecResult> RemoteBackend::attach(const std::string& id, int pid, const AttachOptions& opts, ExecIO& io) {
  return with_pid_hint(id, pid, [&] { return attach_pid(id, pid, opts, io); });
}

std::optional<ExecResult> RemoteBackend::attach_pid(const std::string& id, int pid, const AttachOptions& opts,
                                                    ExecIO& io) {
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
  with_pid_hint(id, pid,
                [&] { return call_json("POST", sandbox_path(id) + "/processes/" + std::to_string(pid) + "/signal", &body); });
}

Fd RemoteBackend::open_port(const std::string& id, uint16_t port) {
  return remote_ws::tunnel(dial(sandbox_path(id) + "/tcp/" + std::to_string(port)));
}

}  // namespace sbx
