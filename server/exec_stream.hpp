// How the API streams a command as NDJSON while it runs. The rule for a
// client that vanishes is the same as for a buffered exec (ExecIO::hangup_fd):
// its command is killed with its whole tree, unless the request said `detach`.
#pragma once

#include <functional>
#include <memory>

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

}  // namespace sbx::server
