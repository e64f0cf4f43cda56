#include "agent/procs.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "agent/clock.hpp"
#include "agent/pty.hpp"
#include "agent/tree.hpp"
#include "core/error.hpp"
#include "core/json_number.hpp"

namespace sbx::agent {

using nlohmann::json;

namespace {

// Where the kept logs live: a directory of the agent's on the sandbox's own
// disk (every driver gives the sandbox a writable /var/tmp; /tmp is the
// fallback). Dot-named so that `rm -rf /var/tmp/*` in the sandbox spares it.
constexpr const char* kLogDirs[] = {"/var/tmp/.sbx-agent", "/tmp/.sbx-agent"};

// Logs of an earlier agent (a persistent sandbox started again) belong to no process now.
void clear_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (auto* e = ::readdir(d))
    if (e->d_name[0] != '.') ::unlink((dir + "/" + e->d_name).c_str());
  ::closedir(d);
}

void send_chunks(const Outlet& out, int conn, uint32_t channel, proto::Type type, std::string_view data) {
  while (!data.empty()) {
    auto n = std::min(data.size(), proto::kChunk);
    out.send(conn, proto::encode(type, channel, data.substr(0, n)));
    data.remove_prefix(n);
  }
}

}  // namespace

json exit_status_json(int status) {
  int code = 0, sig = 0;
  if (WIFEXITED(status)) code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) {
    sig = WTERMSIG(status);
    code = 128 + sig;
  }
  return {{"exit_code", code}, {"signal", sig}};
}

const std::string& ProcTable::log_dir() {
  if (!dir_.empty()) return dir_;
  for (const char* dir : kLogDirs) {
    struct stat st {};
    if (::mkdir(dir, 0700) != 0 && !(errno == EEXIST && ::lstat(dir, &st) == 0 && S_ISDIR(st.st_mode))) continue;
    clear_dir(dir);
    dir_ = dir;
    return dir_;
  }
  throw Error(Errc::unavailable, "background processes need a writable /var/tmp or /tmp in the sandbox for their logs");
}

void ProcTable::start(int conn, uint32_t channel, const SpawnRequest& req) {
  std::string base = log_dir() + "/" + std::to_string(++next_log_);
  Proc p;
  p.out_log = KeptLog(base + ".out");
  p.err_log = KeptLog(base + ".err");
  int64_t start = mono_ms();
  SpawnFailure failure{};
  Spawned s = spawn(req, failure);
  if (s.pid < 0) {
    p.out_log.remove();
    p.err_log.remove();
    json body = {{"exit_code", failure.exit_code}, {"signal", 0}, {"timed_out", false},
                 {"duration_ms", mono_ms() - start}, {"error", failure.message}};
    out_.send(conn, proto::encode_json(proto::Type::exit, channel, body));
    return;
  }
  p.info.pid = s.pid;
  p.info.argv = req.argv;
  p.info.state = "running";
  p.info.started_ms = now_ms();
  p.info.tty = req.tty;
  p.start_mono_ms = start;
  // A pid the kernel handed out again: the exited process it named is forgotten.
  if (auto old = procs_.find(s.pid); old != procs_.end()) {
    exited_.erase(std::remove(exited_.begin(), exited_.end(), s.pid), exited_.end());
    old->second.out_log.remove();
    old->second.err_log.remove();
    procs_.erase(old);
  }
  p.out = std::move(s.out);
  p.err = std::move(s.err);
  p.in = std::move(s.in);
  p.term = std::move(s.term);
  p.signal_keys = s.signal_keys;
  procs_.emplace(s.pid, std::move(p));
  out_.send(conn, proto::encode_json(proto::Type::started, channel, {{"pid", s.pid}}));
}

void ProcTable::request(int conn, const proto::Frame& f) {
  switch (f.type) {
    case proto::Type::proc_list: return list(conn, f.channel);
    case proto::Type::proc_attach: return attach(conn, f.channel, f.json());
    case proto::Type::proc_signal: return signal(conn, f.channel, f.json());
    default: throw Error(Errc::protocol, "not a request about background processes");
  }
}

ProcTable::Proc& ProcTable::find(const json& req) {
  int pid = number_field(req, "pid", 0);
  auto it = procs_.find(pid);
  if (it == procs_.end()) throw Error(Errc::not_found, "no background process " + std::to_string(pid) + " in this sandbox");
  return it->second;
}

void ProcTable::list(int conn, uint32_t channel) {
  std::vector<const ProcessInfo*> all;
  for (auto& [pid, p] : procs_) all.push_back(&p.info);
  std::sort(all.begin(), all.end(), [](auto* a, auto* b) {
    return a->started_ms != b->started_ms ? a->started_ms < b->started_ms : a->pid < b->pid;
  });
  json procs = json::array();
  for (auto* info : all) procs.push_back(*info);
  out_.send(conn, proto::encode_json(proto::Type::ok, channel, {{"procs", procs}}));
}

void ProcTable::attach(int conn, uint32_t channel, const json& req) {
  Proc& p = find(req);
  Attacher a{conn, channel, req.value("follow", true), req.value("input", false)};
  int64_t tail = number_field(req, "tail_lines", int64_t{-1});
  out_.send(conn, proto::encode_json(proto::Type::started, channel, {{"pid", p.info.pid}}));
  // Replayed and registered in one step of the loop: nothing is sent twice or missed.
  send_chunks(out_, conn, channel, proto::Type::stdout_data, p.out_log.read(tail));
  send_chunks(out_, conn, channel, proto::Type::stderr_data, p.err_log.read(tail));
  if (p.info.state == "exited") {
    json body = {{"exit_code", p.info.exit_code}, {"signal", p.info.signal}, {"timed_out", false},
                 {"duration_ms", p.duration_ms}};
    out_.send(conn, proto::encode_json(proto::Type::exit, channel, body));
  } else if (!a.follow) {
    out_.send(conn, proto::encode(proto::Type::end, channel));
  } else {
    p.attachers.push_back(a);
  }
}

void ProcTable::signal(int conn, uint32_t channel, const json& req) {
  Proc& p = find(req);
  int sig = number_field(req, "signal", SIGKILL);
  if (sig <= 0 || sig >= NSIG) throw Error(Errc::invalid_argument, "no signal " + std::to_string(sig));
  if (p.info.state != "running")
    throw Error(Errc::conflict, "background process " + std::to_string(p.info.pid) + " has already exited");
  pid_t pid = p.info.pid;
  signal_tree(pid, sig);
  // kill_tree returns once the tree is dead: record the end now, so a `ps` right after sees it.
  int status;
  if (sig == SIGKILL && ::waitpid(pid, &status, WNOHANG) == pid) reaped(pid, status);
  out_.send(conn, proto::encode_json(proto::Type::ok, channel, json::object()));
}

bool ProcTable::input(int conn, const proto::Frame& f) {
  // Not a structured binding: the lambdas below use both, and clang 14
  // refuses to capture bindings (a C++20 feature it lacks).
  for (auto& entry : procs_) {
    const auto pid = entry.first;
    auto& p = entry.second;
    auto it = std::find_if(p.attachers.begin(), p.attachers.end(),
                           [&](const Attacher& a) { return a.conn == conn && a.channel == f.channel; });
    if (it == p.attachers.end()) continue;
    if (f.type == proto::Type::end) {
      p.attachers.erase(it);
      out_.send(conn, proto::encode(proto::Type::end, f.channel));
      return true;
    }
    // On an attach channel SIGSTOP and SIGCONT are the micro-VM relay's flow
    // control for a host that reads slowly (agent/relay_map.hpp), never the user's.
    if (f.type == proto::Type::signal) {
      int sig = number_field(f.json(), "signal", 0);
      if (sig == SIGSTOP || sig == SIGCONT) {
        it->paused = sig == SIGSTOP;
        return true;
      }
    }
    if (!it->input) return true;  // a `logs -f` sends nothing but end
    switch (f.type) {
      case proto::Type::stdin_data:
        feed_terminal(p.term.get(), pid, p.signal_keys, f.payload, [&](std::string_view typed) {
          p.stdin_buf += typed;
          flush_stdin(p);
        });
        break;
      case proto::Type::stdin_eof:
        // On a terminal the user's Ctrl-D is a byte; closing it would hang up the session.
        if (!p.term) {
          p.stdin_eof = true;
          flush_stdin(p);
        }
        break;
      case proto::Type::resize: {
        json size = f.json();
        if (p.term) set_window_size(p.term.get(), number_field(size, "rows", uint16_t{0}), number_field(size, "cols", uint16_t{0}));
        break;
      }
      case proto::Type::signal: signal_command(pid, p.term.get(), number_field(f.json(), "signal", SIGTERM)); break;
      default: break;
    }
    return true;
  }
  return false;
}

void ProcTable::drop_conn(int conn) {
  for (auto& [pid, p] : procs_)
    p.attachers.erase(std::remove_if(p.attachers.begin(), p.attachers.end(), [&](const Attacher& a) { return a.conn == conn; }),
                      p.attachers.end());
}

bool ProcTable::held_back(const Proc& p) const {
  return std::any_of(p.attachers.begin(), p.attachers.end(),
                     [&](const Attacher& a) { return a.paused || out_.congested(a.conn); });
}

std::vector<ProcTable::Watch> ProcTable::watches() const {
  std::vector<Watch> out;
  for (auto& [pid, p] : procs_) {
    // An attached host that stops reading holds the process back (its pipe
    // fills), as a foreground exec's host does; its output is never dropped.
    bool held = held_back(p);
    if (p.out && !held) out.push_back({p.out.get(), POLLIN, pid, 1});
    if (p.err && !held) out.push_back({p.err.get(), POLLIN, pid, 2});
    if (p.in && !p.stdin_buf.empty()) out.push_back({p.in.get(), POLLOUT, pid, 0});
  }
  return out;
}

void ProcTable::ready(const Watch& w) {
  auto it = procs_.find(w.pid);
  if (it == procs_.end()) return;
  if (w.stream == 0) flush_stdin(it->second);
  else pump(it->second, w.stream, false);
}

void ProcTable::pump(Proc& p, int stream, bool drain) {
  Fd& fd = stream == 1 ? p.out : p.err;
  KeptLog& log = stream == 1 ? p.out_log : p.err_log;
  auto type = stream == 1 ? proto::Type::stdout_data : proto::Type::stderr_data;
  char buf[proto::kChunk];
  while (fd) {
    if (held_back(p) && !drain) return;
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n > 0) {
      std::string_view data(buf, static_cast<size_t>(n));
      log.append(data);
      for (auto& a : p.attachers) out_.send(a.conn, proto::encode(type, a.channel, data));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    fd.reset();  // EOF (a terminal says EIO once its last user is gone)
  }
}

void ProcTable::flush_stdin(Proc& p) {
  while (p.in && !p.stdin_buf.empty()) {
    ssize_t n = ::write(p.in.get(), p.stdin_buf.data(), p.stdin_buf.size());
    if (n > 0) {
      p.stdin_buf.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    p.in.reset();  // the process closed its stdin
    p.stdin_buf.clear();
  }
  if (p.stdin_eof && p.stdin_buf.empty()) p.in.reset();
}

bool ProcTable::reaped(pid_t pid, int status) {
  auto it = procs_.find(pid);
  if (it == procs_.end() || it->second.info.state != "running") return false;
  Proc& p = it->second;
  // What it wrote before it ended is in the pipes still; its leftovers died with it.
  pump(p, 1, true);
  pump(p, 2, true);
  p.in.reset();
  p.term.reset();
  p.out.reset();
  p.err.reset();
  json body = exit_status_json(status);
  p.info.state = "exited";
  p.info.exit_code = body["exit_code"];
  p.info.signal = body["signal"];
  body["timed_out"] = false;
  last_exit_mono_ms_ = mono_ms();
  p.duration_ms = last_exit_mono_ms_ - p.start_mono_ms;
  body["duration_ms"] = p.duration_ms;
  for (auto& a : p.attachers) out_.send(a.conn, proto::encode_json(proto::Type::exit, a.channel, body));
  p.attachers.clear();
  exited_.push_back(pid);
  while (exited_.size() > kMaxExited) forget_oldest_exited();
  return true;
}

void ProcTable::forget_oldest_exited() {
  auto it = procs_.find(exited_.front());
  exited_.pop_front();
  if (it == procs_.end()) return;
  it->second.out_log.remove();
  it->second.err_log.remove();
  procs_.erase(it);
}

size_t ProcTable::running() const {
  return static_cast<size_t>(std::count_if(procs_.begin(), procs_.end(), [](auto& kv) { return kv.second.info.state == "running"; }));
}

int64_t ProcTable::quiet_ms() const { return last_exit_mono_ms_ < 0 ? -1 : mono_ms() - last_exit_mono_ms_; }

void ProcTable::kill_all() {
  for (auto& [pid, p] : procs_)
    if (p.info.state == "running") kill_tree(pid);
}

}  // namespace sbx::agent
