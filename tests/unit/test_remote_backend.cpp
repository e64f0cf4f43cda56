#include "remote/backend.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "remote/index.hpp"
#include "tests/unit/helpers.hpp"

using nlohmann::json;
using sbx::Errc;
using sbx_test::contains;
using sbx_test::error_of;
using sbx_test::TempDir;

namespace {

constexpr const char* kId = "sbx_abcdefghijk2";
constexpr const char* kKey = "secret-key-123";

// A one-connection HTTP server on 127.0.0.1: reads one request, answers with
// the given chunks (a pause between them), then closes, or first waits for
// the client to hang up when `hold_open`.
class OneShotServer {
 public:
  explicit OneShotServer(std::vector<std::string> chunks, int pause_ms = 0, bool hold_open = false)
      : chunks_(std::move(chunks)), pause_ms_(pause_ms), hold_open_(hold_open) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listen_fd_, 4) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~OneShotServer() {
    if (thread_.joinable()) thread_.join();
    ::close(listen_fd_);
  }
  OneShotServer(const OneShotServer&) = delete;
  OneShotServer& operator=(const OneShotServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  /// The request as received (head and body); valid after wait().
  const std::string& request() {
    wait();
    return request_;
  }
  void wait() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  void serve() {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return;  // the client never came: do not hang the test run
    int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    read_request(c);
    for (size_t i = 0; i < chunks_.size(); ++i) {
      if (i > 0 && pause_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms_));
      if (::send(c, chunks_[i].data(), chunks_[i].size(), MSG_NOSIGNAL) < 0) break;
    }
    if (hold_open_) {
      pollfd q{c, POLLIN, 0};
      char buf[256];
      while (::poll(&q, 1, 5000) == 1 && ::recv(c, buf, sizeof buf, 0) > 0) {
      }
    }
    ::shutdown(c, SHUT_WR);
    ::close(c);
  }
  void read_request(int c) {
    char buf[65536];
    size_t want = std::string::npos;
    bool chunked = false;
    for (;;) {
      size_t head_end = request_.find("\r\n\r\n");
      if (head_end != std::string::npos && want == std::string::npos) {
        std::string head = request_.substr(0, head_end);
        for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        size_t cl = head.find("content-length:");
        want = head_end + 4 + (cl == std::string::npos ? 0 : std::stoull(head.substr(cl + 15)));
        chunked = head.find("transfer-encoding: chunked") != std::string::npos;
      }
      // A chunked body (a streamed PUT) ends with its empty last chunk.
      if (chunked && request_.size() >= want && request_.compare(request_.size() - 5, 5, "0\r\n\r\n") == 0) return;
      if (!chunked && want != std::string::npos && request_.size() >= want) return;
      pollfd q{c, POLLIN, 0};
      if (::poll(&q, 1, 5000) != 1) return;
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      request_.append(buf, static_cast<size_t>(n));
    }
  }

  std::vector<std::string> chunks_;
  int pause_ms_;
  bool hold_open_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::string request_;
};

std::string http_response(const std::string& status, const std::string& body,
                          const std::string& type = "application/json") {
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

std::string body_of(const std::string& request) { return request.substr(request.find("\r\n\r\n") + 4); }

// The data of a chunked body.
std::string dechunk(const std::string& body) {
  std::string out;
  for (size_t pos = 0;;) {
    size_t eol = body.find("\r\n", pos);
    REQUIRE(eol != std::string::npos);
    size_t n = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) return out;
    out += body.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
}

sbx::Config config_in(const TempDir& dir) {
  sbx::Config cfg;
  cfg.state_dir = dir.path;
  cfg.api_key = kKey;
  return cfg;
}

// A port on 127.0.0.1 that nothing listens on.
uint16_t closed_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(s >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(s);
  return ntohs(addr.sin_port);
}

json record_json(const std::string& id) {
  sbx::SandboxRecord rec;
  rec.id = id;
  rec.spec.driver = "runsc";
  rec.state = sbx::SandboxState::running;
  rec.created_ms = 1000;
  json j = rec;
  for (auto* k : {"agent_pid", "agent_start", "uid_base", "slot", "driver_data"}) j.erase(k);
  return j;
}

// Entries from a list, with each file's content in one chunk.
class VectorSource : public sbx::EntrySource {
 public:
  explicit VectorSource(std::vector<std::pair<sbx::FileEntry, std::string>> items) : items_(std::move(items)) {}
  bool next(sbx::FileEntry& e) override {
    if (idx_ >= items_.size()) return false;
    e = items_[idx_++].first;
    sent_ = false;
    return true;
  }
  bool read(std::string& chunk) override {
    if (sent_ || items_[idx_ - 1].second.empty()) return false;
    chunk = items_[idx_ - 1].second;
    sent_ = true;
    return true;
  }

 private:
  std::vector<std::pair<sbx::FileEntry, std::string>> items_;
  size_t idx_ = 0;
  bool sent_ = false;
};

sbx::FileEntry entry(const std::string& path, const std::string& type, uint64_t size = 0) {
  sbx::FileEntry e;
  e.path = path;
  e.type = type;
  e.mode = type == "dir" ? 0755 : 0644;
  e.size = size;
  return e;
}

// Collects what a sink is given.
class CollectSink : public sbx::EntrySink {
 public:
  std::vector<std::pair<std::string, std::string>> got;  // path, content
  void put(const sbx::FileEntry& e, const std::function<bool(std::string&)>& content) override {
    std::string data, chunk;
    while (content(chunk)) data += chunk;
    got.emplace_back(e.path, data);
  }
};

}  // namespace

TEST_CASE("remote: base64 round trips and rejects garbage", "[remote]") {
  CHECK(sbx::base64_encode("") == "");
  CHECK(sbx::base64_encode("f") == "Zg==");
  CHECK(sbx::base64_encode("fo") == "Zm8=");
  CHECK(sbx::base64_encode("foo") == "Zm9v");
  CHECK(sbx::base64_encode("foobar") == "Zm9vYmFy");
  CHECK(sbx::base64_decode("Zm9vYmE=") == "fooba");
  CHECK(sbx::base64_decode("Zm9vYg") == "foob");
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 37) CHECK(sbx::base64_decode(sbx::base64_encode(all.substr(0, n))) == all.substr(0, n));
  CHECK(error_of([] { sbx::base64_decode("Zm9v!"); }).code() == Errc::invalid_argument);
  CHECK(error_of([] { sbx::base64_decode("Z"); }).code() == Errc::invalid_argument);
  CHECK(error_of([] { sbx::base64_decode("Zg="); }).code() == Errc::invalid_argument);
}

TEST_CASE("remote: valid_utf8 accepts text and refuses what JSON cannot carry", "[remote]") {
  CHECK(sbx::valid_utf8("plain ascii"));
  CHECK(sbx::valid_utf8("gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x98\x80"));
  CHECK_FALSE(sbx::valid_utf8("\xff"));
  CHECK_FALSE(sbx::valid_utf8("\xc3"));              // truncated
  CHECK_FALSE(sbx::valid_utf8("\xc0\xaf"));          // overlong '/'
  CHECK_FALSE(sbx::valid_utf8("\xed\xa0\x80"));      // a surrogate
  CHECK_FALSE(sbx::valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  CHECK_FALSE(sbx::valid_utf8("a\x80z"));
}

TEST_CASE("remote: the create request carries only the fields that were set", "[remote]") {
  sbx::SandboxSpec spec;
  spec.driver = "remote";
  spec.network = "";
  spec.workdir = "";
  CHECK(sbx::spec_request_json(spec) == json::object());

  spec.driver = "runsc";
  spec.limits.memory_mb = 256;
  spec.idle_timeout_s = 0;
  spec.labels["team"] = "a";
  spec.workdir = "/work";
  json j = sbx::spec_request_json(spec);
  CHECK(j == json{{"driver", "runsc"}, {"limits", {{"memory_mb", 256}}}, {"idle_timeout_s", 0},
                  {"labels", {{"team", "a"}}}, {"workdir", "/work"}});
  // What is sent must be what the manager's parser accepts.
  CHECK_NOTHROW(j.get<sbx::SandboxSpec>());
}

TEST_CASE("remote: the NDJSON parser handles lines split at every byte", "[remote]") {
  std::string stream = "{\"stdout\": \"hello\\n\"}\n{\"stderr_b64\": \"" + sbx::base64_encode(std::string("\xff\x00z", 3)) +
                       "\"}\r\n\n{\"stdout\":\"b\"}\n"
                       "{\"exit\": {\"exit_code\": 3, \"signal\": 0, \"timed_out\": true, \"oom_killed\": false, "
                       "\"duration_ms\": 12, \"error\": \"\"}}\n";
  auto run = [&](const std::vector<size_t>& cuts) {
    std::string out, err;
    int out_calls = 0;
    sbx::NdjsonExecParser p([&](std::string_view s) { out += s, ++out_calls; }, [&](std::string_view s) { err += s; });
    size_t at = 0;
    for (size_t cut : cuts) {
      CHECK_FALSE(p.done());
      p.feed(std::string_view(stream).substr(at, cut - at));
      at = cut;
    }
    p.feed(std::string_view(stream).substr(at));
    p.finish();
    REQUIRE(p.done());
    CHECK(out == "hello\nb");
    CHECK(out_calls == 2);
    CHECK(err == std::string("\xff\x00z", 3));
    CHECK(p.result().exit_code == 3);
    CHECK(p.result().timed_out);
    CHECK(p.result().duration_ms == 12);
    CHECK(p.error().empty());
  };
  run({});
  for (size_t i = 1; i < stream.size() - 1; ++i) run({i});
  std::vector<size_t> every;
  for (size_t i = 1; i < stream.size(); ++i) every.push_back(i);
  run(every);
}

TEST_CASE("remote: the NDJSON parser reports the start error and refuses nonsense", "[remote]") {
  sbx::NdjsonExecParser p(nullptr, nullptr);
  p.feed("{\"exit\": {\"exit_code\": 127, \"error\": \"nope: command not found\"}}");
  CHECK_FALSE(p.done());  // no newline yet
  p.finish();
  REQUIRE(p.done());
  CHECK(p.result().exit_code == 127);
  CHECK(p.error() == "nope: command not found");
  CHECK(error_of([&] { p.feed("{\"stdout\": \"late\"}\n"); }).code() == Errc::protocol);

  sbx::NdjsonExecParser q(nullptr, nullptr);
  CHECK(error_of([&] { q.feed("not json\n"); }).code() == Errc::protocol);
  sbx::NdjsonExecParser r(nullptr, nullptr);
  CHECK(error_of([&] { r.feed("{\"stdout_b64\": \"@@\"}\n"); }).code() == Errc::protocol);
}

TEST_CASE("remote: StripRootSource turns base/... into the tree itself", "[remote]") {
  VectorSource inner({{entry("base", "dir"), ""}, {entry("base/a", "file", 2), "hi"}, {entry("base/d", "dir"), ""},
                      {entry("base/d/b", "file", 1), "x"}});
  sbx::StripRootSource src(inner);
  CollectSink sink;
  CHECK(sbx::transfer(src, sink, 100) == 3);
  REQUIRE(sink.got.size() == 4);
  CHECK(sink.got[0] == std::pair<std::string, std::string>{"", ""});
  CHECK(sink.got[1] == std::pair<std::string, std::string>{"a", "hi"});
  CHECK(sink.got[3] == std::pair<std::string, std::string>{"d/b", "x"});

  VectorSource stray({{entry("base", "dir"), ""}, {entry("other/x", "file"), ""}});
  sbx::StripRootSource bad(stray);
  CollectSink sink2;
  CHECK(error_of([&] { sbx::transfer(bad, sink2, 100); }).code() == Errc::protocol);
}

TEST_CASE("remote: the index remembers where a sandbox lives", "[remote]") {
  TempDir dir("remote");
  CHECK(sbx::remote_sandboxes(dir.path).empty());
  CHECK_FALSE(sbx::remote_location(dir.path, kId));
  sbx::remember_remote(dir.path, kId, "https://m:8000");
  sbx::remember_remote(dir.path, "sbx_222222222222", "http://other");
  CHECK(sbx::remote_location(dir.path, kId) == std::optional<std::string>("https://m:8000"));
  auto all = sbx::remote_sandboxes(dir.path);
  REQUIRE(all.size() == 2);
  CHECK(all[0].first == "sbx_222222222222");
  CHECK(all[1] == std::pair<std::string, std::string>{kId, "https://m:8000"});
  sbx::forget_remote(dir.path, kId);
  sbx::forget_remote(dir.path, kId);  // twice is fine
  CHECK_FALSE(sbx::remote_location(dir.path, kId));
  CHECK(sbx::remote_sandboxes(dir.path).size() == 1);
  // Ids never become paths unchecked.
  CHECK(error_of([&] { sbx::remember_remote(dir.path, "../escape", "http://x"); }).code() == Errc::invalid_argument);
  CHECK_FALSE(sbx::remote_location(dir.path, "../remote/sbx_222222222222"));
  CHECK_FALSE(sbx_test::exists(dir.path + "/escape"));
}

TEST_CASE("remote: health of a closed port is a quick reason, and cached", "[remote]") {
  TempDir dir("remote");
  sbx::Config cfg = config_in(dir);
  std::string url = "http://127.0.0.1:" + std::to_string(closed_port());
  // A fresh "healthy" entry for another URL must not count for this one.
  sbx::write_file_atomic(dir / "remote-health.json",
                         json{{"url", "http://elsewhere"}, {"ok", true}, {"reason", ""}, {"checked_ms", sbx::now_ms()}}.dump());
  auto t0 = std::chrono::steady_clock::now();
  auto reason = sbx::check_manager_health(cfg, url);
  auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(reason);
  CHECK(*reason == "connection refused");
  CHECK(took < std::chrono::seconds(1));
  json cached = json::parse(sbx::read_file(dir / "remote-health.json"));
  CHECK(cached["url"] == url);
  CHECK(cached["ok"] == false);
  CHECK(cached["reason"] == "connection refused");
  CHECK_FALSE(contains(cached.dump(), kKey));

  // Within 5 s the cache answers, even for a verdict the network would now contradict.
  cached["ok"] = true;
  sbx::write_file_atomic(dir / "remote-health.json", cached.dump());
  CHECK_FALSE(sbx::check_manager_health(cfg, url + "/"));
}

TEST_CASE("remote: health check verdicts from a live server", "[remote]") {
  TempDir dir("remote");
  sbx::Config cfg = config_in(dir);
  cfg.state_dir = dir / "state";  // missing: created for the cache
  {
    OneShotServer srv({http_response("200 OK", "{\"status\":\"ok\",\"version\":\"0.1.0\"}")});
    CHECK_FALSE(sbx::check_manager_health(cfg, srv.url()));
    CHECK(contains(srv.request(), "GET /healthz HTTP/1.1"));
    CHECK(contains(srv.request(), std::string("X-API-Key: ") + kKey));
    CHECK(sbx_test::exists(cfg.state_dir + "/remote-health.json"));
  }
  cfg.state_dir = "/proc/no-such-dir";  // not writable: checks still work, uncached
  {
    OneShotServer srv({http_response("401 Unauthorized", R"({"error":{"code":"unauthenticated","message":"no"}})")});
    // A refused key is a configuration error, not ill health: thrown, naming the manager.
    auto e = error_of([&] { sbx::check_manager_health(cfg, srv.url()); });
    CHECK(e.code() == Errc::unauthenticated);
    CHECK(contains(e.what(), srv.url()));
    CHECK(contains(e.what(), "refused the API key (HTTP 401: no)"));
    CHECK(contains(e.hint(), "ADMIN_API_KEY"));
  }
  {
    OneShotServer srv({http_response("403 Forbidden", "<html>go away</html>", "text/html")});
    auto e = error_of([&] { sbx::check_manager_health(cfg, srv.url()); });
    CHECK(e.code() == Errc::forbidden);
    CHECK(contains(e.what(), srv.url()));
    CHECK(contains(e.what(), "HTTP 403"));
  }
  {
    OneShotServer srv({http_response("503 Service Unavailable", R"({"status":"draining"})")});
    CHECK(sbx::check_manager_health(cfg, srv.url()) == std::optional<std::string>("HTTP 503: draining"));
  }
  {
    OneShotServer srv({http_response("200 OK", "<html>hi</html>", "text/html")});
    auto reason = sbx::check_manager_health(cfg, srv.url());
    REQUIRE(reason);
    CHECK(contains(*reason, "JSON"));
  }
}

TEST_CASE("remote: error bodies map back to sbx errors", "[remote]") {
  TempDir dir("remote");
  sbx::Config cfg = config_in(dir);
  {
    OneShotServer srv({http_response("404 Not Found",
                                     R"({"error":{"code":"not_found","message":"sandbox sbx_abcdefghijk2 does not exist","hint":"sbx ls"}})")});
    sbx::RemoteBackend be(cfg, srv.url() + "/", kKey);
    auto e = error_of([&] { be.get(kId); });
    CHECK(e.code() == Errc::not_found);
    CHECK(e.message() == "sandbox sbx_abcdefghijk2 does not exist");
    CHECK(e.hint() == "sbx ls");
    CHECK(contains(srv.request(), std::string("GET /v1/sandboxes/") + kId + " HTTP/1.1"));
    CHECK(contains(srv.request(), std::string("X-API-Key: ") + kKey));
  }
  {
    OneShotServer srv({http_response("401 Unauthorized",
                                     R"({"error":{"code":"unauthenticated","message":"missing or wrong API key"}})")});
    sbx::RemoteBackend be(cfg, srv.url(), "wrong");
    auto e = error_of([&] { be.list(); });
    CHECK(e.code() == Errc::unauthenticated);
    CHECK(e.message() == "missing or wrong API key");
    CHECK(contains(e.what(), "manager " + srv.url()));  // which manager refused the key
    CHECK(contains(e.hint(), "ADMIN_API_KEY"));
  }
  {
    OneShotServer srv({http_response("502 Bad Gateway", "upstream broke", "text/plain")});
    sbx::RemoteBackend be(cfg, srv.url(), kKey);
    auto e = error_of([&] { be.list(); });
    CHECK(e.code() == Errc::unavailable);
    CHECK(contains(e.message(), srv.url()));
    CHECK(contains(e.message(), "upstream broke"));
  }
  std::string url = "http://127.0.0.1:" + std::to_string(closed_port());
  sbx::RemoteBackend be(cfg, url, kKey);
  auto e = error_of([&] { be.list(); });
  CHECK(e.code() == Errc::unavailable);
  CHECK(e.message() == "manager " + url + " unreachable: Connection refused");
  CHECK_FALSE(contains(e.what(), kKey));
  CHECK(error_of([&] { sbx::RemoteBackend(cfg, "ftp://x", kKey); }).code() == Errc::invalid_argument);
}

TEST_CASE("remote: create sends the set fields and remembers the id", "[remote]") {
  TempDir dir("remote");
  OneShotServer srv({http_response("201 Created", record_json(kId).dump())});
  sbx::RemoteBackend be(config_in(dir), srv.url(), kKey);
  sbx::SandboxSpec spec;
  spec.driver = "remote";
  spec.labels["k"] = "v";
  auto rec = be.create(spec, nullptr);
  CHECK(rec.id == kId);
  CHECK(rec.state == sbx::SandboxState::running);
  CHECK(contains(srv.request(), "POST /v1/sandboxes HTTP/1.1"));
  json sent = json::parse(body_of(srv.request()));
  CHECK(sent == json{{"labels", {{"k", "v"}}}, {"network", "none"}, {"workdir", "/work"}});
  CHECK(sbx::remote_location(dir.path, kId) == std::optional<std::string>(srv.url()));
}

TEST_CASE("remote: exec streams output as it arrives", "[remote]") {
  TempDir dir("remote");
  std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n";
  OneShotServer srv({head + "{\"stdout\":\"one\\n\"}\n{\"std", "out\":\"two\\n\"}\n",
                     "{\"stderr_b64\":\"" + sbx::base64_encode("\xfe") + "\"}\n{\"stdout\":\"three\\n\"}\n",
                     "{\"exit\":{\"exit_code\":7,\"signal\":0,\"timed_out\":false,\"oom_killed\":true,\"duration_ms\":5,\"error\":\"\"}}\n"},
                    150);
  sbx::RemoteBackend be(config_in(dir), srv.url(), kKey);
  std::vector<std::pair<std::string, std::chrono::steady_clock::time_point>> outs;
  std::string err;
  sbx::ExecIO io;
  io.on_stdout = [&](std::string_view s) { outs.emplace_back(std::string(s), std::chrono::steady_clock::now()); };
  io.on_stderr = [&](std::string_view s) { err += s; };
  io.stdin_data = std::string("in\xff", 3);
  sbx::ExecRequest req;
  req.argv = {"sh", "-c", "x"};
  req.timeout_ms = 1500;
  req.stdin_open = true;
  auto res = be.exec(kId, req, io);
  CHECK(res.exit_code == 7);
  CHECK(res.oom_killed);
  CHECK(res.duration_ms == 5);
  CHECK(err == "\xfe");
  REQUIRE(outs.size() == 3);
  CHECK(outs[0].first == "one\n");
  CHECK(outs[2].first == "three\n");
  // Delivered as the chunks came, not all at the end.
  CHECK(outs[2].second - outs[0].second >= std::chrono::milliseconds(100));
  const std::string& r = srv.request();
  CHECK(contains(r, std::string("POST /v1/sandboxes/") + kId + "/exec HTTP/1.1"));
  CHECK(contains(r, "Accept: application/x-ndjson"));
  json sent = json::parse(body_of(r));
  CHECK(sent == json{{"cmd", {"sh", "-c", "x"}}, {"timeout_s", 1.5}, {"stdin_b64", sbx::base64_encode("in\xff")}});
}

TEST_CASE("remote: exec ends on a signal from the user or a cut stream", "[remote]") {
  TempDir dir("remote");
  std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n";
  {
    OneShotServer srv({head + "{\"stdout\":\"working\\n\"}\n"}, 0, true);
    sbx::RemoteBackend be(config_in(dir), srv.url(), kKey);
    int pipefd[2];
    REQUIRE(::pipe(pipefd) == 0);
    sbx::ExecIO io;
    io.signal_fd = pipefd[0];
    // Ctrl-C once the command is visibly running.
    io.on_stdout = [&](std::string_view) {
      int sig = SIGINT;
      REQUIRE(::write(pipefd[1], &sig, sizeof sig) == static_cast<ssize_t>(sizeof sig));
    };
    sbx::ExecRequest req;
    req.argv = {"sleep", "100"};
    auto t0 = std::chrono::steady_clock::now();
    auto res = be.exec(kId, req, io);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
    CHECK(res.exit_code == 130);
    CHECK(res.signal == SIGINT);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
  }
  {
    // A silent command: only the transfer's periodic progress check can notice the signal.
    OneShotServer srv({head}, 0, true);
    sbx::RemoteBackend be(config_in(dir), srv.url(), kKey);
    int pipefd[2];
    REQUIRE(::pipe(pipefd) == 0);
    sbx::ExecIO io;
    io.signal_fd = pipefd[0];
    std::thread user([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      int sig = SIGTERM;
      CHECK(::write(pipefd[1], &sig, sizeof sig) == static_cast<ssize_t>(sizeof sig));
    });
    sbx::ExecRequest req;
    req.argv = {"sleep", "100"};
    auto t0 = std::chrono::steady_clock::now();
    auto res = be.exec(kId, req, io);
    auto took = std::chrono::steady_clock::now() - t0;
    user.join();
    CHECK(took < std::chrono::milliseconds(2500));
    CHECK(res.exit_code == 128 + SIGTERM);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
  }
  {
    OneShotServer srv({head + "{\"stdout\":\"partial\\n\"}\n"});
    sbx::RemoteBackend be(config_in(dir), srv.url(), kKey);
    sbx::ExecIO io;
    sbx::ExecRequest req;
    req.argv = {"true"};
    auto e = error_of([&] { be.exec(kId, req, io); });
    CHECK(e.code() == Errc::protocol);
    CHECK(e.message() == "the manager closed the stream before the command finished");
  }
}

TEST_CASE("remote: stat, put and get_files speak tar with the manager", "[remote]") {
  TempDir dir("remote");
  sbx::Config cfg = config_in(dir);
  {
    OneShotServer srv({http_response("200 OK", R"({"path":"/work/a b","type":"dir","mode":493,"size":0,"mtime":5})")});
    sbx::RemoteBackend be(cfg, srv.url(), kKey);
    auto e = be.stat(kId, "/work/a b");
    REQUIRE(e);
    CHECK(e->type == "dir");
    CHECK(e->mode == 0755);
    CHECK(contains(srv.request(), "/stat?path=%2Fwork%2Fa%20b HTTP/1.1"));
  }
  std::string tar;
  {
    OneShotServer srv({"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"});
    sbx::RemoteBackend be(cfg, srv.url(), kKey);
    VectorSource src({{entry("", "dir"), ""}, {entry("f.txt", "file", 5), "hello"}});
    CHECK(be.put(kId, "/work/up/", src, 100) == 5);
    const std::string& r = srv.request();
    CHECK(contains(r, "PUT /v1/sandboxes/" + std::string(kId) + "/files?path=%2Fwork HTTP/1.1"));
    CHECK(contains(r, "Content-Type: application/x-tar"));
    CHECK(contains(r, "Transfer-Encoding: chunked"));  // streamed: its size is not known up front
    tar = dechunk(body_of(r));
  }
  // The uploaded tar, served back, reads as the original tree.
  {
    OneShotServer srv({http_response("200 OK", tar, "application/x-tar")});
    sbx::RemoteBackend be(cfg, srv.url(), kKey);
    CollectSink sink;
    CHECK(be.get_files(kId, "/work/up", sink, 100) == 5);
    REQUIRE(sink.got.size() == 2);
    CHECK(sink.got[0].first == "");
    CHECK(sink.got[1] == std::pair<std::string, std::string>{"f.txt", "hello"});
    CHECK(contains(srv.request(), "/files?path=%2Fwork%2Fup&format=tar HTTP/1.1"));
  }
  {
    OneShotServer srv({http_response("200 OK", tar, "application/x-tar")});
    sbx::RemoteBackend be(cfg, srv.url(), kKey);
    CollectSink sink;
    CHECK(error_of([&] { be.get_files(kId, "/work/up", sink, 2); }).code() == Errc::too_large);
  }
}

TEST_CASE("remote: a name travels in the create body and is remembered beside the id", "[remote][names]") {
  sbx::SandboxSpec spec;
  spec.name = "web";
  json j = sbx::spec_request_json(spec);
  CHECK(j.at("name") == "web");
  CHECK(j.get<sbx::SandboxSpec>().name == "web");

  TempDir dir("remote");
  CHECK_FALSE(sbx::remote_named(dir.path, "web"));
  sbx::remember_remote(dir.path, kId, "https://m:8000", "web");
  CHECK(sbx::remote_named(dir.path, "web") == std::optional<std::string>(kId));
  CHECK(sbx::remote_sandboxes(dir.path).size() == 1);  // names are no entries of their own
  // The latest sandbox created with the name keeps it; a forgotten one answers to it no more.
  sbx::remember_remote(dir.path, "sbx_222222222222", "https://m:8000", "web");
  CHECK(sbx::remote_named(dir.path, "web") == std::optional<std::string>("sbx_222222222222"));
  sbx::forget_remote(dir.path, "sbx_222222222222");
  CHECK_FALSE(sbx::remote_named(dir.path, "web"));
  CHECK_FALSE(sbx::remote_named(dir.path, "../remote"));
}

// A tree whose second file cannot be read: the copy fails midway.
class FailingSource : public sbx::EntrySource {
 public:
  bool next(sbx::FileEntry& e) override {
    e = entry(n_ == 0 ? "" : "f" + std::to_string(n_), n_ == 0 ? "dir" : "file", 3);
    return n_++ < 3;
  }
  bool read(std::string& chunk) override {
    if (n_ == 3) throw sbx::Error(Errc::io, "cannot read f2: Input/output error");
    if (sent_ == n_) return false;
    sent_ = n_;
    chunk = "abc";
    return true;
  }

 private:
  int n_ = 0, sent_ = 0;
};

TEST_CASE("remote: an upload whose source fails midway is cut off, never ended", "[remote]") {
  TempDir dir("remote");
  OneShotServer srv({"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"});
  sbx::RemoteBackend be(config_in(dir), srv.url(), kKey);
  FailingSource src;
  auto e = error_of([&] { be.put(kId, "/work/up", src, 1 << 20); });
  CHECK(e.code() == Errc::io);
  CHECK(contains(e.message(), "cannot read f2"));  // the source's own error, not the transport's
  const std::string& r = srv.request();
  CHECK(contains(r, "Transfer-Encoding: chunked"));
  // The manager must see a body cut off (so it writes nothing), not a short one that looks whole.
  CHECK(r.size() >= 5);
  CHECK(r.compare(r.size() - 5, 5, "0\r\n\r\n") != 0);
}
