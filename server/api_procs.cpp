// Background processes through the API: start detached (POST .../exec with
// "background"), list, logs (NDJSON like the exec stream), signal. Attach is
// a WebSocket (api_ws.cpp).
#include <signal.h>

#include "core/error.hpp"
#include "core/json_number.hpp"
#include "core/wire.hpp"
#include "server/api_internal.hpp"
#include "server/exec_stream.hpp"

namespace sbx::server {

using nlohmann::json;

int signal_number(const json& v) {
  static const std::pair<const char*, int> names[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},   {"USR1", SIGUSR1},
      {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP},   {"TSTP", SIGTSTP},
      {"ALRM", SIGALRM}, {"PIPE", SIGPIPE}, {"WINCH", SIGWINCH}};
  // Range-checked first: 2^32+9 cast to an int would be SIGKILL.
  if (auto n = json_number<int>(v); n && v.is_number_integer() && *n > 0 && *n < 65) return *n;
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s.rfind("SIG", 0) == 0) s = s.substr(3);
    for (auto& [n, sig] : names)
      if (s == n) return sig;
  }
  throw Error(Errc::invalid_argument, "unknown signal " + v.dump().substr(0, 40))
      .set_hint("a name such as \"INT\", \"TERM\", \"KILL\", or a number 1-64");
}

int parse_count(const std::string& text, const char* name) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
    throw Error(Errc::invalid_argument, std::string(name) + " must be a whole number, not '" + text.substr(0, 40) + "'");
  return std::stoi(text);
}

void require_process(Backend& backend, const std::string& id, int pid) {
  for (auto& p : backend.processes(id))
    if (p.pid == pid) return;
  throw Error(Errc::not_found, "no background process " + std::to_string(pid) + " in sandbox " + id)
      .set_hint("GET /v1/sandboxes/{id}/processes lists them");
}

HttpResponse Api::background(const HttpRequest& req, const ExecBody& eb, const SandboxRecord* rec) {
  if (!rec)
    throw Error(Errc::invalid_argument, "a one-shot cannot run in the background: its sandbox ends with the call")
        .set_hint("create a sandbox, then POST /v1/sandboxes/{id}/exec with \"background\": true");
  if (!eb.stdin_data.empty())
    throw Error(Errc::invalid_argument, "a background process takes its input through attach, not in the request")
        .set_hint("GET /v1/sandboxes/{id}/processes/{pid}/attach (a WebSocket)");
  auto slot = reserve_exec(req.key->name);  // only while it starts
  ExecIO io;
  ExecResult r = backend_.exec(rec->id, eb.req, io);
  if (!io.error.empty()) throw Error(Errc::invalid_argument, "the command did not start: " + io.error);
  // An agent of before background processes runs the command to its end and names no pid.
  if (r.pid <= 0) throw Error(Errc::unavailable, "background processes are not supported by this sandbox's agent");
  return json_response(202, {{"pid", r.pid}});
}

HttpResponse Api::processes_route(const HttpRequest& req, const SandboxRecord& rec, const std::string& sub) {
  if (sub == "processes") {
    json arr = json::array();
    for (auto& p : backend_.processes(rec.id)) arr.push_back(p);
    return json_response(200, {{"processes", arr}});
  }
  // processes/{pid}/{logs,attach,signal}
  std::string rest = sub.substr(std::string("processes/").size());
  size_t slash = rest.find('/');
  int pid = parse_count(rest.substr(0, slash), "the process id");
  std::string what = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (what == "attach") return attach_ws(req, rec, pid);
  if (what == "signal") {
    json body = parse_body(req);
    reject_unknown_fields(body, {"signal"}, "signal request");
    int sig = body.contains("signal") ? signal_number(body["signal"]) : SIGTERM;
    backend_.signal_process(rec.id, pid, sig);
    HttpResponse r;
    r.status = 204;
    r.content_type.clear();
    return r;
  }
  if (what != "logs") throw Error(Errc::not_found, "no such endpoint: " + req.method + " " + req.path.substr(0, 200));
  AttachOptions opts;
  opts.input = false;
  opts.follow = query(req, "follow") && *query(req, "follow") != "0" && *query(req, "follow") != "false";
  if (auto t = query(req, "tail")) opts.tail_lines = parse_count(*t, "tail");
  require_process(backend_, rec.id, pid);
  // Detached: a reader going away leaves the process running (only its follower stops).
  auto stream = std::make_shared<ExecStream>(in_flight_, req.client_fd, true);
  std::string id = rec.id;
  int client = req.client_fd;
  stream->start([this, id, pid, opts, client](ExecIO& io) -> json {
    io.signal_fd = -1;      // a kill of the stream must never reach the process
    io.hangup_fd = client;  // the reader hanging up ends the follow
    auto r = backend_.attach(id, pid, opts, io);
    return r ? json{{"exit", *r}} : json{{"end", true}};
  });
  return ndjson_response(stream);
}

}  // namespace sbx::server
