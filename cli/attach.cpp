// sbx attach: this terminal (or stdin and stdout) to a background process
// again: its kept output first, then live; detach with Ctrl-P Ctrl-Q.
#include <cstdio>
#include <optional>

#include "cli/common.hpp"
#include "cli/interactive.hpp"
#include "core/fsutil.hpp"

namespace sbx::cli {

void register_attach(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("attach", "Attach to a background process (detach with Ctrl-P Ctrl-Q)");
  auto args = std::make_shared<std::vector<std::string>>();
  sub->add_option("args", *args, "ID PID");
  sub->footer("Exit status: the process's own once it ends; 0 after detaching.");
  sub->callback([&g, &out, args] {
    if (args->size() != 2) throw Error(Errc::usage, "sbx attach takes a sandbox and a pid").set_hint("sbx attach ID PID");
    int pid = parse_pid((*args)[1]);
    Config cfg = load_config(g);
    std::string id = (*args)[0];
    auto backend = backend_for_existing(cfg, id);
    bool on_terminal = false;
    for (auto& p : backend->processes(id))
      if (p.pid == pid) on_terminal = p.tty;
    ExecIO io;
    io.on_stdout = [](std::string_view d) { write_all(1, d); };
    io.on_stderr = [](std::string_view d) { write_all(2, d); };
    io.stdin_fd = 0;
    io.detach_keys = true;
    AttachOptions opts;
    opts.input = true;
    std::optional<ExecResult> res;
    {
      // A process on a terminal gets this one, raw, at its current size. Killing
      // sbx detaches (the terminal is put back first); the process goes on.
      std::optional<TerminalSession> terminal;
      if (on_terminal && is_tty(0)) terminal.emplace(io, true, true);
      res = backend->attach(id, pid, opts, io);
    }
    if (res) return void(out.status = res->exit_code);
    std::fprintf(stderr, "sbx: detached from process %d, which runs on (`sbx attach %s %d` again, `sbx kill %s %d` ends it)\n",
                 pid, id.c_str(), pid, id.c_str(), pid);
    out.status = 0;
  });
}

}  // namespace sbx::cli
