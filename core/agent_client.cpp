#include "core/agent_client.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/json_number.hpp"
#include "core/port_relay.hpp"
#include "core/protocol.hpp"
#include "core/terminal.hpp"
#include "core/unix_socket.hpp"

namespace sbx {

using nlohmann::json;

void from_json(const json& j, FileEntry& e) {
  e.path = j.value("path", "");
  e.type = j.value("type", "other");
  e.mode = number_field(j, "mode", 0u, Errc::protocol);
  e.size = number_field(j, "size", uint64_t{0}, Errc::protocol);
  e.mtime = number_field(j, "mtime", int64_t{0}, Errc::protocol);
  e.target = j.value("target", "");
}

namespace {

// The agent's JSON made into what the host wants. A field of the wrong type,
// or one missing, is the agent's fault as garbage on the stream is: a protocol
// error, not a json exception its callers do not expect (found by fuzzing).
template <typename F>
auto decode(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const json::exception& e) {
    throw Error(Errc::protocol, std::string("malformed answer from the sandbox's agent: ") + e.what());
  }
}

// The agent's error frame, turned back into the error it described.
[[noreturn]] void throw_remote(const proto::Frame& f) {
  throw decode([&] {
    json j = f.json();
    Errc c = errc_named(j.value("code", "internal")).value_or(Errc::internal);
    // The agent's message already carries strerror; keep errno only for the code mapping.
    return Error(c, j.value("message", "agent error"));
  });
}

proto::Frame must_read(int fd, Fd* passed = nullptr) {
  auto f = proto::read_frame(fd, passed);
  if (!f) throw Error(Errc::protocol, "the sandbox's agent closed the connection").set_hint("the sandbox may have died; see `sbx ls`");
  return std::move(*f);
}

}  // namespace

json AgentClient::ping(int timeout_ms, bool sync_first) {
  uint32_t ch = next_channel();
  send_all(fd_.get(), sync_first ? proto::encode_json(proto::Type::ping, ch, {{"sync", true}})
                                 : proto::encode(proto::Type::ping, ch));
  pollfd p{fd_.get(), POLLIN, 0};
  int n;
  do n = ::poll(&p, 1, timeout_ms);
  while (n < 0 && errno == EINTR);
  if (n == 0) throw Error(Errc::timeout, "the sandbox's agent did not answer within " + std::to_string(timeout_ms) + " ms");
  auto f = must_read(fd_.get());
  if (f.type == proto::Type::error) throw_remote(f);
  return f.json();
}

void AgentClient::detach(int timeout_ms) {
  uint32_t ch = next_channel();
  send_all(fd_.get(), proto::encode(proto::Type::detach, ch));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (bool answered = false;;) {
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    pollfd p{fd_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, std::max(left, 0));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(Errc::timeout, "the sandbox's agent did not let go of its host sockets within " +
                                               std::to_string(timeout_ms) + " ms");
    char c;
    // The answer first, then the end of the stream: the agent closes its listener before this connection.
    if (answered) {
      ssize_t r = ::recv(fd_.get(), &c, 1, MSG_PEEK);
      if (r == 0) return;
      if (r < 0 && errno != EINTR && errno != EAGAIN) return;  // a reset stream is closed too
    }
    auto f = must_read(fd_.get());
    if (f.type == proto::Type::error) throw_remote(f);
    answered = answered || (f.channel == ch && f.type == proto::Type::ok);
  }
}

ExecResult AgentClient::exec(const ExecRequest& req, ExecIO& io) {
  uint32_t ch = next_channel();
  send_all(fd_.get(), proto::encode_json(proto::Type::exec, ch, req));
  if (req.background) {
    // Answered by started {pid}, or by exit with the reason it could not start.
    for (;;) {
      auto f = must_read(fd_.get());
      if (f.channel != ch) continue;
      if (f.type == proto::Type::error) throw_remote(f);
      return decode([&] {
        json j = f.json();
        ExecResult res;
        if (f.type == proto::Type::started) res.pid = number_field(j, "pid", 0, Errc::protocol);
        else if (f.type == proto::Type::exit) res = j.get<ExecResult>(), io.error = j.value("error", "");
        else throw Error(Errc::protocol, "unexpected frame from the agent starting a background process");
        return res;
      });
    }
  }
  bool stdin_open = req.stdin_open;
  if (stdin_open && io.stdin_fd < 0) {
    // Fixed stdin: send it all, then EOF.
    std::string_view rest = io.stdin_data;
    while (!rest.empty()) {
      auto n = std::min(rest.size(), proto::kChunk);
      send_all(fd_.get(), proto::encode(proto::Type::stdin_data, ch, rest.substr(0, n)));
      rest.remove_prefix(n);
    }
    send_all(fd_.get(), proto::encode(proto::Type::stdin_eof, ch));
    stdin_open = false;
  }
  auto res = relay(ch, io, stdin_open, false);
  if (!res) throw Error(Errc::protocol, "the agent ended an exec without its exit");
  return *res;
}

std::optional<ExecResult> AgentClient::attach(int pid, const AttachOptions& opts, ExecIO& io) {
  uint32_t ch = next_channel();
  send_all(fd_.get(), proto::encode_json(proto::Type::proc_attach, ch,
                                         {{"pid", pid}, {"follow", opts.follow}, {"input", opts.input},
                                          {"tail_lines", opts.tail_lines}}));
  return relay(ch, io, opts.input && io.stdin_fd >= 0, true);
}

std::vector<ProcessInfo> AgentClient::processes() {
  uint32_t ch = next_channel();
  send_all(fd_.get(), proto::encode(proto::Type::proc_list, ch));
  json body = answer(ch);
  return decode([&] { return body.value("procs", json::array()).get<std::vector<ProcessInfo>>(); });
}

void AgentClient::signal_process(int pid, int sig) {
  uint32_t ch = next_channel();
  send_all(fd_.get(), proto::encode_json(proto::Type::proc_signal, ch, {{"pid", pid}, {"signal", sig}}));
  answer(ch);
}

json AgentClient::answer(uint32_t ch) {
  for (;;) {
    auto f = must_read(fd_.get());
    if (f.channel != ch) continue;
    if (f.type == proto::Type::error) throw_remote(f);
    if (f.type != proto::Type::ok) throw Error(Errc::protocol, "unexpected frame from the agent");
    return f.json();
  }
}

namespace {

// What the user typed, on its way to the agent: through the detach keys when
// they apply. Returns false once the user detached.
bool forward_input(int agent, uint32_t ch, std::string_view typed, ExecIO& io, DetachKeys& keys) {
  std::string kept;
  bool detach = io.detach_keys && keys.feed(typed, kept);
  std::string_view out = io.detach_keys ? std::string_view(kept) : typed;
  if (!out.empty()) send_all(agent, proto::encode(proto::Type::stdin_data, ch, out));
  return !detach;
}

}  // namespace

std::optional<ExecResult> AgentClient::relay(uint32_t ch, ExecIO& io, bool stdin_open, bool attach) {
  proto::Decoder dec;
  // Not zeroed: 64 KiB of memset touched 16 pages, each a page fault (a
  // trap to the nested hypervisor here), where an exec's answer fills one.
  auto buf = std::make_unique_for_overwrite<char[]>(proto::kChunk);
  bool watch_hangup = io.hangup_fd >= 0;
  DetachKeys keys;
  auto detach = [&] {
    send_all(fd_.get(), proto::encode(proto::Type::end, ch));
    stdin_open = false;
  };
  for (;;) {
    pollfd pfds[5];
    nfds_t n = 0;
    pfds[n++] = {fd_.get(), POLLIN, 0};
    int stdin_idx = -1, sig_idx = -1, hup_idx = -1, size_idx = -1;
    if (stdin_open) stdin_idx = static_cast<int>(n), pfds[n++] = {io.stdin_fd, POLLIN, 0};
    if (io.signal_fd >= 0) sig_idx = static_cast<int>(n), pfds[n++] = {io.signal_fd, POLLIN, 0};
    if (io.resize_fd >= 0) size_idx = static_cast<int>(n), pfds[n++] = {io.resize_fd, POLLIN, 0};
    if (watch_hangup) hup_idx = static_cast<int>(n), pfds[n++] = {io.hangup_fd, POLLRDHUP, 0};
    int r = ::poll(pfds, n, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw sys_error("poll", errno);
    }
    if (hup_idx >= 0 && (pfds[hup_idx].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      // Whoever asked is gone: the command dies with its whole tree (the
      // agent's shim sees to the tree); a background process merely loses its attacher.
      if (attach) detach();
      else send_all(fd_.get(), proto::encode_json(proto::Type::signal, ch, {{"signal", SIGKILL}}));
      watch_hangup = false;
    }
    if (sig_idx >= 0 && pfds[sig_idx].revents) {
      int sig = 0;
      if (::read(io.signal_fd, &sig, sizeof sig) == static_cast<ssize_t>(sizeof sig))
        send_all(fd_.get(), proto::encode_json(proto::Type::signal, ch, {{"signal", sig}}));
    }
    bool typed = stdin_idx >= 0 && pfds[stdin_idx].revents;
    if (size_idx >= 0 && (pfds[size_idx].revents || typed)) {
      if (auto ws = take_window_size(io.resize_fd))
        send_all(fd_.get(), proto::encode_json(proto::Type::resize, ch, {{"rows", ws->rows}, {"cols", ws->cols}}));
    }
    if (typed) {
      ssize_t got = ::read(io.stdin_fd, buf.get(), proto::kChunk);
      if (got > 0) {
        if (!forward_input(fd_.get(), ch, std::string_view(buf.get(), static_cast<size_t>(got)), io, keys)) detach();
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        send_all(fd_.get(), proto::encode(proto::Type::stdin_eof, ch));
        stdin_open = false;
      }
    }
    if (!pfds[0].revents) continue;
    ssize_t got = ::read(fd_.get(), buf.get(), proto::kChunk);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw sys_error("reading from the sandbox's agent", errno);
    }
    if (got == 0)
      throw Error(Errc::protocol, "the sandbox's agent went away while the command ran")
          .set_hint("the sandbox may have been removed or died; see `sbx ls`");
    dec.feed(buf.get(), static_cast<size_t>(got));
    while (auto f = dec.pop()) {
      if (f->channel != ch) continue;
      switch (f->type) {
        case proto::Type::started: break;
        case proto::Type::stdout_data:
          if (io.on_stdout) io.on_stdout(f->payload);
          break;
        case proto::Type::stderr_data:
          if (io.on_stderr) io.on_stderr(f->payload);
          break;
        case proto::Type::exit: {
          return decode([&] {
            json j = f->json();
            ExecResult res = j.get<ExecResult>();
            io.error = j.value("error", "");
            return std::optional<ExecResult>(res);
          });
        }
        case proto::Type::end: return std::nullopt;
        case proto::Type::error: throw_remote(*f);
        default: throw Error(Errc::protocol, "unexpected frame from the agent during exec");
      }
    }
  }
}

std::vector<FileEntry> AgentClient::list(const std::string& path, bool recursive) {
  uint32_t ch = next_channel();
  send_all(fd_.get(), proto::encode_json(proto::Type::list, ch, {{"path", path}, {"recursive", recursive}}));
  std::vector<FileEntry> out;
  for (;;) {
    auto f = must_read(fd_.get());
    if (f.channel != ch) continue;
    if (f.type == proto::Type::error) throw_remote(f);
    if (f.type == proto::Type::end) return out;
    if (f.type != proto::Type::entries) throw Error(Errc::protocol, "unexpected frame from the agent during list");
    json body = f.json();  // kept alive: a range-for over a temporary's member dangles
    decode([&] {
      for (auto& e : body.at("entries")) out.push_back(e.get<FileEntry>());
    });
  }
}

FileEntry AgentClient::read_file(const std::string& path, const std::function<void(std::string_view)>& sink) {
  FileEntry entry = open_read(path);
  std::string chunk;
  while (read_chunk(chunk)) sink(chunk);
  return entry;
}

FileEntry AgentClient::open_read(const std::string& path) {
  uint32_t ch = next_channel();
  send_all(fd_.get(), proto::encode_json(proto::Type::file_read, ch, {{"path", path}}));
  auto head = must_read(fd_.get());
  if (head.type == proto::Type::error) throw_remote(head);
  if (head.type != proto::Type::ok) throw Error(Errc::protocol, "unexpected frame from the agent during read");
  return decode([&] { return head.json().get<FileEntry>(); });
}

bool AgentClient::read_chunk(std::string& chunk) {
  for (;;) {
    auto f = must_read(fd_.get());
    if (f.type == proto::Type::error) throw_remote(f);
    if (f.type == proto::Type::end) {
      chunk.clear();
      return false;
    }
    if (f.type == proto::Type::data) {
      chunk = std::move(f.payload);
      return true;
    }
  }
}

void AgentClient::write_entry(const std::string& path, const FileEntry& meta,
                              const std::function<bool(std::string&)>& source) {
  uint32_t ch = next_channel();
  json req{{"path", path}, {"kind", meta.type}, {"mode", meta.mode}, {"mtime", meta.mtime}};
  if (meta.type == "symlink") req["target"] = meta.target;
  send_all(fd_.get(), proto::encode_json(proto::Type::file_write, ch, req));
  if (meta.type == "file") {
    std::string chunk;
    while (source && source(chunk)) {
      if (!chunk.empty()) send_all(fd_.get(), proto::encode(proto::Type::data, ch, chunk));
      chunk.clear();
    }
    send_all(fd_.get(), proto::encode(proto::Type::end, ch));
  }
  auto f = must_read(fd_.get());
  if (f.type == proto::Type::error) throw_remote(f);
}

Fd AgentClient::connect_port(uint16_t port, bool take_socket) {
  uint32_t ch = next_channel();
  json req{{"port", port}};
  if (take_socket) req["pass"] = true;
  send_all(fd_.get(), proto::encode_json(proto::Type::connect, ch, req));
  Fd passed;
  auto f = must_read(fd_.get(), take_socket ? &passed : nullptr);
  if (f.type == proto::Type::error) throw_remote(f);
  if (f.type != proto::Type::ok) throw Error(Errc::protocol, "unexpected frame from the agent during connect");
  if (!take_socket || !f.json().value("passed", false)) return Fd();
  // What the agent passes comes from inside the sandbox: take only what a connect makes.
  int type = 0, domain = 0;
  socklen_t tlen = sizeof type, dlen = sizeof domain;
  if (!passed || ::getsockopt(passed.get(), SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 ||
      ::getsockopt(passed.get(), SOL_SOCKET, SO_DOMAIN, &domain, &dlen) != 0 || type != SOCK_STREAM ||
      (domain != AF_INET && domain != AF_INET6))
    throw Error(Errc::protocol, "the sandbox's agent answered a connect with something that is not a TCP socket");
  return passed;
}

void AgentClient::relay_port(int local_fd) { relay_port_channel(fd_.get(), channel_, local_fd); }

}  // namespace sbx
