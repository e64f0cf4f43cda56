// sbx exec: run a command in a sandbox (or, with --rm, in a new one-shot
// sandbox), streaming its output and exiting with its status.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

#include "cli/common.hpp"
#include "cli/interactive.hpp"
#include "core/fsutil.hpp"
#include "core/units.hpp"

namespace sbx::cli {

namespace {

int g_signal_pipe = -1;
volatile sig_atomic_t g_hangups = 0;
// The command, split off argv before CLI11 sees it (see split_exec_command).
std::vector<std::string> g_command;

extern "C" void forward_signal(int sig) {
  int saved = errno;
  ssize_t ignored = ::write(g_signal_pipe, &sig, sizeof sig);
  (void)ignored;
  errno = saved;
}

// A session on a raw terminal: sbx told to go is the terminal hanging up, so
// the command hears SIGHUP (an interactive shell ignores SIGTERM); told again,
// its tree is killed.
extern "C" void forward_as_hangup(int) {
  int saved = errno;
  int sig = g_hangups ? SIGKILL : SIGHUP;
  g_hangups = 1;
  ssize_t ignored = ::write(g_signal_pipe, &sig, sizeof sig);
  (void)ignored;
  errno = saved;
}

// Signals sbx receives go to the command's process group instead of killing
// sbx (which would orphan the command's output). On a raw terminal Ctrl-C and
// Ctrl-\ are bytes for the command, so a SIGINT or SIGQUIT sent to sbx itself is ignored.
Fd install_signal_forwarding(bool raw_terminal) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw sys_error("pipe", errno);
  g_signal_pipe = fds[1];
  struct sigaction sa {};
  sa.sa_handler = raw_terminal ? forward_as_hangup : forward_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);
  for (int s : {SIGINT, SIGQUIT}) {
    if (raw_terminal) ::signal(s, SIG_IGN);
    else ::sigaction(s, &sa, nullptr);
  }
  ::signal(SIGPIPE, SIG_IGN);
  return Fd(fds[0]);
}

struct ExecFlags {
  SpecFlags spec;
  bool rm = false, interactive = false, tty = false, detach = false;
  std::vector<std::string> env;
  std::string workdir, timeout;
  std::vector<std::string> args;
};

// The first of a new sandbox's flags that the line gave, or nullptr.
// --driver is not one: it also picks where an id is looked up.
const CLI::Option* new_sandbox_flag(const std::vector<const CLI::Option*>& spec_flags) {
  for (const CLI::Option* opt : spec_flags)
    if (opt->count() > 0 && opt->get_name() != "--driver") return opt;
  return nullptr;
}

// The request the flags ask for, and the checks that need no sandbox.
ExecRequest request_from_flags(const ExecFlags& f) {
  ExecRequest req;
  req.argv = g_command;
  req.env = parse_key_values(f.env, "--env");
  req.cwd = f.workdir;
  if (!f.timeout.empty()) req.timeout_ms = with_context("--timeout", [&] { return parse_duration_ms(f.timeout); });
  req.stdin_open = f.interactive;
  req.background = f.detach;
  if (f.detach && f.rm)
    throw Error(Errc::usage, "--rm and -d do not go together: a one-shot sandbox goes when the call returns")
        .set_hint("create a sandbox (`sbx create`), then `sbx exec -d ID -- CMD`");
  if (f.detach && !f.timeout.empty()) throw Error(Errc::usage, "a background process (-d) takes no --timeout");
  req.tty = f.tty;
  if (f.tty) {
    // A background terminal needs no terminal here (`exec -dt` from a script).
    if (!f.detach && !is_tty(0))
      throw Error(Errc::usage, "-t needs a terminal on sbx's stdin, and stdin is not one")
          .set_hint("run it from a terminal, or drop -t (-i alone streams stdin without a terminal)");
    WindowSize ws = window_size(0);
    req.rows = ws.rows;
    req.cols = ws.cols;
    // The program draws for the host's terminal, so it must know its kind.
    if (const char* term = std::getenv("TERM"); term && *term && !req.env.count("TERM")) req.env["TERM"] = term;
  }
  return req;
}

// `memory_mb` is asked for only when the command was OOM-killed: reading the
// sandbox again costs a warm exec a record read, or a remote one a round trip.
int report(const ExecResult& r, const ExecIO& io, const std::function<uint64_t()>& memory_mb, uint64_t timeout_ms) {
  if (!io.error.empty()) {
    std::fprintf(stderr, "sbx: error: %s\n", io.error.c_str());
    return r.exit_code;
  }
  if (r.timed_out) {
    std::fprintf(stderr, "sbx: error: the command timed out after %s; its process tree was killed\n",
                 format_duration_ms(timeout_ms).c_str());
    return exit_status(Errc::timeout);
  }
  if (r.oom_killed) {
    uint64_t limit = memory_mb ? memory_mb() : 0;
    std::fprintf(stderr, "sbx: error: the command was killed: out of memory (limit %s)\n",
                 limit ? format_size(limit << 20).c_str() : "unknown");
    if (r.sandbox_ended)
      std::fprintf(stderr, "sbx: error: the whole sandbox ended with it (its runtime cannot survive an OOM kill)\n");
    std::fprintf(stderr, "sbx: hint: raise the limit with --memory when creating the sandbox\n");
  }
  return r.exit_code;
}

}  // namespace

std::vector<std::string> split_exec_command(const CLI::App& app, const std::vector<std::string>& args) {
  // The command's own flags must never be read as sbx's, so the command is cut
  // off before parsing: after "--", or else after the sandbox id (with --rm,
  // at the first word that is not an sbx flag), as `docker exec` does.
  g_command.clear();  // a line parsed again (cli/main.cpp) is split again
  auto it = std::find(args.begin(), args.end(), std::string("exec"));
  if (it == args.end()) return args;
  const CLI::App* sub = nullptr;
  for (const CLI::App* candidate : app.get_subcommands([](const CLI::App*) { return true; }))
    if (candidate->get_name() == "exec") sub = candidate;
  if (!sub) return args;
  std::vector<std::string> head(args.begin(), it + 1);
  bool rm = false;
  int positionals = 0;
  for (auto cur = it + 1; cur != args.end(); ++cur) {
    const std::string& tok = *cur;
    if (tok == "--") {
      g_command.assign(cur + 1, args.end());
      return head;
    }
    if (tok.size() > 1 && tok[0] == '-') {
      head.push_back(tok);
      std::string name = tok.substr(0, tok.find('='));
      if (name == "--rm") rm = true;
      const CLI::Option* opt = nullptr;
      try {
        opt = sub->get_option_no_throw(name);
      } catch (...) {
      }
      bool takes_value = opt && opt->get_items_expected_min() > 0 && tok.find('=') == std::string::npos;
      if (takes_value && cur + 1 != args.end()) head.push_back(*++cur);
      continue;
    }
    if (rm || positionals == 1) {
      g_command.assign(cur, args.end());
      return head;
    }
    head.push_back(tok);
    ++positionals;
  }
  return head;
}

void register_exec(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("exec", "Run a command in a sandbox");
  auto st = std::make_shared<ExecFlags>();
  sub->add_flag("--rm", st->rm, "one-shot: create a sandbox, run the command, remove the sandbox");
  sub->add_flag("-i,--interactive", st->interactive, "forward stdin to the command");
  sub->add_flag("-t,--tty", st->tty, "run the command on a terminal (with -i: this terminal in raw mode, as `docker exec -it`)");
  sub->add_flag("-d,--detach", st->detach, "start it in the background and print its pid (see sbx ps, logs, attach, kill)");
  sub->add_option("-e,--env", st->env, "environment variable KEY=VALUE (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  sub->add_option("-w,--workdir", st->workdir, "working directory")->type_name("DIR");
  sub->add_option("--timeout", st->timeout, "kill the command's process tree after this long, e.g. 30s")
      ->type_name("DUR");
  auto spec_flags = add_spec_flags(sub, st->spec);
  sub->add_option("id", st->args, "ID -- CMD [ARG...]  (with --rm: -- CMD [ARG...])");
  sub->footer("Exit status: the command's own; 128+N if killed by signal N; 124 on --timeout;\n"
              "127 if the command was not found; 125 if sbx itself failed.");
  sub->callback([&g, &out, st, spec_flags] {
    std::string id;
    if (!st->rm) {
      if (st->args.empty()) throw Error(Errc::usage, "no sandbox id given").set_hint("sbx exec ID -- CMD [ARG...]");
      id = st->args.front();
    } else if (!st->args.empty()) {
      throw Error(Errc::usage, "--rm takes no sandbox id").set_hint("sbx exec --rm [flags] -- CMD [ARG...]");
    }
    if (!st->rm)
      if (const CLI::Option* opt = new_sandbox_flag(spec_flags)) {
        std::string flag = opt->get_name();
        throw Error(Errc::usage, flag + " describes a new sandbox: it goes with --rm")
            .set_hint("a running sandbox keeps what it was created with; for a new one: sbx exec --rm " + flag +
                      " ... -- CMD [ARG...]");
      }
    if (g_command.empty())
      throw Error(Errc::usage, "no command given").set_hint(st->rm ? "sbx exec --rm -- CMD [ARG...]" : "sbx exec ID -- CMD [ARG...]");
    ExecRequest req = request_from_flags(*st);

    Config cfg = load_config(g, st->spec.driver);
    SandboxSpec spec = spec_from_flags(st->spec);
    std::unique_ptr<Backend> backend = st->rm ? backend_for_new(cfg, spec.driver) : backend_for_existing(cfg, id);
    // Forwarding starts before a one-shot's create: a Ctrl-C while it boots
    // ends the command as soon as it starts, and the sandbox is still removed.
    bool raw = req.tty && req.stdin_open && !req.background;
    Fd sigs = install_signal_forwarding(raw);
    ExecIO io;
    io.on_stdout = [](std::string_view d) { write_all(1, d); };
    io.on_stderr = [](std::string_view d) { write_all(2, d); };
    io.stdin_fd = st->interactive ? 0 : -1;
    io.signal_fd = sigs.get();
    if (req.background) {
      ExecResult r = backend->exec(id, req, io);
      if (!io.error.empty()) return void(out.status = report(r, io, nullptr, 0));
      std::printf("%d\n", r.pid);
      return;
    }
    // The terminal is raw from here until this returns, however it returns.
    std::optional<TerminalSession> terminal;
    if (req.tty) terminal.emplace(io, raw, false);
    if (st->rm) {
      // This process exits with the command's status: the removal need not hold it up.
      backend->tear_down_one_shots_in_background();
      OneShotResult r = backend->run_once(spec, req, io);
      out.status = report(r.exec, io, [&] { return r.spec.limits.memory_mb; }, req.timeout_ms);
      // The result is known; a failure to clean up is reported but does not change it.
      if (!r.cleanup_error.empty())
        warn("could not remove the one-shot sandbox: " + r.cleanup_error + " (`sbx gc` will collect it)");
      return;
    }
    ExecResult r = backend->exec(id, req, io);
    out.status = report(r, io, [&] { return backend->get(id).spec.limits.memory_mb; }, req.timeout_ms);
  });
}

}  // namespace sbx::cli
