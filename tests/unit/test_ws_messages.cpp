// A client's WebSocket messages of the wrong shape (found by tests/fuzz/fuzz_websocket):
// the session is the one Api::handle gives for the route, run over a socketpair
// the way http_server.cpp runs it, the client's frames written by hand. A text
// message whose fields have the wrong JSON type used to throw nlohmann's
// exception out of Connection::run, and the session's joinable worker thread
// turned that into std::terminate: the whole manager ended. A window size past
// 65535 as a double was undefined behaviour (nlohmann's cast).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/driver.hpp"
#include "core/websocket.hpp"
#include "server/api.hpp"
#include "tests/unit/fake_backend.hpp"
#include "tests/unit/helpers.hpp"

namespace {

std::vector<sbx::Probe> no_probes(const sbx::Config&, bool) { return {}; }
std::unique_ptr<sbx::Driver> no_driver(const sbx::Config&) { return nullptr; }

constexpr char kClientKey[] = "dGhlIHNhbXBsZSBub25jZQ==";

// One client frame (FIN set, masked as a client's must be).
std::string frame(int opcode, const std::string& payload) {
  std::string f(1, static_cast<char>(0x80 | opcode));
  if (payload.size() < 126) {
    f += static_cast<char>(0x80 | payload.size());
  } else {
    f += static_cast<char>(0x80 | 126);
    f += static_cast<char>(payload.size() >> 8);
    f += static_cast<char>(payload.size() & 0xff);
  }
  const char mask[4] = {0x11, 0x22, 0x33, 0x44};
  f.append(mask, 4);
  for (size_t i = 0; i < payload.size(); ++i) f += static_cast<char>(payload[i] ^ mask[i % 4]);
  return f;
}
std::string text(const std::string& s) { return frame(1, s); }
std::string binary(const std::string& s) { return frame(2, s); }

// Reads what is there without waiting (a self-pipe of ExecIO's).
template <typename T>
std::vector<T> pending(int fd) {
  std::vector<T> out;
  T v;
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 0) == 1 && ::read(fd, &v, sizeof v) == sizeof v) out.push_back(v);
  return out;
}

struct Manager {
  sbx_test::TempDir state{"wsmsg"};
  sbx::DriverTable drivers{sbx::DriverInfo{"subprocess", "fake", &no_probes, &no_driver, true}};
  sbx_test::FakeBackend backend;
  sbx::Config cfg;
  sbx::server::ApiKey alice{"alice", "alice-secret-0123456789",
                            sbx::server::kRead | sbx::server::kWrite | sbx::server::kRun};
  std::unique_ptr<sbx::server::Api> api;
  std::string id;

  Manager() {
    cfg.state_dir = state.path;
    cfg.local_backend = "subprocess";
    sbx::server::KeyRing keys;
    keys.add(alice);
    api = std::make_unique<sbx::server::Api>(cfg, drivers, backend, keys, sbx::server::Limits{});
    sbx::SandboxSpec spec;
    spec.labels[sbx::kOwnerLabel] = "alice";
    id = backend.create(spec, nullptr).id;
  }

  sbx::server::HttpResponse get(const std::string& path, bool websocket) {
    sbx::server::HttpRequest req;
    req.method = "GET";
    req.path = req.raw_target = path;
    req.key = &alice;
    req.request_id = "test";
    if (websocket) req.websocket_key = kClientKey;
    return api->handle(req);
  }

  /// Runs the WebSocket session of `path`: the client sends `client`, reads until the
  /// manager's close frame, then hangs up. Returns what the manager sent (its frames
  /// are not masked: text messages show as is).
  std::string session(const std::string& path, const std::string& client) {
    sbx::server::HttpResponse r = get(path, true);
    REQUIRE(r.status == 101);
    REQUIRE(r.websocket);
    int sp[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
    sbx::Fd manager(sp[0]), peer(sp[1]);
    std::string out;
    std::thread client_side([&] {
      sbx::write_all(peer.get(), client);
      size_t at = 0;
      bool closed = false;
      char buf[4096];
      for (ssize_t n; (n = ::read(peer.get(), buf, sizeof buf)) > 0;) {
        out.append(buf, static_cast<size_t>(n));
        // Whole frames: opcode, then a 7-bit length, or 126 and 16 bits, or 127 and 64 bits.
        while (!closed && out.size() >= at + 2) {
          auto byte = [&](size_t i) { return static_cast<uint8_t>(out[at + i]); };
          size_t head = 2, len = byte(1) & 0x7f;
          if (len >= 126) {
            head = len == 126 ? 4 : 10;
            if (out.size() < at + head) break;
            len = 0;
            for (size_t i = 2; i < head; ++i) len = len << 8 | byte(i);
          }
          if (out.size() < at + head + len) break;
          if ((byte(0) & 0x0f) == 8) {
            closed = true;
            ::shutdown(peer.get(), SHUT_WR);
          }
          at += head + len;
        }
      }
    });
    {
      auto c = sbx::ws::Connection::accept_upgraded(manager.get(), kClientKey, "");
      r.websocket(*c);
    }
    r.websocket = nullptr;
    ::shutdown(manager.get(), SHUT_RDWR);
    client_side.join();
    return out;
  }
};

}  // namespace

TEST_CASE("api_ws: a text message of the wrong JSON types is dropped, not the manager's end", "[api_ws][fuzz]") {
  Manager m;
  std::string in;
  std::vector<sbx::WindowSize> sizes;
  std::vector<int> signals;
  m.backend.set_script([&](const std::string&, const sbx::ExecRequest&, sbx::ExecIO& io) {
    in = sbx_test::read_fd(io.stdin_fd);  // to its EOF, which {"eof":true} brings after the bad messages
    sizes = pending<sbx::WindowSize>(io.resize_fd);
    signals = pending<int>(io.signal_fd);
    return sbx::ExecResult{};
  });
  std::string out = m.session("/v1/sandboxes/" + m.id + "/exec/ws",
                              text(R"({"cmd":["cat"],"tty":true,"rows":24,"cols":80})") +
                                  text(R"({"eof":"yes"})") + text(R"({"detach":1})") + text(R"({"resize":7})") +
                                  text(R"({"resize":{"rows":"x","cols":5}})") +
                                  text(R"({"resize":{"rows":1e10,"cols":5}})") +
                                  text(R"({"resize":{"rows":-1,"cols":5}})") +
                                  text(R"({"resize":{"rows":70000,"cols":5}})") + binary(std::string(1, '\0') + "hi") +
                                  text(R"({"resize":{"rows":30,"cols":100}})") + text(R"({"signal":"INT"})") +
                                  text(R"({"eof":true})"));
  CHECK(out.find(R"({"exit":)") != std::string::npos);
  CHECK(in == "hi");
  REQUIRE(sizes.size() == 1);
  CHECK(sizes[0].rows == 30);
  CHECK(sizes[0].cols == 100);
  CHECK(signals == std::vector<int>{SIGINT});
}

TEST_CASE("api_ws: a first message of the wrong types is an invalid_argument answer, not the manager's end",
          "[api_ws][fuzz]") {
  Manager m;
  for (std::string first : {R"({"cmd":["sh"],"background":true,"stdin_open":"yes"})", R"({"cmd":["sh"],"rows":1e10})",
                            R"({"cmd":["sh"],"cols":65536})"}) {
    CAPTURE(first);
    std::string out = m.session("/v1/sandboxes/" + m.id + "/exec/ws", text(first));
    CHECK(out.find("invalid_argument") != std::string::npos);
  }
  CHECK(m.backend.execs().empty());
}

TEST_CASE("api_ws: an exec request's rows and cols are numbers from 0 to 65535, else 400", "[api_ws][fuzz]") {
  Manager m;
  for (std::string body : {R"({"cmd":["sh"],"rows":1e10})", R"({"cmd":["sh"],"rows":-1})", R"({"cmd":["sh"],"cols":65536})",
                           R"({"cmd":["sh"],"cols":"80"})", R"({"cmd":["sh"],"background":true,"stdin_open":"yes"})"}) {
    CAPTURE(body);
    sbx::server::HttpRequest req;
    req.method = "POST";
    req.path = req.raw_target = "/v1/sandboxes/" + m.id + "/exec";
    req.key = &m.alice;
    req.content_type = "application/json";
    req.body = body;
    CHECK(m.api->handle(req).status == 400);
  }
  sbx::server::HttpRequest ok;
  ok.method = "POST";
  ok.path = ok.raw_target = "/v1/sandboxes/" + m.id + "/exec";
  ok.key = &m.alice;
  ok.content_type = "application/json";
  ok.body = R"({"cmd":["sh"],"rows":65535,"cols":0})";
  CHECK(m.api->handle(ok).status == 200);
  REQUIRE(m.backend.execs().size() == 1);
  CHECK(m.backend.execs()[0].req.rows == 65535);
}

TEST_CASE("ws::relay: a text message whose eof is not a boolean is ignored, not the manager's end", "[api_ws][fuzz]") {
  Manager m;
  int tunnel[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, tunnel) == 0);
  sbx::Fd sandbox_side(tunnel[0]), server(tunnel[1]);
  ::shutdown(server.get(), SHUT_WR);  // the server in the sandbox sends nothing
  int sp[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
  sbx::Fd manager(sp[0]), peer(sp[1]);
  sbx::write_all(peer.get(), binary("data") + text(R"({"eof":1})") + text(R"({"eof":"yes"})") + text("[1]") +
                                 text(R"({"eof":true})"));
  ::shutdown(peer.get(), SHUT_WR);
  auto c = sbx::ws::Connection::accept_upgraded(manager.get(), kClientKey, "");
  sbx::ws::relay(*c, sandbox_side.get());
  CHECK(sbx_test::read_fd(server.get()) == "data");
}

TEST_CASE("api_ws: an exec that throws something other than sbx::Error ends its session, not the manager",
          "[api_ws][fuzz]") {
  // std::terminate before: the session's worker thread caught sbx::Error only.
  Manager m;
  m.backend.set_script([](const std::string&, const sbx::ExecRequest&, sbx::ExecIO&) -> sbx::ExecResult {
    throw std::runtime_error("thread limit reached");
  });
  std::string out = m.session("/v1/sandboxes/" + m.id + "/exec/ws", text(R"({"cmd":["sh"]})"));
  CHECK(out.find("internal") != std::string::npos);
  CHECK(out.find("thread limit reached") != std::string::npos);
}
