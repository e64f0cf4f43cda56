#include "backends/runsc/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "backends/common/process.hpp"
#include "backends/runsc/runsc.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::runsc {

namespace {

pid_t read_pid(const std::string& path) {
  try {
    return static_cast<pid_t>(std::stol(read_file_if_exists(path).value_or("")));
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

std::string log_tail(const std::string& path, size_t max) {
  auto text = read_file_if_exists(path).value_or("");
  if (text.size() > max) text = "..." + text.substr(text.size() - max);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "(empty log)" : text;
}

void checkpoint(const Container& c, const std::string& image) {
  auto r = call(c.global, {"checkpoint", "--image-path", image, c.id}, 60'000);
  if (r.timed_out) throw Error(Errc::timeout, "runsc checkpoint " + c.id + " did not finish within 60 s");
  if (r.status != 0) {
    // runsc's answer is a Go panic trace: its first line names the object it could not save.
    std::string why = r.output.substr(0, r.output.find('\n'));
    throw Error(Errc::io, "runsc checkpoint " + c.id + " failed (exit " + std::to_string(r.status) +
                              "): " + why.substr(0, 600));
  }
}

pid_t restore(const Container& c, const std::string& image, const cgroup::Group& group, int timeout_ms) {
  std::string pid_file = c.dir + "/sandbox.pid", log = c.dir + "/agent.log";
  ::unlink(pid_file.c_str());
  Fd logfd(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!logfd) throw sys_error("cannot open " + log, errno);
  std::vector<std::string> args = c.global;
  for (const std::string& a : {std::string("restore"), std::string("--detach"), std::string("--bundle"), c.dir + "/bundle",
                               std::string("--image-path"), image, std::string("--pid-file"), pid_file, c.id})
    args.push_back(a);
  proc::RunOptions o;
  o.timeout_ms = timeout_ms;
  o.output_fd = logfd.get();
  o.group = &group;
  // This runsc's restore --detach brings the sandbox back but may not return (issue 15 measured
  // over 60 s): back means the pid file names a live sandbox that `runsc kill` reaches, and the
  // signal it delivers is the agent's cue to listen again.
  pid_t pid = 0;
  auto last_try = std::chrono::steady_clock::time_point{};
  auto ready = [&] {
    pid = read_pid(pid_file);
    if (pid <= 0 || ::kill(pid, 0) != 0) return false;
    auto now = std::chrono::steady_clock::now();
    if (now - last_try < std::chrono::milliseconds(100)) return false;
    last_try = now;
    return call(c.global, {"kill", c.id, "USR1"}, 5'000).status == 0;
  };
  auto r = proc::run(args, o, ready);
  if (r.timed_out)
    throw Error(Errc::timeout, "runsc restore " + c.id + " brought no sandbox back within " +
                                   std::to_string(timeout_ms / 1000) + " s: " + log_tail(log, 400));
  if (!r.ready) {
    // It returned: either it failed, or it finished before the agent was signalled.
    if (r.status != 0)
      throw Error(Errc::io, "runsc restore " + c.id + " failed (exit " + std::to_string(r.status) + "): " + log_tail(log));
    pid = read_pid(pid_file);
    if (pid <= 0) throw Error(Errc::io, "runsc restore left no sandbox pid in " + pid_file + ": " + log_tail(log));
    auto k = call(c.global, {"kill", c.id, "USR1"}, 5'000);
    if (k.status != 0) throw Error(Errc::io, "runsc kill " + c.id + " USR1 failed: " + k.output.substr(0, 400));
  }
  return pid;
}

void unlock_share(const std::string& sock) {
  // A persistent sandbox started again, or one restored: its share is still locked and holds the old socket.
  ::unlink((sock + "/agent.sock").c_str());
  if (::chown(sock.c_str(), 0, 0) != 0 || ::chmod(sock.c_str(), 0700) != 0)
    throw sys_error("unlocking the agent's share " + sock, errno);
}

void await_agent_socket(const std::string& sock, const std::function<bool()>& alive, const std::string& log,
                        int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (int us = 200; !path_exists(sock + "/agent.sock"); us = std::min(us * 2, 2'000)) {
    if (!alive()) throw Error(Errc::unavailable, "the sandbox's agent exited while starting: " + log_tail(log));
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(Errc::timeout, "the sandbox's agent made no socket within " + std::to_string(timeout_ms / 1000) +
                                     " s: " + log_tail(log));
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
  // The share stays writable only until the socket exists: then it belongs
  // to nobody, so sandboxed code (uid 0 without capabilities) cannot replace
  // the agent's socket with one of its own.
  if (::chown(sock.c_str(), 65534, 65534) != 0 || ::chmod(sock.c_str(), 0555) != 0)
    throw sys_error("locking the agent's share " + sock, errno);
}

}  // namespace sbx::runsc
