// The manager's interactive routes over real sockets: an HttpServer on
// 127.0.0.1 in front of the API over a fake backend, driven by the remote
// driver (RemoteBackend and its WebSocket client). What a real sandbox
// cannot easily show lives here: what exactly reaches the backend (stdin
// bytes, signals, EOF, the hangup), attach, signal and port tunnels before
// any local backend has them; plus the token rules.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <poll.h>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "core/config.hpp"
#include "core/driver.hpp"
#include "core/fsutil.hpp"
#include "remote/backend.hpp"
#include "server/api.hpp"
#include "server/http_server.hpp"
#include "server/tokens.hpp"
#include "tests/unit/fake_backend.hpp"
#include "tests/unit/helpers.hpp"

using sbx::ExecIO;
using sbx::ExecRequest;
using sbx::ExecResult;
using sbx::server::ApiKey;
using sbx::server::TokenGrant;
using sbx_test::FakeBackend;

namespace {

std::vector<sbx::Probe> no_probes(const sbx::Config&, bool) { return {}; }
std::unique_ptr<sbx::Driver> no_driver(const sbx::Config&) { return nullptr; }

// Everything io's stdin carries until its EOF.
std::string drain(int fd) {
  std::string all;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return all;
    all.append(buf, static_cast<size_t>(n));
  }
}

struct Served {
  sbx_test::TempDir state{"apiws"};
  sbx::DriverTable drivers{sbx::DriverInfo{"subprocess", "fake", &no_probes, &no_driver, true}};
  FakeBackend backend;
  sbx::Config cfg;
  ApiKey alice{"alice", "alice-secret-0123456789", sbx::server::kRead | sbx::server::kWrite | sbx::server::kRun};
  ApiKey bob{"bob", "bob-secret-0123456789", sbx::server::kRead | sbx::server::kWrite | sbx::server::kRun};
  std::unique_ptr<sbx::server::Api> api;
  std::unique_ptr<sbx::server::HttpServer> http;
  std::string id;

  Served() {
    cfg.state_dir = state.path;
    cfg.local_backend = "subprocess";
    sbx::server::KeyRing keys;
    keys.add(alice);
    keys.add(bob);
    api = std::make_unique<sbx::server::Api>(cfg, drivers, backend, keys, sbx::server::Limits{});
    sbx::server::HttpOptions opts;
    opts.host = "127.0.0.1";
    opts.port = 0;
    http = std::make_unique<sbx::server::HttpServer>(*api, opts);
    http->start();
    sbx::SandboxSpec spec;
    spec.labels["sbx.owner"] = "alice";
    id = backend.create(spec, nullptr).id;
  }
  ~Served() {
    api->start_draining();
    api->cancel_all();
    for (int i = 0; i < 250 && (api->in_flight() > 0 || http->open_requests() > 0); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    http->stop();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(http->port()); }
  sbx::RemoteBackend client(const ApiKey& k) { return sbx::RemoteBackend(cfg, url(), k.secret); }
};

std::pair<sbx::Fd, sbx::Fd> pipe_pair() {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  return {sbx::Fd(p[0]), sbx::Fd(p[1])};
}

}  // namespace

TEST_CASE("exec with live stdin streams over the WebSocket both ways", "[api_ws]") {
  Served s;
  std::atomic<bool> first_seen{false};
  s.backend.set_script([&](const std::string&, const ExecRequest& req, ExecIO& io) {
    REQUIRE(req.stdin_open);
    // Echo line by line: the first line comes back before the client sends the second.
    char buf[256];
    ssize_t n = ::read(io.stdin_fd, buf, sizeof buf);
    io.on_stdout(std::string_view(buf, static_cast<size_t>(n)));
    first_seen = true;
    std::string rest = drain(io.stdin_fd);
    io.on_stderr("rest:" + rest);
    ExecResult r;
    r.exit_code = 7;
    return r;
  });
  auto [in_r, in_w] = pipe_pair();
  std::string out, err;
  ExecIO io;
  io.stdin_fd = in_r.get();
  io.on_stdout = [&](std::string_view d) { out += d; };
  io.on_stderr = [&](std::string_view d) { err += d; };
  ExecRequest req;
  req.argv = {"cat"};
  req.stdin_open = true;
  sbx::write_all(in_w.get(), "one\n");
  std::thread writer([&, w = std::move(in_w)]() mutable {
    for (int i = 0; i < 500 && !first_seen; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    sbx::write_all(w.get(), "two\n");
  });  // w closes here: stdin's EOF
  auto remote = s.client(s.alice);
  ExecResult r = remote.exec(s.id, req, io);
  writer.join();
  CHECK(first_seen);
  CHECK(out == "one\n");
  CHECK(err == "rest:two\n");
  CHECK(r.exit_code == 7);
}

TEST_CASE("a signal on the client reaches the backend as a signal, not a dropped call", "[api_ws]") {
  Served s;
  std::atomic<int> got{0};
  s.backend.set_script([&](const std::string&, const ExecRequest&, ExecIO& io) {
    pollfd p{io.signal_fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 10000) == 1);
    int sig = 0;
    REQUIRE(::read(io.signal_fd, &sig, sizeof sig) == static_cast<ssize_t>(sizeof sig));
    got = sig;
    ExecResult r;
    r.exit_code = 130;
    r.signal = sig;
    return r;
  });
  auto [in_r, in_w] = pipe_pair();
  auto [sig_r, sig_w] = pipe_pair();
  ExecIO io;
  io.stdin_fd = in_r.get();
  io.signal_fd = sig_r.get();
  int sig = SIGINT;
  REQUIRE(::write(sig_w.get(), &sig, sizeof sig) == static_cast<ssize_t>(sizeof sig));
  ExecRequest req;
  req.argv = {"sleep", "9"};
  req.stdin_open = true;
  auto remote = s.client(s.alice);
  ExecResult r = remote.exec(s.id, req, io);
  CHECK(got == SIGINT);
  CHECK(r.exit_code == 130);
}

TEST_CASE("the drain hangs an interactive command up and ends its session", "[api_ws]") {
  Served s;
  std::atomic<bool> hung_up{false}, started{false};
  s.backend.set_script([&](const std::string&, const ExecRequest&, ExecIO& io) {
    started = true;
    pollfd p{io.hangup_fd, POLLRDHUP, 0};
    hung_up = ::poll(&p, 1, 10000) == 1;
    return ExecResult{};
  });
  // A client whose stdin never ends: only the manager can end the session.
  auto [in_r, in_w] = pipe_pair();
  std::thread client([&] {
    ExecIO io;
    io.stdin_fd = in_r.get();
    ExecRequest req;
    req.argv = {"sh"};
    req.stdin_open = true;
    auto remote = s.client(s.alice);
    try {
      remote.exec(s.id, req, io);
    } catch (const sbx::Error&) {
    }
  });
  for (int i = 0; i < 500 && !started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(started);
  s.api->cancel_all();  // the manager's drain: the session ends as when the client goes
  client.join();
  CHECK(hung_up);
}

TEST_CASE("ps, logs, attach, kill and a port tunnel through the manager", "[api_ws]") {
  Served s;
  sbx::ProcessInfo p;
  p.pid = 42;
  p.argv = {"sleep", "60"};
  p.state = "running";
  s.backend.set_processes(s.id, {p});
  s.backend.set_attach([](const std::string&, int pid, const sbx::AttachOptions& opts, ExecIO& io)
                           -> std::optional<ExecResult> {
    io.on_stdout("kept output of " + std::to_string(pid) + (opts.input ? " with input" : "") + "\n");
    if (!opts.follow) return std::nullopt;
    ExecResult r;
    r.exit_code = 3;
    return r;
  });
  s.backend.set_port_handler([](sbx::Fd fd) {
    std::string got = drain(fd.get());
    sbx::write_all(fd.get(), "echo:" + got);
  });
  auto remote = s.client(s.alice);
  auto procs = remote.processes(s.id);
  REQUIRE(procs.size() == 1);
  CHECK(procs[0].pid == 42);
  CHECK(procs[0].argv == std::vector<std::string>{"sleep", "60"});

  std::string out;
  ExecIO io;
  io.on_stdout = [&](std::string_view d) { out += d; };
  sbx::AttachOptions logs;
  logs.follow = false;
  CHECK_FALSE(remote.attach(s.id, 42, logs, io).has_value());
  CHECK(out == "kept output of 42\n");
  out.clear();
  sbx::AttachOptions att;
  att.input = true;
  auto ended = remote.attach(s.id, 42, att, io);
  REQUIRE(ended.has_value());
  CHECK(ended->exit_code == 3);
  CHECK(out == "kept output of 42 with input\n");
  CHECK_THROWS_WITH(remote.attach(s.id, 7, att, io), Catch::Contains("no background process 7"));

  remote.signal_process(s.id, 42, SIGTERM);
  REQUIRE(s.backend.signals().size() == 1);
  CHECK(std::get<2>(s.backend.signals()[0]) == SIGTERM);

  sbx::Fd tunnel = remote.open_port(s.id, 8080);
  sbx::write_all(tunnel.get(), "hello");
  ::shutdown(tunnel.get(), SHUT_WR);
  CHECK(drain(tunnel.get()) == "echo:hello");
  s.backend.set_port_handler(nullptr);
  CHECK_THROWS_WITH(remote.open_port(s.id, 9), Catch::Contains("nothing listens on 127.0.0.1:9"));
}

TEST_CASE("another key's sandbox is a 404 on the WebSocket routes too", "[api_ws]") {
  Served s;
  auto remote = s.client(s.bob);
  auto [in_r, in_w] = pipe_pair();
  ExecIO io;
  io.stdin_fd = in_r.get();
  ExecRequest req;
  req.argv = {"cat"};
  req.stdin_open = true;
  try {
    remote.exec(s.id, req, io);
    FAIL("bob ran a command in alice's sandbox");
  } catch (const sbx::Error& e) {
    CHECK(e.code() == sbx::Errc::not_found);
  }
  CHECK_THROWS_WITH(remote.open_port(s.id, 80), Catch::Contains("does not exist"));
  CHECK(s.backend.execs().empty());
}

TEST_CASE("tokens: signed, scoped, short-lived", "[tokens]") {
  std::string secret = sbx::server::new_token_secret();
  TokenGrant g{"alice", "sbx_0123456789ab", sbx::server::kScopeWs, 0, sbx::now_ms() + 60'000};
  std::string t = sbx::server::sign_token(secret, g);
  CHECK(t.find_first_of("+/=&? ") == std::string::npos);  // goes in a query string as it is
  auto back = sbx::server::verify_token(secret, t, sbx::now_ms());
  REQUIRE(back);
  CHECK(back->key == "alice");
  CHECK(back->sandbox == g.sandbox);
  // Another secret, an altered payload or signature, expiry: refused.
  CHECK_FALSE(sbx::server::verify_token(sbx::server::new_token_secret(), t, sbx::now_ms()));
  std::string altered = t;
  altered[2] = altered[2] == 'A' ? 'B' : 'A';
  CHECK_FALSE(sbx::server::verify_token(secret, altered, sbx::now_ms()));
  CHECK_FALSE(sbx::server::verify_token(secret, t.substr(0, t.size() - 1), sbx::now_ms()));
  CHECK_FALSE(sbx::server::verify_token(secret, t, g.expires_ms));
  CHECK_FALSE(sbx::server::verify_token(secret, "garbage", sbx::now_ms()));

  CHECK(sbx::server::token_covers(g, "/v1/sandboxes/sbx_0123456789ab/exec/ws"));
  CHECK(sbx::server::token_covers(g, "/v1/sandboxes/sbx_0123456789ab/processes/12/attach"));
  CHECK(sbx::server::token_covers(g, "/v1/sandboxes/sbx_0123456789ab/tcp/80"));
  CHECK_FALSE(sbx::server::token_covers(g, "/v1/sandboxes/sbx_0123456789ab"));
  CHECK_FALSE(sbx::server::token_covers(g, "/v1/sandboxes/sbx_0123456789ab/exec"));
  CHECK_FALSE(sbx::server::token_covers(g, "/v1/sandboxes/sbx_0123456789ab/processes/12/logs"));
  CHECK_FALSE(sbx::server::token_covers(g, "/v1/sandboxes/sbx_bbbbbbbbbbbb/exec/ws"));
  CHECK_FALSE(sbx::server::token_covers(g, "/v1/run/ws"));
  TokenGrant port{"alice", "sbx_0123456789ab", sbx::server::kScopePort, 8080, g.expires_ms};
  CHECK(sbx::server::token_covers(port, "/v1/sandboxes/sbx_0123456789ab/ports/8080/index.html"));
  CHECK(sbx::server::token_covers(port, "/v1/sandboxes/sbx_0123456789ab/ports/8080"));
  CHECK(sbx::server::token_covers(port, "/v1/sandboxes/sbx_0123456789ab/tcp/8080"));
  CHECK_FALSE(sbx::server::token_covers(port, "/v1/sandboxes/sbx_0123456789ab/ports/8081/"));
  CHECK_FALSE(sbx::server::token_covers(port, "/v1/sandboxes/sbx_0123456789ab/exec/ws"));
}
