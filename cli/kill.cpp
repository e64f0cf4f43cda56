// sbx kill: a signal to a background process's whole tree (SIGKILL unless told).
#include <signal.h>
#include <string.h>

#include <cctype>

#include "cli/common.hpp"

namespace sbx::cli {

namespace {

// 9, KILL, SIGKILL or kill.
int parse_signal(const std::string& text) {
  std::string name;
  for (char c : text) name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.rfind("SIG", 0) == 0) name.erase(0, 3);
  size_t used = 0;
  int n = -1;
  try {
    n = std::stoi(name, &used);
  } catch (...) {
  }
  if (used == name.size() && n > 0 && n < NSIG) return n;
  for (int sig = 1; sig < NSIG; ++sig)
    if (const char* abbrev = ::sigabbrev_np(sig); abbrev && name == abbrev) return sig;
  throw Error(Errc::usage, "unknown signal '" + text + "'").set_hint("give a name (TERM, KILL, INT, HUP, ...) or a number");
}

}  // namespace

void register_kill(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("kill", "Signal a background process and everything it started");
  struct State {
    std::vector<std::string> args;
    std::string signal = "KILL";
  };
  auto st = std::make_shared<State>();
  sub->add_option("args", st->args, "ID PID");
  sub->add_option("-s,--signal", st->signal, "the signal, by name or number (default KILL)")->type_name("SIG");
  sub->callback([&g, &out, st] {
    if (st->args.size() != 2) throw Error(Errc::usage, "sbx kill takes a sandbox and a pid").set_hint("sbx kill ID PID [-s SIG]");
    int pid = parse_pid(st->args[1]);
    int sig = parse_signal(st->signal);
    Config cfg = load_config(g);
    std::string id = st->args[0];
    backend_for_existing(cfg, id)->signal_process(id, pid, sig);
    out.status = 0;
  });
}

}  // namespace sbx::cli
