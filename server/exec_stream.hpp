// How the API runs a command for a client that may vanish: ExecStream sends
// it as NDJSON while it runs; HangupWatch kills a buffered one whose client
// hung up. The rule is the same for both: a command whose client is gone is
// killed with its whole tree, unless the request said `detach`.
#pragma once

#include <functional>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/agent_client.hpp"
#include "core/fd.hpp"
#include "server/api.hpp"

namespace sbx::server {

/// Streams one exec as NDJSON: a worker thread runs the command and writes
/// lines into a pipe; the HTTP layer reads the pipe as the response body.
class ExecStream : public ResponseStream, public std::enable_shared_from_this<ExecStream> {
 public:
  /// `in_flight` counts the worker while it runs (the drain waits for it).
  ExecStream(std::atomic<int>& in_flight, int client_fd, bool detach);
  /// Starts the worker; `work` runs the command with io and returns the exit line.
  void start(std::function<nlohmann::json(ExecIO&)> work);
  ssize_t read(char* buf, size_t max) override;
  void cancel() override;
  /// Kills the command; the stream then ends with its exit line.
  void interrupt();

 private:
  std::atomic<int>& in_flight_;
  int client_fd_;
  bool detach_;
  Fd out_r_, out_w_, sig_r_, sig_w_;
};

/// While alive, watches a buffered exec's connection and sends SIGKILL to
/// the command (through the signal pipe it gives the ExecIO) when the client hangs up.
class HangupWatch {
 public:
  /// `client_fd` < 0 or `detach`: watches nothing, but still gives a signal pipe.
  HangupWatch(int client_fd, bool detach);
  ~HangupWatch();
  HangupWatch(const HangupWatch&) = delete;
  HangupWatch& operator=(const HangupWatch&) = delete;
  /// The descriptor for ExecIO::signal_fd.
  int signal_fd() const { return sig_r_.get(); }

 private:
  Fd sig_r_, sig_w_, stop_r_, stop_w_;
  std::thread watcher_;
};

/// Whether the peer of a connected socket has hung up (POLLRDHUP/HUP/ERR), waiting up to `timeout_ms`.
bool client_gone(int client_fd, int also_fd, int timeout_ms);

}  // namespace sbx::server
