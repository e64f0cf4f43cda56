// The manager's WebSocket sessions from the client's side: the input is what
// a client sends once its upgrade was answered, frames and all. Beast reads
// them through ws::Connection (core/websocket.hpp) started as http_server.cpp
// starts a session (accept_upgraded over the upgraded socket, the bytes
// libmicrohttpd read past the request handed over first), and the session is
// the one Api::handle gave for a WebSocket route (server/api_ws.cpp), over the
// unit tests' fake backend: exec (its first message the exec request), the
// one-shot run, attach, or a TCP tunnel (ws::relay). Every message goes
// through the route's own decoding (stdin, eof, signal, resize, detach; the
// tunnel's data and eof). The session ends when the client's bytes do, and
// the command only ever sees valid signals and window sizes.
//
// Input: one byte of options, then the client's bytes.
//   bits 0-1: the route: exec, run, attach, tcp
//   bits 2-4: how many of the client's bytes came with its request (extra_in):
//             none, all, 1, 2, 6, 14, 127, half
//   bits 5-6: what the bytes are:
//             0, 3: the frames themselves;
//             1:    messages, one a line, which the harness frames as a client
//                   library would (binary when the line starts with a byte below
//                   0x09, as stdin's 0 does; else text), so that mutations reach
//                   the JSON without breaking a frame's length;
//             2:    choices (FuzzedDataProvider) of messages the harness makes:
//                   JSON objects with the protocol's keys, or others, and values
//                   of every JSON type at their edges; binary stdin; raw text.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <fuzzer/FuzzedDataProvider.h>
#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/driver.hpp"
#include "core/fsutil.hpp"
#include "core/websocket.hpp"
#include "server/api.hpp"
#include "tests/fuzz/fuzz_api.hpp"
#include "tests/fuzz/fuzz_util.hpp"
#include "tests/unit/fake_backend.hpp"

namespace {

std::vector<sbx::Probe> no_probes(const sbx::Config&, bool) { return {}; }
std::unique_ptr<sbx::Driver> no_driver(const sbx::Config&) { return nullptr; }

constexpr char kClientKey[] = "dGhlIHNhbXBsZSBub25jZQ==";
constexpr int kPid = 7;
const char* const kRoutes[] = {"/v1/sandboxes/ID/exec/ws", "/v1/run/ws", "/v1/sandboxes/ID/processes/7/attach",
                               "/v1/sandboxes/ID/tcp/8080"};

// The command of an exec or attach: takes its stdin to EOF, signals and window
// sizes as they come, until the manager hangs up (the client went away, or detached).
void command(sbx::ExecIO& io) {
  bool in_open = io.stdin_fd >= 0;
  for (;;) {
    pollfd p[4] = {{in_open ? io.stdin_fd : -1, POLLIN, 0},
                   {io.signal_fd, POLLIN, 0},
                   {io.resize_fd, POLLIN, 0},
                   {io.hangup_fd, POLLRDHUP, 0}};
    if (::poll(p, 4, -1) < 0) {
      if (errno == EINTR) continue;
      std::abort();
    }
    if (p[0].revents) {
      char buf[4096];
      if (::read(io.stdin_fd, buf, sizeof buf) <= 0) in_open = false;
    }
    if (p[1].revents & POLLIN) {
      int sig = 0;
      if (::read(io.signal_fd, &sig, sizeof sig) == sizeof sig && (sig < 1 || sig > 64)) std::abort();
    }
    if (p[2].revents & POLLIN) {
      sbx::WindowSize w;
      if (::read(io.resize_fd, &w, sizeof w) == sizeof w && (!w.rows || !w.cols)) std::abort();
    }
    if (p[3].revents) return;
  }
}

using nlohmann::json;

// A client's frame for one message: FIN set, masked with an all-zero key (a
// client must mask; this key leaves the payload as it is).
void frame(std::string& out, bool binary, std::string_view m) {
  out += static_cast<char>(0x80 | (binary ? 2 : 1));
  if (m.size() < 126) {
    out += static_cast<char>(0x80 | m.size());
  } else {  // the input is under 64 KiB
    out += static_cast<char>(0x80 | 126);
    out += static_cast<char>(m.size() >> 8);
    out += static_cast<char>(m.size() & 0xff);
  }
  out.append(4, '\0');
  out += m;
}

// Mode 1: a message a line.
std::string framed_lines(std::string_view lines) {
  std::string out;
  for (size_t pos = 0; pos <= lines.size();) {
    size_t end = std::min(lines.find('\n', pos), lines.size());
    std::string_view m = lines.substr(pos, end - pos);
    pos = end + 1;
    frame(out, !m.empty() && static_cast<unsigned char>(m[0]) < 0x09, m);
  }
  return out;
}

const char* const kKeys[] = {"eof",  "detach", "signal", "resize",     "rows",       "cols",      "cmd",
                             "tty",  "env",    "cwd",    "background", "stdin_open", "timeout_s", "stdin",
                             "stdin_b64", "sandbox", "limits", "image"};

json any_value(FuzzedDataProvider& in, int depth) {
  switch (in.ConsumeIntegralInRange(0, depth > 2 ? 7 : 9)) {
    case 0: return nullptr;
    case 1: return in.ConsumeBool();
    case 2: return in.ConsumeIntegralInRange<int64_t>(-3, 70000);
    case 3: return in.ConsumeIntegral<int64_t>();
    case 4: return in.ConsumeIntegral<uint64_t>();
    case 5: return in.ConsumeFloatingPoint<double>();
    case 6: return in.ConsumeProbability<double>() * 100;
    case 7: return in.ConsumeRandomLengthString(12);
    case 8: {
      json a = json::array();
      for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n) a.push_back(any_value(in, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int n = in.ConsumeIntegralInRange(0, 4); n > 0; --n) {
        std::string key = in.ConsumeBool() ? in.PickValueInArray(kKeys) : in.ConsumeRandomLengthString(8);
        o[key] = any_value(in, depth + 1);
      }
      return o;
    }
  }
}

// Mode 2: messages made from the input's choices.
std::string framed_choices(std::string_view bytes) {
  FuzzedDataProvider in(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  std::string out;
  while (in.remaining_bytes() > 0) {
    switch (in.ConsumeIntegralInRange(0, 5)) {
      case 0: frame(out, true, std::string(1, '\0') + in.ConsumeRandomLengthString(32)); break;  // stdin
      case 1: frame(out, in.ConsumeBool(), in.ConsumeRandomLengthString(32)); break;
      default: {
        json o = json::object();
        for (int n = in.ConsumeIntegralInRange(1, 4); n > 0; --n) o[in.PickValueInArray(kKeys)] = any_value(in, 1);
        frame(out, false, o.dump(-1, ' ', false, json::error_handler_t::replace));
      }
    }
  }
  return out;
}

std::string with_id(std::string path, const std::string& id) {
  if (auto at = path.find("ID"); at != std::string::npos) path.replace(at, 2, id);
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The client's bytes go into a socket before the session reads them: more than its buffer never fit.
  if (size < 1 || size > 64 * 1024) return 0;
  static bool sigpipe_ignored = [] { return ::signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();  // as sbx serve does
  (void)sigpipe_ignored;
  static sbx_fuzz::TempDir state;
  static sbx::DriverTable drivers{sbx::DriverInfo{"subprocess", "fake", &no_probes, &no_driver, true}};
  static sbx::server::ApiKey alice{"alice", "alice-secret-0123456789",
                                   sbx::server::kRead | sbx::server::kWrite | sbx::server::kRun};
  const uint8_t options = data[0];
  const std::string_view bytes = sbx_fuzz::as_view(data + 1, size - 1);
  const int mode = (options >> 5) & 3;
  const std::string frames = mode == 1 ? framed_lines(bytes) : mode == 2 ? framed_choices(bytes) : std::string();
  const std::string_view client = mode == 1 || mode == 2 ? std::string_view(frames) : bytes;
  if (client.size() > 64 * 1024) return 0;
  const size_t with_request[] = {0, client.size(), 1, 2, 6, 14, 127, client.size() / 2};
  const size_t extra = std::min(with_request[(options >> 2) & 7], client.size());
  const int route = options & 3;

  sbx_test::FakeBackend backend;
  sbx::SandboxRecord rec;
  rec.id = sbx::new_sandbox_id();
  rec.spec.driver = "subprocess";
  rec.spec.labels[sbx::kOwnerLabel] = "alice";
  rec.state = sbx::SandboxState::running;
  backend.add(rec);
  sbx::ProcessInfo proc;
  proc.pid = kPid;
  backend.set_processes(rec.id, {proc});
  backend.set_script([](const std::string&, const sbx::ExecRequest&, sbx::ExecIO& io) {
    command(io);
    return sbx::ExecResult{};
  });
  backend.set_attach([](const std::string&, int, const sbx::AttachOptions&, sbx::ExecIO& io) {
    command(io);
    return std::optional<sbx::ExecResult>();  // detached
  });
  // The server behind the tunnel: says hello, then takes what comes until its EOF.
  auto served = std::make_shared<std::promise<void>>();
  std::future<void> served_done = served->get_future();
  backend.set_port_handler([served](sbx::Fd s) {
    try {
      sbx::write_all(s.get(), "hello from the sandbox");
    } catch (const sbx::Error&) {
    }
    ::shutdown(s.get(), SHUT_WR);
    char buf[4096];
    while (::read(s.get(), buf, sizeof buf) > 0) {
    }
    s.reset();
    served->set_value();
  });
  auto api = sbx_fuzz::make_api(state.path, drivers, backend, alice);

  sbx::server::HttpRequest req;
  req.method = "GET";
  req.path = req.raw_target = with_id(kRoutes[route], rec.id);
  req.key = &alice;
  req.request_id = "fuzz";
  req.websocket_key = kClientKey;
  sbx::server::HttpResponse r = api->handle(req);
  if (r.status != 101 || !r.websocket) std::abort();

  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) std::abort();
  sbx::Fd manager(sp[0]), peer(sp[1]);
  // The client sent its bytes and then stopped sending; it reads what the manager sends (pongs, output, the close).
  sbx::write_all(peer.get(), client.substr(extra));
  ::shutdown(peer.get(), SHUT_WR);
  std::thread reader([fd = peer.get()] {
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
  });
  {
    auto c = sbx::ws::Connection::accept_upgraded(manager.get(), kClientKey, client.substr(0, extra));
    // A session still on after half a second (they take milliseconds) is one waiting on
    // Beast: after the manager's close, a protocol error in frames already read leaves
    // Beast 1.74's read and close each holding the lock the other waits for, until the
    // manager's 5 s close timer drops the connection. The watchdog drops it the same way
    // (Connection::abort, as that timer does), so such inputs cost 0.5 s and not 5. A
    // thread that never returns (the command, the io thread) still hangs: a timeout.
    std::mutex mu;
    std::condition_variable cv;
    bool over = false;
    std::thread watchdog([&] {
      std::unique_lock lock(mu);
      if (!cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return over; })) c->abort();
    });
    r.websocket(*c);
    {
      std::lock_guard lock(mu);
      over = true;
    }
    cv.notify_all();
    watchdog.join();
  }
  r.websocket = nullptr;
  ::shutdown(manager.get(), SHUT_RDWR);  // as the HTTP layer closes the socket after the session
  reader.join();
  if (route == 3) served_done.wait();
  return 0;
}
