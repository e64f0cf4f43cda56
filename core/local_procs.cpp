// LocalBackend's calls for background processes (`sbx exec -d`, ps, logs,
// attach, kill): each a request to the sandbox's agent, which keeps the table.
#include "core/local_backend.hpp"

namespace sbx {

void check_background_request(const ExecRequest& req, bool one_shot) {
  if (!req.background) return;
  if (one_shot)
    throw Error(Errc::usage, "a one-shot sandbox cannot keep a background process: it is removed when the call returns")
        .set_hint("create a sandbox (`sbx create`), then `sbx exec -d ID -- CMD`");
  if (req.timeout_ms)
    throw Error(Errc::usage, "a background process takes no timeout").set_hint("stop it with `sbx kill ID PID`");
}

template <class F>
auto LocalBackend::with_processes(const std::string& id, F&& f) {
  SandboxRecord rec = registry_.get(id);
  resume_if_paused(rec);
  auto driver = driver_for(rec);
  // Not an exec: looking at or signalling a process is no activity for idle gc
  // (a running background process is, through ping's `running`).
  AgentClient agent = connect(rec, *driver);
  try {
    return f(agent);
  } catch (Error& e) {
    if (e.code() == Errc::not_found) throw Error(Errc::not_found, std::string(e.what()) + " (see `sbx ps " + rec.id + "`)");
    throw;
  }
}

std::vector<ProcessInfo> LocalBackend::processes(const std::string& id) {
  return with_processes(id, [](AgentClient& agent) { return agent.processes(); });
}

std::optional<ExecResult> LocalBackend::attach(const std::string& id, int pid, const AttachOptions& opts, ExecIO& io) {
  return with_processes(id, [&](AgentClient& agent) { return agent.attach(pid, opts, io); });
}

void LocalBackend::signal_process(const std::string& id, int pid, int sig) {
  with_processes(id, [&](AgentClient& agent) {
    agent.signal_process(pid, sig);
    return 0;
  });
}

}  // namespace sbx
