// Running commands through the API: our argv exec (buffered or NDJSON),
// /v1/run's one-shot, and the platform's shell-string /commands.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/json_number.hpp"
#include "core/shell_subset.hpp"
#include "core/units.hpp"
#include "core/wire.hpp"
#include "server/api_internal.hpp"
#include "server/exec_stream.hpp"

namespace sbx::server {

using nlohmann::json;

namespace {

std::pair<Fd, Fd> make_pipe(int flags) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | flags) != 0) throw sys_error("pipe", errno);
  return {Fd(p[0]), Fd(p[1])};
}

void send_kill(int sig_w) {
  int sig = SIGKILL;
  ssize_t ignored = ::write(sig_w, &sig, sizeof sig);
  (void)ignored;
}

// Writes to the stream's pipe; a reader that went away turns into false.
bool write_line(int fd, const std::string& line) {
  try {
    write_all(fd, line);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Text the platform's client can always read as a string: bytes that are not
// UTF-8 become U+FFFD (the exact bytes travel beside it in *_b64).
std::string lossy_utf8(const std::string& s) {
  if (valid_utf8(s)) return s;
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0xC0) len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (c < 0x80 || (i + len <= s.size() && valid_utf8(std::string_view(s).substr(i, len)))) {
      out.append(s, i, c < 0x80 ? 1 : len);
      i += c < 0x80 ? 1 : len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- ExecStream

ExecStream::ExecStream(std::atomic<int>& in_flight, int client_fd, bool detach)
    : in_flight_(in_flight), client_fd_(client_fd), detach_(detach) {
  std::tie(out_r_, out_w_) = make_pipe(0);
  std::tie(sig_r_, sig_w_) = make_pipe(O_NONBLOCK);
}

void ExecStream::start(std::function<json(ExecIO&)> work) {
  auto self = shared_from_this();
  ++in_flight_;
  std::thread([self, work = std::move(work)]() mutable {
    ExecIO io;
    io.signal_fd = self->sig_r_.get();
    int w = self->out_w_.get();
    io.on_stdout = [w](std::string_view d) {
      json j;
      put_output(j, "stdout", std::string(d));
      write_line(w, json_line(j));
    };
    io.on_stderr = [w](std::string_view d) {
      json j;
      put_output(j, "stderr", std::string(d));
      write_line(w, json_line(j));
    };
    json exit_line;
    try {
      exit_line = work(io);
    } catch (const Error& e) {
      exit_line = {{"error", error_json(e)}};
    }
    write_line(w, json_line(exit_line));
    // What the work holds (its exec slot) goes first: once in_flight_ is
    // down the Api may be gone (a drain waits for just that), so nothing of it
    // may be touched after.
    work = nullptr;
    self->out_w_.reset();  // EOF for the reader
    --self->in_flight_;
  }).detach();
}

ssize_t ExecStream::read(char* buf, size_t max) {
  for (;;) {
    pollfd p[2] = {{out_r_.get(), POLLIN, 0}, {client_fd_, POLLRDHUP, 0}};
    int n = ::poll(p, client_fd_ >= 0 ? 2 : 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (client_fd_ >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) return -1;
    if (p[0].revents) {
      ssize_t got = ::read(out_r_.get(), buf, max);
      if (got < 0 && errno == EINTR) continue;
      return got < 0 ? -1 : got;
    }
  }
}

void ExecStream::cancel() {
  // Without detach, a vanished client's command dies with its whole tree.
  if (!detach_) interrupt();
  // Closing our end turns the worker's next write into EPIPE instead of a block.
  out_r_.reset();
}

void ExecStream::interrupt() { send_kill(sig_w_.get()); }

// ---------------------------------------------------------------- request bodies

namespace {

uint64_t timeout_ms_of(const json& v, const char* field, const Limits& lim) {
  double t = v.get<double>();
  if (!(t > 0) || t > static_cast<double>(lim.max_timeout_s))
    throw Error(Errc::invalid_argument, std::string(field) + " must be between 0 and " + std::to_string(lim.max_timeout_s));
  return static_cast<uint64_t>(t * 1000);
}

void check_sizes(const ExecRequest& req, const Limits& lim) {
  size_t bytes = 0;
  for (auto& a : req.argv) bytes += a.size() + 1;
  if (req.argv.size() > lim.max_argv_items || bytes > lim.max_argv_bytes)
    throw Error(Errc::invalid_argument, "the command line is too long (limit " + std::to_string(lim.max_argv_items) +
                                            " arguments, " + format_size(lim.max_argv_bytes) + ")");
  bytes = 0;
  for (auto& [k, v] : req.env) bytes += k.size() + v.size() + 2;
  if (req.env.size() > lim.max_env_items || bytes > lim.max_env_bytes)
    throw Error(Errc::invalid_argument, "the environment is too large (limit " + std::to_string(lim.max_env_items) +
                                            " variables, " + format_size(lim.max_env_bytes) + ")");
}

}  // namespace

uint16_t window_dimension(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (auto n = json_number<uint16_t>(*it)) return *n;
  throw Error(Errc::invalid_argument, std::string(key) + " must be a number from 0 to 65535");
}

ExecBody parse_exec(const json& j, const Limits& lim, bool allow_sandbox_field) {
  std::initializer_list<const char*> fields = {"cmd",    "env", "cwd",  "stdin", "stdin_b64", "timeout_s",
                                               "detach", "tty", "rows", "cols",  "background", "stdin_open"};
  std::initializer_list<const char*> run_fields = {"cmd",    "env", "cwd",  "stdin", "stdin_b64",  "timeout_s",
                                                   "detach", "tty", "rows", "cols",  "background", "stdin_open", "sandbox"};
  reject_unknown_fields(j, allow_sandbox_field ? run_fields : fields, "exec request");
  ExecBody b;
  try {
    b.req.argv = j.at("cmd").get<std::vector<std::string>>();
    if (j.contains("env")) b.req.env = j["env"].get<std::map<std::string, std::string>>();
    b.req.cwd = j.value("cwd", "");
    b.detach = j.value("detach", false);
    if (j.contains("stdin")) b.stdin_data = j["stdin"].get<std::string>();
    if (j.contains("stdin_b64")) b.stdin_data = base64_decode(j["stdin_b64"].get<std::string>());
    if (j.contains("timeout_s")) b.req.timeout_ms = timeout_ms_of(j["timeout_s"], "timeout_s", lim);
    b.req.tty = j.value("tty", false);
    b.req.rows = window_dimension(j, "rows");
    b.req.cols = window_dimension(j, "cols");
    b.req.background = j.value("background", false);
    // A background process may keep a stdin pipe for attach without any data up front.
    b.req.stdin_open = !b.stdin_data.empty() || (b.req.background && j.value("stdin_open", false));
  } catch (const json::exception&) {
    throw Error(Errc::invalid_argument, "exec request: 'cmd' must be an array of strings; env an object of strings; "
                                        "tty and background booleans; rows and cols numbers up to 65535")
        .set_hint("{\"cmd\": [\"python3\", \"-c\", \"print(1)\"]}");
  }
  if (b.req.argv.empty()) throw Error(Errc::invalid_argument, "exec request: 'cmd' is empty");
  check_sizes(b.req, lim);
  return b;
}

namespace {

// `python` is Python 3 wherever Python is (Debian bases ship only python3).
constexpr const char* kShellPrelude = "command -v python >/dev/null 2>&1 || python() { python3 \"$@\"; }\n";

}  // namespace

// ---------------------------------------------------------------- routes

Api::Buffered Api::run_buffered(const HttpRequest& req, bool detach, const std::function<json(ExecIO&)>& run) {
  Buffered b;
  size_t cap = limits_.max_buffered_output;
  auto keep = [&](std::string& into, std::string_view d) {
    size_t room = cap > into.size() ? cap - into.size() : 0;
    if (d.size() > room) b.truncated = true;
    into.append(d.substr(0, room));
  };
  ExecIO io;
  // The client hanging up kills the command, as for a stream (detach keeps it running).
  io.hangup_fd = detach ? -1 : req.client_fd;
  io.on_stdout = [&](std::string_view d) { keep(b.out, d); };
  io.on_stderr = [&](std::string_view d) { keep(b.err, d); };
  b.exit = run(io)["exit"];
  return b;
}

SandboxSpec Api::one_shot_spec(const json& body, const ApiKey& key) const {
  json sandbox = body.value("sandbox", json::object());
  SandboxSpec spec;
  try {
    spec = sandbox.get<SandboxSpec>();
  } catch (const json::exception& e) {
    throw Error(Errc::invalid_argument, std::string("sandbox spec: ") + e.what());
  }
  return manager_spec(std::move(spec), sandbox, key);
}

json Api::run_command(const ExecBody& eb, const SandboxSpec& spec, const std::string& id, const std::string& key_name,
                      ExecIO& io) {
  auto t0 = std::chrono::steady_clock::now();
  bool one_shot = id.empty();
  if (!eb.stdin_data.empty()) io.stdin_data = eb.stdin_data;
  ExecResult r;
  try {
    if (one_shot) {
      // run_once ties the sandbox to this process: were the manager killed
      // mid-call, the next gc (a restarted manager's first) collects it.
      auto sandbox_slot = reserve_sandbox(key_name);
      OneShotResult once = backend_.run_once(spec, eb.req, io);
      if (!once.cleanup_error.empty()) metrics_.failure("remove");
      r = once.exec;
    } else {
      r = backend_.exec(id, eb.req, io);
    }
  } catch (...) {
    metrics_.failure("exec");
    throw;
  }
  metrics_.exec_latency(one_shot ? spec.driver : "exec", seconds_since(t0));
  json exit = r;
  exit["error"] = io.error;
  return {{"exit", exit}};
}

void require_running(const SandboxRecord& rec) {
  // A paused sandbox counts: the backend resumes it for whatever reaches its agent.
  if (rec.state != SandboxState::running && rec.state != SandboxState::paused)
    throw Error(Errc::conflict, "sandbox " + rec.id + " is " + std::string(state_name(rec.state)))
        .set_hint(rec.error.empty() ? "remove it and create another" : rec.error);
}

HttpResponse Api::exec(const HttpRequest& req, const SandboxRecord* rec) {
  bool one_shot = rec == nullptr;
  json body = parse_body(req);
  ExecBody eb = parse_exec(body, limits_, one_shot);
  // A background process's terminal is the agent's: nothing streams in this call.
  if (eb.req.tty && !eb.req.background)
    throw Error(Errc::invalid_argument, "exec request: a terminal (tty) needs the WebSocket route")
        .set_hint(one_shot ? "GET /v1/run/ws" : "GET /v1/sandboxes/{id}/exec/ws (docs/api.md)");
  SandboxSpec spec;
  if (one_shot) spec = one_shot_spec(body, *req.key);
  else require_running(*rec);
  if (eb.req.background) return background(req, eb, one_shot ? nullptr : rec);
  auto slot = reserve_exec(req.key->name);
  std::string key_name = req.key->name;
  std::string id_in = one_shot ? "" : rec->id;
  // The work shared by both answers: (create,) exec, (destroy); returns the exit record.
  auto run = [this, eb, spec, id_in, key_name, slot](ExecIO& io) -> json {
    return run_command(eb, spec, id_in, key_name, io);
  };
  if (req.accept.find("application/x-ndjson") != std::string::npos) {
    auto stream = std::make_shared<ExecStream>(in_flight_, req.client_fd, eb.detach);
    stream->start(run);
    return ndjson_response(stream);
  }
  Buffered b = run_buffered(req, eb.detach, run);
  put_output(b.exit, "stdout", b.out);
  put_output(b.exit, "stderr", b.err);
  if (b.truncated) b.exit["truncated"] = true;
  return json_response(200, b.exit);
}

HttpResponse Api::commands(const HttpRequest& req, const SandboxRecord& rec) {
  json body = parse_body(req);
  reject_unknown_fields(body, {"command", "timeout"}, "commands request");
  if (!body.contains("command") || !body["command"].is_string() || body["command"].get<std::string>().empty())
    throw Error(Errc::invalid_argument, "commands request: 'command' must be a non-empty shell string")
        .set_hint("{\"command\": \"export X=1; python /work/run.py\", \"timeout\": 30}");
  require_running(rec);
  std::string command = body["command"].get<std::string>();
  ExecRequest er;
  if (body.contains("timeout") && !body["timeout"].is_null()) {
    if (!body["timeout"].is_number()) throw Error(Errc::invalid_argument, "timeout must be a number of seconds");
    er.timeout_ms = timeout_ms_of(body["timeout"], "timeout", limits_);
  }
  er.argv = {"/bin/sh", "-c", kShellPrelude + command};
  check_sizes(er, limits_);
  auto slot = reserve_exec(req.key->name);
  auto t0 = std::chrono::steady_clock::now();
  Buffered b = run_buffered(req, false, [&](ExecIO& io) -> json {
    ExecResult r;
    try {
      r = rec.spec.driver == "deno" ? run_shell_subset(rec, command, er.timeout_ms, io) : backend_.exec(rec.id, er, io);
    } catch (...) {
      metrics_.failure("exec");
      throw;
    }
    json exit = r;
    exit["error"] = io.error;
    return {{"exit", exit}};
  });
  metrics_.exec_latency("commands", seconds_since(t0));
  json out = b.exit;
  // The platform's answer: stdout/stderr always strings; exact bytes beside them when they are not text.
  out["stdout"] = lossy_utf8(b.out);
  out["stderr"] = lossy_utf8(b.err);
  if (!valid_utf8(b.out)) out["stdout_b64"] = base64_encode(b.out);
  if (!valid_utf8(b.err)) out["stderr_b64"] = base64_encode(b.err);
  if (b.truncated) out["truncated"] = true;
  return json_response(200, out);
}

ExecResult Api::run_shell_subset(const SandboxRecord& rec, const std::string& command, uint64_t timeout_ms,
                                 ExecIO& io) {
  auto steps = parse_shell_subset(command);
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::milliseconds(timeout_ms);
  ExecResult last;
  struct Stop {};  // a step timed out or was killed: the rest of the line does not run
  ShellStart start;
  start.env = rec.spec.env;
  start.workdir = rec.spec.workdir;
  try {
    last.exit_code = sbx::run_shell_subset(steps, [&](const ShellCommand& c) {
      ExecRequest er;
      er.argv = c.argv;
      er.env = c.env;
      er.cwd = c.cwd;
      if (timeout_ms) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
        er.timeout_ms = static_cast<uint64_t>(std::max<int64_t>(left, 1));
      }
      io.error.clear();
      last = backend_.exec(rec.id, er, io);
      // As sh says it: a command that did not start is a line on stderr and its status, and the line goes on.
      if (!io.error.empty() && io.on_stderr) io.on_stderr("sh: " + io.error + "\n");
      io.error.clear();
      if (last.timed_out || last.signal == SIGKILL) throw Stop{};
      return last.exit_code;
    }, start);
  } catch (const Stop&) {
  }
  return last;
}

}  // namespace sbx::server
