// sbx logs: a background process's kept output (stdout to stdout, stderr to
// stderr), and with -f what it writes next, until it exits.
#include "cli/common.hpp"
#include "core/fsutil.hpp"

namespace sbx::cli {

void register_logs(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("logs", "Show a background process's output (kept in the sandbox)");
  struct State {
    std::vector<std::string> args;
    bool follow = false;
    int64_t tail = -1;
  };
  auto st = std::make_shared<State>();
  sub->add_option("args", st->args, "ID PID");
  sub->add_flag("-f,--follow", st->follow, "go on printing what it writes until it exits");
  sub->add_option("--tail", st->tail, "only the last N lines of each stream's kept output")->type_name("N");
  sub->callback([&g, &out, st] {
    if (st->args.size() != 2) throw Error(Errc::usage, "sbx logs takes a sandbox and a pid").set_hint("sbx logs ID PID [-f] [--tail N]");
    if (st->tail < -1) throw Error(Errc::usage, "--tail takes a number of lines (0 or more)");
    int pid = parse_pid(st->args[1]);
    Config cfg = load_config(g);
    std::string id = st->args[0];
    auto backend = backend_for_existing(cfg, id);
    ExecIO io;
    io.on_stdout = [](std::string_view d) { write_all(1, d); };
    io.on_stderr = [](std::string_view d) { write_all(2, d); };
    AttachOptions opts;
    opts.follow = st->follow;
    opts.tail_lines = st->tail;
    backend->attach(id, pid, opts, io);
    out.status = 0;
  });
}

}  // namespace sbx::cli
