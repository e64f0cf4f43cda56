// The host's AgentClient (core/agent_client.cpp) reading answers from an agent
// that sandboxed code controls: the input is what the "agent" sends on the
// stream, replayed over a socketpair for each kind of request. A malformed
// answer must come back as an sbx::Error, never as a crash or another exception.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "core/agent_client.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace {

// A client whose agent already sent `answer` and then shut its sending side:
// the client reads the answer then EOF; its requests land unread in the buffer.
struct Replay {
  sbx::Fd agent;
  std::unique_ptr<sbx::AgentClient> client;
  explicit Replay(std::string_view answer) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
    agent = sbx::Fd(sv[1]);
    client = std::make_unique<sbx::AgentClient>(sbx::Fd(sv[0]));
    sbx::write_all(agent.get(), answer);
    ::shutdown(agent.get(), SHUT_WR);
  }
  sbx::AgentClient* operator->() { return client.get(); }
};

template <typename F>
void expect_error_only(F&& f) {
  try {
    f();
  } catch (const sbx::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Past a socket buffer the write would block: real answers are fed as read; the fuzzer's stay small.
  if (size > 64 * 1024) return 0;
  std::string_view answer = sbx_fuzz::as_view(data, size);
  expect_error_only([&] { Replay(answer)->ping(100); });
  expect_error_only([&] { Replay(answer)->list("/", true); });
  expect_error_only([&] { Replay(answer)->processes(); });
  expect_error_only([&] {
    std::string sink;
    Replay(answer)->read_file("/f", [&](std::string_view c) { sink.append(c); });
  });
  expect_error_only([&] {
    sbx::ExecRequest req;
    req.argv = {"true"};
    sbx::ExecIO io;
    io.on_stdout = io.on_stderr = [](std::string_view) {};
    Replay(answer)->exec(req, io);
  });
  expect_error_only([&] {
    sbx::ExecRequest req;
    req.argv = {"true"};
    req.background = true;
    sbx::ExecIO io;
    Replay(answer)->exec(req, io);
  });
  expect_error_only([&] {
    sbx::FileEntry meta;
    meta.type = "file";
    bool sent = false;
    Replay(answer)->write_entry("/f", meta, [&](std::string& chunk) {
      chunk = "x";
      return !std::exchange(sent, true);
    });
  });
  return 0;
}
