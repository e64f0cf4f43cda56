// The API's WebSocket routes (docs/api.md, "Interactive sessions"): exec and
// one-shot with live stdin or a terminal, attach to a background process, a
// raw TCP tunnel to a sandbox port, and the short-lived tokens browsers use.
//
// Messages: binary ones carry bytes, their first byte naming the stream
// (0 stdin, 1 stdout, 2 stderr); text ones are JSON: the client's first
// message (the exec body), {"eof":true}, {"resize":{"rows":R,"cols":C}},
// {"signal":"INT"}, {"detach":true}; the server's last one is {"exit":{...}},
// {"error":{...}} or {"detached":true}, followed by a close frame.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/json_number.hpp"
#include "core/websocket.hpp"
#include "core/wire.hpp"
#include "server/api_internal.hpp"

namespace sbx::server {

using nlohmann::json;

namespace {

constexpr char kStdin = 0, kStdout = 1, kStderr = 2;
constexpr int64_t kDefaultTokenTtlS = 60, kMaxTokenTtlS = 3600;

std::pair<Fd, Fd> make_pipe(int flags) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | flags) != 0) throw sys_error("pipe", errno);
  return {Fd(p[0]), Fd(p[1])};
}

void write_quietly(int fd, const void* data, size_t n) {
  ssize_t ignored = ::write(fd, data, n);  // a full self-pipe drops the event: one is pending anyway
  (void)ignored;
}

// A command's input from the client: stdin through a pipe, signals and
// window sizes through self-pipes (ExecIO's), and a hangup socket whose
// closing tells the backend the client is gone (an exec dies with its tree,
// an attach detaches).
class CommandInput {
 public:
  explicit CommandInput(ws::Connection& c) {
    std::tie(stdin_r_, stdin_w_) = make_pipe(0);
    std::tie(sig_r_, sig_w_) = make_pipe(O_NONBLOCK);
    std::tie(resize_r_, resize_w_) = make_pipe(O_NONBLOCK);
    int sp[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) throw sys_error("socketpair", errno);
    hup_watched_.reset(sp[0]);
    hup_held_.reset(sp[1]);
    feeder_.emplace(c, stdin_w_.get(), [this] { stdin_w_.reset(); });
  }
  ~CommandInput() { finish(); }

  void bind(ExecIO& io) const {
    io.stdin_fd = stdin_r_.get();
    io.signal_fd = sig_r_.get();
    io.resize_fd = resize_r_.get();
    io.hangup_fd = hup_watched_.get();
  }
  /// One client message after the first; false pauses reading. Throws invalid_argument for a bad one.
  bool take(const ws::Message& m) {
    if (m.kind == ws::Kind::binary) {
      if (m.data.empty() || m.data[0] != kStdin)
        throw Error(Errc::invalid_argument, "a binary message from the client must start with byte 0 (stdin)");
      return feeder_->push(m.data.substr(1));
    }
    json j = json::parse(m.data, nullptr, false);
    if (!j.is_object()) throw Error(Errc::invalid_argument, "a text message must be a JSON object");
    // nlohmann's exceptions ({"eof":"x"}) are a bad message too: out of run(), the worker still joinable, they were std::terminate.
    try {
      if (j.value("eof", false)) feeder_->eof();
      if (j.contains("signal")) {
        int sig = signal_number(j["signal"]);
        write_quietly(sig_w_.get(), &sig, sizeof sig);
      }
      if (auto r = j.find("resize"); r != j.end()) {
        WindowSize w{window_dimension(*r, "rows"), window_dimension(*r, "cols")};
        if (w.rows && w.cols) write_quietly(resize_w_.get(), &w, sizeof w);
      }
      if (j.value("detach", false)) hang_up();
    } catch (const json::exception&) {
      throw Error(Errc::invalid_argument, "a text message's eof and detach must be booleans");
    }
    return true;
  }
  /// The client is gone (or detached, or the manager drains): thread-safe, once.
  void hang_up() {
    std::call_once(hung_up_, [this] { ::shutdown(hup_held_.get(), SHUT_RDWR); });
  }
  /// After the command: unblocks and joins the feeder.
  void finish() {
    stdin_r_.reset();  // a feeder blocked on a full pipe gets EPIPE
    if (feeder_) feeder_->stop();
  }

 private:
  Fd stdin_r_, stdin_w_, sig_r_, sig_w_, resize_r_, resize_w_, hup_watched_, hup_held_;
  std::once_flag hung_up_;
  std::optional<ws::Feeder> feeder_;  // last: stopped before the fds it writes close
};

std::string framed(char stream, std::string_view data) {
  std::string m(1, stream);
  m.append(data);
  return m;
}

uint16_t close_code_for(const Error& e) {
  return http_status(e.code()) < 500 ? ws::kPolicy : ws::kServerError;
}

void require_websocket(const HttpRequest& req) {
  if (req.websocket_key.empty())
    throw Error(Errc::invalid_argument, req.path.substr(0, 200) + " is a WebSocket route (RFC 6455)")
        .set_hint("connect with a WebSocket client (Upgrade: websocket, Sec-WebSocket-Version: 13); see docs/api.md");
}

HttpResponse switching(std::function<void(ws::Connection&)> session) {
  HttpResponse r;
  r.status = 101;
  r.content_type.clear();
  r.websocket = std::move(session);
  return r;
}

}  // namespace

std::shared_ptr<void> Api::track_session(std::function<void()>* cancel) {
  ++in_flight_;
  std::lock_guard lock(mu_);
  sessions_.push_back(cancel);
  return std::shared_ptr<void>(nullptr, [this, cancel](void*) {
    std::lock_guard l(mu_);
    std::erase(sessions_, cancel);
    --in_flight_;
  });
}

void Api::interactive(ws::Connection& c, bool first_message, const std::function<json(const json&, ExecIO&)>& work) {
  CommandInput input(c);
  std::atomic<bool> started{false}, finished{false}, cancelled{false};
  std::function<void()> cancel = [&] {
    cancelled = true;
    input.hang_up();
    if (!started) c.close(ws::kGoingAway, "the manager is shutting down");
  };
  auto tracked = track_session(&cancel);
  std::thread worker;
  auto start = [&](json first) {
    started = true;
    worker = std::thread([&, first = std::move(first)] {
      ExecIO io;
      input.bind(io);
      io.on_stdout = [&c](std::string_view d) { c.send(ws::Kind::binary, framed(kStdout, d)); };
      io.on_stderr = [&c](std::string_view d) { c.send(ws::Kind::binary, framed(kStderr, d)); };
      json last;
      uint16_t code = ws::kNormalClose;
      // Anything the work throws ends this session with its error: escaping the thread
      // would be std::terminate, the whole manager gone.
      auto fail = [&](const Error& e) {
        last = {{"error", error_json(e)}};
        code = close_code_for(e);
      };
      try {
        last = work(first, io);
      } catch (const Error& e) {
        fail(e);
      } catch (const std::exception& e) {
        fail(Error(Errc::internal, e.what()));
      }
      finished = true;
      c.send(ws::Kind::text, last.dump(-1, ' ', false, json::error_handler_t::replace));
      c.close(cancelled ? ws::kGoingAway : code);
    });
  };
  if (!first_message) start(json::object());
  c.run([&](ws::Message& m) {
    try {
      if (started) return input.take(m);
      json first = json::parse(m.data, nullptr, false);
      if (m.kind != ws::Kind::text || !first.is_object())
        throw Error(Errc::invalid_argument, "the first message must be the exec request, a JSON object in a text message")
            .set_hint("{\"cmd\": [\"bash\"], \"tty\": true, \"rows\": 24, \"cols\": 80}");
      start(std::move(first));
    } catch (const std::exception& x) {
      const auto* known = dynamic_cast<const Error*>(&x);
      Error e = known ? *known : Error(Errc::internal, x.what());
      if (!started) {
        c.send(ws::Kind::text, json{{"error", error_json(e)}}.dump(-1, ' ', false, json::error_handler_t::replace));
        c.close(close_code_for(e));
      }
      // A bad message mid-session is dropped: the command runs on.
    }
    return true;
  });
  if (!finished) input.hang_up();  // the client vanished (or closed) first: its command goes with it
  if (worker.joinable()) worker.join();
  input.finish();
}

HttpResponse Api::exec_ws(const HttpRequest& req, const SandboxRecord* rec) {
  require_websocket(req);
  if (rec) require_running(*rec);
  auto slot = reserve_exec(req.key->name);
  std::string id = rec ? rec->id : "";
  const ApiKey* key = req.key;  // the key ring outlives every session
  return switching([this, slot, id, key](ws::Connection& c) {
    interactive(c, true, [&](const json& first, ExecIO& io) {
      bool one_shot = id.empty();
      ExecBody eb = parse_exec(first, limits_, one_shot);
      if (!eb.stdin_data.empty())
        throw Error(Errc::invalid_argument, "over a WebSocket, stdin is sent as binary messages, not in the request");
      if (eb.req.background)
        throw Error(Errc::invalid_argument, "a background exec is POST /v1/sandboxes/{id}/exec, not a WebSocket");
      eb.req.stdin_open = true;
      SandboxSpec spec = one_shot ? one_shot_spec(first, *key) : SandboxSpec{};
      return run_command(eb, spec, id, key->name, io);
    });
  });
}

HttpResponse Api::attach_ws(const HttpRequest& req, const SandboxRecord& rec, int pid) {
  require_websocket(req);
  require_running(rec);
  AttachOptions opts;
  opts.input = true;
  if (auto t = query(req, "tail")) opts.tail_lines = parse_count(*t, "tail");
  require_process(backend_, rec.id, pid);  // a 404 before the upgrade, not a session that ends in one
  auto slot = reserve_exec(req.key->name);
  std::string id = rec.id;
  return switching([this, slot, id, pid, opts](ws::Connection& c) {
    interactive(c, false, [&](const json&, ExecIO& io) -> json {
      auto r = backend_.attach(id, pid, opts, io);
      return r ? json{{"exit", *r}} : json{{"detached", true}};
    });
  });
}

HttpResponse Api::tcp_ws(const HttpRequest& req, const SandboxRecord& rec, uint16_t port) {
  require_websocket(req);
  require_running(rec);
  auto slot = reserve_exec(req.key->name);
  // Opened before the upgrade: nothing listening is an HTTP error (503) the client can read.
  auto sock = std::make_shared<Fd>(backend_.open_port(rec.id, port));
  return switching([this, slot, sock](ws::Connection& c) { tunnel(c, sock->get()); });
}

// Bytes both ways until both directions ended: binary messages are data, a
// text {"eof":true} ends one direction (shutdown(SHUT_WR) on its far side).
void Api::tunnel(ws::Connection& c, int fd) {
  std::function<void()> cancel = [&] {
    ::shutdown(fd, SHUT_RDWR);
    c.close(ws::kGoingAway, "the manager is shutting down");
  };
  auto tracked = track_session(&cancel);
  ws::relay(c, fd);
}

const ApiKey* Api::authenticate_token(std::string_view token, std::string_view path, TokenGrant& grant) const {
  auto g = verify_token(token_secret_, token, now_ms());
  if (!g || !token_covers(*g, path)) return nullptr;
  for (auto& k : keys_.keys())
    if (k.name == g->key) {
      grant = *g;
      return &k;
    }
  return nullptr;  // the key was removed since
}

HttpResponse Api::tokens(const HttpRequest& req, const SandboxRecord& rec) {
  if (req.token) throw Error(Errc::forbidden, "a token cannot make tokens").set_hint("use the API key");
  json body = parse_body(req);
  reject_unknown_fields(body, {"scope", "port", "ttl_s"}, "token request");
  TokenGrant g;
  g.key = req.key->name;
  g.sandbox = rec.id;
  try {
    g.scope = body.value("scope", std::string(kScopeWs));
    int64_t ttl = number_field<int64_t>(body, "ttl_s", kDefaultTokenTtlS);
    if (ttl < 1 || ttl > kMaxTokenTtlS) throw Error(Errc::invalid_argument, "ttl_s must be between 1 and 3600");
    g.expires_ms = now_ms() + ttl * 1000;
    g.port = number_field<uint16_t>(body, "port", 0);
  } catch (const json::exception&) {
    throw Error(Errc::invalid_argument, "token request: scope is a string, port and ttl_s numbers");
  }
  if (g.scope != kScopeWs && g.scope != kScopePort)
    throw Error(Errc::invalid_argument, "token scope '" + g.scope.substr(0, 40) + "' is not one of ws, port");
  if ((g.scope == kScopePort) != (g.port != 0))
    throw Error(Errc::invalid_argument, g.port ? "port goes with scope \"port\" only" : "scope \"port\" needs a port (1-65535)");
  return json_response(201, {{"token", sign_token(token_secret_, g)}, {"expires_ms", g.expires_ms}, {"scope", g.scope}});
}

}  // namespace sbx::server
