#include "agent/server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "agent/files.hpp"
#include "agent/out_queue.hpp"
#include "agent/procs.hpp"
#include "agent/clock.hpp"
#include "agent/pty.hpp"
#include "agent/spawn.hpp"
#include "agent/tcp_relay.hpp"
#include "agent/tree.hpp"
#include "core/error.hpp"
#include "core/json_number.hpp"
#include "core/protocol.hpp"
#include "core/unix_socket.hpp"

namespace sbx::agent {

using nlohmann::json;
namespace proto = sbx::proto;

namespace {

struct Conn {
  Fd fd;
  proto::Decoder dec;
  std::map<uint32_t, Upload> uploads;
  std::map<uint32_t, Fd> reads;  // files being sent, a chunk at a time
  OutQueue out;  // a host that stops reading holds back only its own commands (their pipes fill)
  bool dead = false;
  bool congested() const { return out.congested(); }
};

struct Exec {
  int conn_fd;
  uint32_t channel;
  pid_t pid;
  Fd out, err, in;
  std::string stdin_buf;
  bool stdin_eof = false;
  int64_t start_ms;
  int64_t deadline_ms;  // 0 = none
  bool timed_out = false;
  uint64_t oom_kills_at_start = 0;
  Fd term{};  // a tty exec's terminal (the master), for resizes and signals
  bool signal_keys = false;  // agent/pty.hpp: the agent turns typed Ctrl-C and the like into signals
};

// The kernel's count of OOM kills (/proc/vmstat oom_kill); 0 if unreadable.
uint64_t oom_kill_count() {
  int fd = ::open("/proc/vmstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  auto at = text.find("\noom_kill ");
  return at == std::string::npos ? 0 : std::strtoull(text.c_str() + at + 10, nullptr, 10);
}

class Server {
 public:
  explicit Server(const ServerOptions& o)
      : opts_(o), procs_(Outlet{[this](int fd, const std::string& frame) { send(fd, frame); },
                                [this](int fd) {
                                  auto it = conns_.find(fd);
                                  return it != conns_.end() && it->second->congested();
                                }}),
        tcp_({[this](int fd, std::string_view head, std::string_view body) { send_parts(fd, head, body); },
              [this](int fd) {
                auto it = conns_.find(fd);
                return it == conns_.end() || it->second->congested();
              },
              [this](int fd, uint32_t ch, int sock) { return splice_frame(fd, ch, sock); },
              [this](int fd, std::string_view frame, int sock) { return pass_socket(fd, frame, sock); }}) {}
  int run();

 private:
  void accept_conn();
  /// set_flags: make it non-blocking and close-on-exec (a descriptor handed over, not accepted).
  void add_conn(int fd, bool set_flags = true);
  void read_conn(Conn& c);
  void handle(Conn& c, proto::Frame& f);
  void start_exec(Conn& c, uint32_t ch, const json& req);
  void ping(int conn_fd, uint32_t ch, bool sync_first);
  void detach(Conn& c, uint32_t ch);
  void finish_detach();
  void relisten();
  void channel_input(int conn_fd, const proto::Frame& f);
  void exec_input(Exec& e, const proto::Frame& f);
  void pump(Exec& e, int fd, proto::Type type, bool drain = false);
  void end_stream(Exec& e, proto::Type type);
  void flush_stdin(Exec& e);
  void reap();
  void finish(Exec& e, int status);
  void drop_conn(int fd);
  void send(int conn_fd, const std::string& frame) { send_parts(conn_fd, frame, {}); }
  void send_parts(int conn_fd, std::string_view head, std::string_view body);
  ssize_t splice_frame(int conn_fd, uint32_t ch, int sock_fd);
  bool pass_socket(int conn_fd, std::string_view frame, int sock_fd);
  void flush(Conn& c) { c.out.flush(c.fd.get(), c.dead); }
  void feed_reads(Conn& c);
  Exec* exec_on(int conn_fd, uint32_t ch);

  ServerOptions opts_;
  Fd root_;
  Fd sigfd_;
  std::map<int, std::unique_ptr<Conn>> conns_;
  std::map<pid_t, Exec> execs_;
  ProcTable procs_;
  TcpRelay tcp_;
  int64_t started_ = mono_ms();
  bool detaching_ = false;  // a detach was answered: hosts and the listener go at the end of this round
  bool stop_ = false;
};

void Server::send_parts(int conn_fd, std::string_view head, std::string_view body) {
  auto it = conns_.find(conn_fd);
  if (it == conns_.end() || it->second->dead) return;
  it->second->out.send(conn_fd, head, body, it->second->dead);
}

ssize_t Server::splice_frame(int conn_fd, uint32_t ch, int sock_fd) {
  auto it = conns_.find(conn_fd);
  if (it == conns_.end() || it->second->dead) {
    errno = EPIPE;
    return -1;
  }
  return it->second->out.splice_frame(conn_fd, sock_fd, ch, it->second->dead);
}

bool Server::pass_socket(int conn_fd, std::string_view frame, int sock_fd) {
  auto it = conns_.find(conn_fd);
  if (it == conns_.end() || it->second->dead || it->second->out.pending()) return false;
  // The descriptor travels with the frame's first byte; a rest not taken now is queued behind it.
  ssize_t n = send_passing(conn_fd, frame, sock_fd);
  if (n <= 0) return false;  // a micro-VM's serial line (ENOTSOCK), or full for now
  if (static_cast<size_t>(n) < frame.size()) send_parts(conn_fd, frame.substr(static_cast<size_t>(n)), {});
  return true;
}

Exec* Server::exec_on(int conn_fd, uint32_t ch) {
  for (auto& [pid, e] : execs_)
    if (e.conn_fd == conn_fd && e.channel == ch) return &e;
  return nullptr;
}

void Server::add_conn(int fd, bool set_flags) {
  if (set_flags) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  auto c = std::make_unique<Conn>();
  c->fd.reset(fd);
  conns_[fd] = std::move(c);
}

// One connection per wake-up: poll reports the socket again while more wait,
// and a loop to EAGAIN is one more call per exec (a trap to gVisor's sentry).
void Server::accept_conn() {
  int fd = ::accept4(opts_.listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd >= 0) add_conn(fd, false);  // accept4 set both flags
}

void Server::read_conn(Conn& c) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(c.fd.get(), buf, sizeof buf);
    if (n > 0) {
      c.dec.feed(buf, static_cast<size_t>(n));
      // Short: the socket is empty for now, and poll says when it is not
      // (a read to EAGAIN would be one more call per request).
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    c.dead = true;  // EOF or error: the host went away
    break;
  }
  try {
    while (auto f = c.dec.pop()) {
      handle(c, *f);
      if (c.dead) break;
    }
  } catch (const Error&) {
    c.dead = true;  // garbage on the stream: nothing after it can be trusted
  }
}

void Server::handle(Conn& c, proto::Frame& f) {
  int fd = c.fd.get();
  auto fail = [&](const Error& e) {
    send(fd, proto::encode_error(f.channel, code_name(e.code()), e.sys_errno(), e.what()));
  };
  try {
    if (tcp_.owns(fd, f.channel)) return tcp_.frame(fd, f);
    switch (f.type) {
      case proto::Type::exec: start_exec(c, f.channel, f.json()); break;
      case proto::Type::connect: tcp_.open(fd, f.channel, f.json()); break;
      case proto::Type::stdin_data:
      case proto::Type::stdin_eof:
      case proto::Type::signal:
      case proto::Type::resize: channel_input(fd, f); break;
      case proto::Type::proc_list:
      case proto::Type::proc_attach:
      case proto::Type::proc_signal: procs_.request(fd, f); break;
      case proto::Type::ping: ping(fd, f.channel, !f.payload.empty() && f.json().value("sync", false)); break;
      case proto::Type::detach: detach(c, f.channel); break;
      case proto::Type::file_read:
        c.reads[f.channel] = open_file_request(root_.get(), f.channel, f.json(), [&](const std::string& b) { send(fd, b); });
        feed_reads(c);
        break;
      case proto::Type::list:
        list_request(root_.get(), f.channel, f.json(), [&](const std::string& b) { send(fd, b); });
        break;
      case proto::Type::file_write: {
        Upload up(root_.get(), f.json());
        c.uploads.erase(f.channel);
        if (up.awaits_data()) c.uploads.emplace(f.channel, std::move(up));
        else send(fd, proto::encode_json(proto::Type::ok, f.channel, json::object()));
        break;
      }
      case proto::Type::data: {
        auto it = c.uploads.find(f.channel);
        if (it == c.uploads.end()) break;  // the upload already failed and was answered
        try {
          it->second.data(f.payload);
        } catch (...) {
          c.uploads.erase(it);
          throw;
        }
        break;
      }
      case proto::Type::end: {
        if (procs_.input(fd, f)) break;  // an attacher detaches
        auto it = c.uploads.find(f.channel);
        if (it == c.uploads.end()) break;
        Upload up = std::move(it->second);
        c.uploads.erase(it);
        up.finish();
        send(fd, proto::encode_json(proto::Type::ok, f.channel, json::object()));
        break;
      }
      default:
        throw Error(Errc::protocol, "frame type " + std::to_string(static_cast<int>(f.type)) + " is not for the agent");
    }
  } catch (const Error& e) {
    fail(e);
  } catch (const json::exception& e) {
    fail(Error(Errc::invalid_argument, std::string("bad request: ") + e.what()));
  } catch (const std::exception& e) {
    fail(Error(Errc::internal, e.what()));
  }
}

void Server::ping(int conn_fd, uint32_t ch, bool sync_first) {
  // {"sync": true} (a micro-VM's snapshot, just before QEMU stops it): the guest's dirty
  // pages reach the virtual disk, so the host's copy of the disk image holds them.
  if (sync_first) ::sync();
  // Background processes count: idle gc must not take a sandbox that works,
  // and its idleness starts when the last of them ended. (A forwarded port's
  // server is always one of them or a foreground exec, so it counts too.)
  json body = {{"version", proto::kVersion},
               {"running", execs_.size() + procs_.running()},
               {"uptime_ms", mono_ms() - started_},
               {"pid", ::getpid()}};
  if (sync_first) body["synced"] = true;
  if (int64_t quiet = procs_.quiet_ms(); quiet >= 0) body["quiet_ms"] = quiet;
  send(conn_fd, proto::encode_json(proto::Type::ok, ch, body));
}

void Server::detach(Conn& c, uint32_t ch) {
  if (opts_.listen_path.empty())
    throw Error(Errc::unavailable, "this agent was not started listening on a path, so it cannot listen again");
  // Another host's exec or copy would be cut off: the host tries again when it is done.
  if (conns_.size() > 1)
    throw Error(Errc::conflict, std::to_string(conns_.size() - 1) + " other host connection(s) to the agent are open");
  send(c.fd.get(), proto::encode_json(proto::Type::ok, ch, json::object()));
  flush(c);
  detaching_ = true;
}

void Server::finish_detach() {
  detaching_ = false;
  // The listener first: the host reads its connection's end as "the agent holds no host socket".
  if (opts_.listen_fd >= 0) ::close(opts_.listen_fd);
  opts_.listen_fd = -1;
  std::vector<int> fds;
  for (auto& [fd, c] : conns_) fds.push_back(fd);
  for (int fd : fds) drop_conn(fd);
}

void Server::relisten() {
  if (opts_.listen_fd >= 0 || opts_.listen_path.empty()) return;
  try {
    opts_.listen_fd = listen_owner_only(opts_.listen_path);
    ::fcntl(opts_.listen_fd, F_SETFL, ::fcntl(opts_.listen_fd, F_GETFL) | O_NONBLOCK);
  } catch (const Error& e) {
    std::fprintf(stderr, "sbx-agent: %s (listening again at the next SIGUSR1)\n", e.what());
  }
}

void Server::channel_input(int conn_fd, const proto::Frame& f) {
  if (auto* e = exec_on(conn_fd, f.channel)) exec_input(*e, f);
  else procs_.input(conn_fd, f);  // an attach's, or for a command that already ended
}

void Server::exec_input(Exec& e, const proto::Frame& f) {
  switch (f.type) {
    case proto::Type::stdin_data:
      feed_terminal(e.term.get(), e.pid, e.signal_keys, f.payload, [&](std::string_view typed) {
        e.stdin_buf += typed;
        flush_stdin(e);
      });
      break;
    case proto::Type::stdin_eof:
      // On a terminal the user's Ctrl-D is a byte; closing it would hang up the session.
      if (!e.term) {
        e.stdin_eof = true;
        flush_stdin(e);
      }
      break;
    case proto::Type::resize: {
      json size = f.json();
      if (e.term) set_window_size(e.term.get(), number_field(size, "rows", uint16_t{0}), number_field(size, "cols", uint16_t{0}));
      break;
    }
    default:
      // The command hears the signal (its status stays 128+N); what it
      // started ends with it, as the shim sees to.
      signal_command(e.pid, e.term.get(), number_field(f.json(), "signal", SIGTERM));
  }
}

void Server::start_exec(Conn& c, uint32_t ch, const json& req) {
  if (exec_on(c.fd.get(), ch)) throw Error(Errc::conflict, "channel already has a command");
  SpawnRequest sr;
  sr.argv = req.at("cmd").get<std::vector<std::string>>();
  sr.env = req.value("env", std::map<std::string, std::string>{});
  sr.cwd = req.value("cwd", "");
  sr.stdin_open = req.value("stdin", false);
  sr.confine = opts_.confine;
  sr.tty = req.value("tty", false);
  sr.rows = number_field(req, "rows", uint16_t{0});
  sr.cols = number_field(req, "cols", uint16_t{0});
  uint64_t timeout_ms = number_field(req, "timeout_ms", uint64_t{0});
  if (req.value("background", false)) {
    if (timeout_ms) throw Error(Errc::invalid_argument, "a background process takes no timeout");
    return procs_.start(c.fd.get(), ch, sr);
  }
  int64_t start = mono_ms();
  SpawnFailure failure{};
  Spawned s = spawn(sr, failure);
  if (s.pid < 0) {
    send(c.fd.get(), proto::encode_json(proto::Type::exit, ch,
                                        {{"exit_code", failure.exit_code},
                                         {"signal", 0},
                                         {"timed_out", false},
                                         {"duration_ms", mono_ms() - start},
                                         {"error", failure.message}}));
    return;
  }
  Exec e{c.fd.get(), ch, s.pid, std::move(s.out), std::move(s.err), std::move(s.in), {}, false, start,
         timeout_ms ? start + static_cast<int64_t>(timeout_ms) : 0};
  e.term = std::move(s.term);
  e.signal_keys = s.signal_keys;
  if (opts_.report_oom) e.oom_kills_at_start = oom_kill_count();
  send(c.fd.get(), proto::encode_json(proto::Type::started, ch, {{"pid", s.pid}}));
  execs_.emplace(s.pid, std::move(e));
}

void Server::flush_stdin(Exec& e) {
  while (e.in && !e.stdin_buf.empty()) {
    ssize_t n = ::write(e.in.get(), e.stdin_buf.data(), e.stdin_buf.size());
    if (n > 0) {
      e.stdin_buf.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;  // poll will say when the pipe has room
    e.in.reset();                          // the command closed its stdin
    e.stdin_buf.clear();
  }
  if (e.stdin_eof && e.stdin_buf.empty()) e.in.reset();
}

void Server::pump(Exec& e, int fd, proto::Type type, bool drain) {
  char buf[proto::kChunk];
  for (;;) {
    // Stop at the high-water mark; the rest waits in the pipe (drain: the
    // command has exited, so the pipe holds a bounded remainder).
    auto owner = conns_.find(e.conn_fd);
    if (!drain && owner != conns_.end() && owner->second->congested()) return;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      char head[proto::kHeaderSize];
      proto::put_header(head, type, e.channel, static_cast<size_t>(n));
      send_parts(e.conn_fd, std::string_view(head, sizeof head), std::string_view(buf, static_cast<size_t>(n)));
      // Short: the pipe is empty for now (poll says when it is not). A
      // drain reads on to EOF or EAGAIN.
      if (!drain && static_cast<size_t>(n) < sizeof buf) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    end_stream(e, type);
    return;
  }
}

void Server::end_stream(Exec& e, proto::Type type) {
  // EOF: stop polling this pipe.
  if (type == proto::Type::stdout_data) e.out.reset();
  else e.err.reset();
}

void Server::feed_reads(Conn& c) {
  // Round-robin a chunk per file until the host's queue is full; the rest
  // follows when the socket drains (POLLOUT).
  int fd = c.fd.get();
  while (!c.reads.empty() && !c.congested() && !c.dead) {
    for (auto it = c.reads.begin(); it != c.reads.end() && !c.congested() && !c.dead;) {
      bool more;
      try {
        more = send_file_chunk(it->second.get(), it->first, [&](const std::string& b) { send(fd, b); });
      } catch (const Error& e) {
        send(fd, proto::encode_error(it->first, code_name(e.code()), e.sys_errno(), e.what()));
        more = false;
      }
      it = more ? std::next(it) : c.reads.erase(it);
    }
  }
}

void Server::finish(Exec& e, int status) {
  // Whatever the command wrote before it exited is already in the pipes: drain it.
  if (e.out) pump(e, e.out.get(), proto::Type::stdout_data, true);
  if (e.err) pump(e, e.err.get(), proto::Type::stderr_data, true);
  json result = exit_status_json(status);
  result["timed_out"] = e.timed_out;
  result["duration_ms"] = mono_ms() - e.start_ms;
  if (opts_.report_oom && result["signal"] == SIGKILL && !e.timed_out && oom_kill_count() > e.oom_kills_at_start)
    result["oom_killed"] = true;
  send(e.conn_fd, proto::encode_json(proto::Type::exit, e.channel, result));
  // What the command left running died with it in its shim (spawn.hpp); use
  // a background exec to keep a process.
}

void Server::reap() {
  // Up to eight at a call; fewer means none is left pending (no read to EAGAIN).
  signalfd_siginfo si[8];
  for (;;) {
    ssize_t n = ::read(sigfd_.get(), si, sizeof si);
    if (n <= 0) break;
    size_t got = static_cast<size_t>(n) / sizeof si[0];
    for (size_t i = 0; i < got; ++i) {
      if (si[i].ssi_signo == SIGTERM || si[i].ssi_signo == SIGINT) stop_ = true;
      if (si[i].ssi_signo == SIGUSR1) relisten();
    }
    if (got < std::size(si)) break;
  }
  for (;;) {
    int status;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    auto it = execs_.find(pid);
    if (it == execs_.end()) {
      procs_.reaped(pid, status);  // a background process, or an orphan re-parented to us: reaped
      continue;
    }
    finish(it->second, status);
    execs_.erase(it);
  }
}

void Server::drop_conn(int fd) {
  // A host that vanished mid-exec cannot read the result: stop its commands.
  for (auto& [pid, e] : execs_) {
    if (e.conn_fd != fd) continue;
    kill_tree(pid);
    e.conn_fd = -1;
  }
  procs_.drop_conn(fd);  // background processes outlive their host
  tcp_.drop_conn(fd);
  conns_.erase(fd);
}

int Server::run() {
  reset_signal_dispositions(opts_.fresh_signals);
  root_.reset(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGPIPE);
  sigaddset(&mask, SIGUSR1);  // after a detach: listen again (a restored checkpoint's agent)
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  sigfd_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!sigfd_) throw sys_error("signalfd", errno);
  if (opts_.listen_fd >= 0) ::fcntl(opts_.listen_fd, F_SETFL, ::fcntl(opts_.listen_fd, F_GETFL) | O_NONBLOCK);
  for (int fd : opts_.stream_fds) add_conn(fd);

  std::vector<pollfd> pfds;
  // What each pollfd is for: 0 signal, 1 listen, 2 conn, 3 stdout, 4 stderr, 5 stdin,
  // 6 a background process's (the index into watches), 7 a TCP connection.
  std::vector<std::pair<int, pid_t>> what;
  std::vector<ProcTable::Watch> watches;
  while (!stop_) {
    pfds.clear();
    what.clear();
    pfds.push_back({sigfd_.get(), POLLIN, 0});
    what.emplace_back(0, 0);
    if (opts_.listen_fd >= 0) {
      pfds.push_back({opts_.listen_fd, POLLIN, 0});
      what.emplace_back(1, 0);
    }
    for (auto& [fd, c] : conns_) {
      // A host whose TCP data the sandbox's servers have not taken is not read until they do.
      short ev = tcp_.holds_input(fd) ? 0 : POLLIN;
      if (c->out.pending()) ev |= POLLOUT;
      pfds.push_back({fd, ev, 0});
      what.emplace_back(2, 0);
    }
    tcp_.add_polls(pfds);
    what.resize(pfds.size(), {7, 0});
    int64_t now = mono_ms(), next_deadline = -1;
    for (auto& [pid, e] : execs_) {
      // A command whose host is not reading waits on its own full pipe.
      auto owner = conns_.find(e.conn_fd);
      bool held = owner != conns_.end() && owner->second->congested();
      if (e.out && !held) pfds.push_back({e.out.get(), POLLIN, 0}), what.emplace_back(3, pid);
      if (e.err && !held) pfds.push_back({e.err.get(), POLLIN, 0}), what.emplace_back(4, pid);
      if (e.in && !e.stdin_buf.empty()) pfds.push_back({e.in.get(), POLLOUT, 0}), what.emplace_back(5, pid);
      if (e.deadline_ms && !e.timed_out) {
        if (e.deadline_ms <= now) {
          e.timed_out = true;
          kill_tree(pid);
        } else if (next_deadline < 0 || e.deadline_ms < next_deadline) {
          next_deadline = e.deadline_ms;
        }
      }
    }
    watches = procs_.watches();
    for (size_t i = 0; i < watches.size(); ++i)
      pfds.push_back({watches[i].fd, watches[i].events, 0}), what.emplace_back(6, static_cast<pid_t>(i));
    int timeout = next_deadline < 0 ? -1 : static_cast<int>(next_deadline - now);
    int n = ::poll(pfds.data(), pfds.size(), timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw sys_error("poll", errno);
    }
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!pfds[i].revents) continue;
      auto [kind, pid] = what[i];
      if (kind == 0) reap();
      else if (kind == 1) accept_conn();
      else if (kind == 2) {
        auto it = conns_.find(pfds[i].fd);
        if (it == conns_.end()) continue;
        if (pfds[i].revents & POLLOUT) flush(*it->second);
        if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_conn(*it->second);
        if (!it->second->reads.empty()) feed_reads(*it->second);
      } else if (kind == 6) {
        procs_.ready(watches[static_cast<size_t>(pid)]);
      } else if (kind == 7) {
        tcp_.ready(pfds[i].fd, pfds[i].revents);
      } else {
        auto it = execs_.find(pid);
        if (it == execs_.end()) continue;
        Exec& e = it->second;
        if (kind == 5) {
          flush_stdin(e);
          continue;
        }
        Fd& stream = kind == 3 ? e.out : e.err;
        auto type = kind == 3 ? proto::Type::stdout_data : proto::Type::stderr_data;
        // A hang-up without POLLIN is a pipe (or terminal) that is empty and
        // has no writer left: EOF, known without a read that says so.
        if (!stream) continue;
        if (pfds[i].revents & POLLIN) pump(e, stream.get(), type);
        else end_stream(e, type);
      }
    }
    std::vector<int> dead;
    for (auto& [fd, c] : conns_)
      if (c->dead) dead.push_back(fd);
    for (int fd : dead) drop_conn(fd);
    if (detaching_) finish_detach();
    if (opts_.exit_when_streams_close && opts_.listen_fd < 0 && conns_.empty()) break;
  }
  for (auto& [pid, e] : execs_) kill_tree(pid);
  // The agent stops (or, on a serial port, its one host left): the sandbox goes with it.
  procs_.kill_all();
  return 0;
}

}  // namespace

int listen_owner_only(const std::string& path) {
  // Only root (the host's, through the shared directory) may talk to the agent;
  // the agent is single-threaded, so the umask can make the socket 0600 from birth.
  mode_t old = ::umask(0177);
  try {
    Fd s = listen_unix(path);
    ::umask(old);
    return s.release();
  } catch (...) {
    ::umask(old);
    throw;
  }
}

int serve(const ServerOptions& opts) {
  Server s(opts);
  return s.run();
}

}  // namespace sbx::agent
