// sbx ps: a sandbox's background processes (`sbx exec -d`), as a table or JSON.
#include <cstdio>
#include <cstring>

#include <fmt/core.h>

#include "cli/common.hpp"
#include "core/units.hpp"

namespace sbx::cli {

namespace {

std::string exit_column(const ProcessInfo& p) {
  if (p.state != "exited") return "-";
  if (!p.signal) return std::to_string(p.exit_code);
  const char* name = ::sigabbrev_np(p.signal);
  return fmt::format("{} (SIG{})", p.exit_code, name ? name : std::to_string(p.signal));
}

std::string command_column(const ProcessInfo& p) {
  std::string out;
  for (auto& a : p.argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

}  // namespace

void register_ps(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("ps", "List a sandbox's background processes (sbx exec -d)");
  struct State {
    std::string id;
    bool json = false;
  };
  auto st = std::make_shared<State>();
  sub->add_option("id", st->id, "sandbox id or name");
  sub->add_flag("--json", st->json, "JSON array of processes");
  sub->callback([&g, &out, st] {
    if (st->id.empty()) throw Error(Errc::usage, "no sandbox id given").set_hint("sbx ps ID");
    Config cfg = load_config(g);
    std::string id = st->id;
    auto procs = backend_for_existing(cfg, id)->processes(id);
    if (st->json) {
      nlohmann::json arr = nlohmann::json::array();
      for (auto& p : procs) arr.push_back(p);
      std::printf("%s\n", arr.dump(2).c_str());
      return void(out.status = 0);
    }
    int64_t now = now_ms();
    std::string table = fmt::format("{:<8} {:<8} {:>10} {:>12}  {}\n", "PID", "STATE", "STARTED", "EXIT", "COMMAND");
    for (auto& p : procs) {
      auto ago = static_cast<uint64_t>(std::max<int64_t>(now - p.started_ms, 1000));
      table += fmt::format("{:<8} {:<8} {:>10} {:>12}  {}\n", p.pid, p.state, format_duration_ms(ago / 1000 * 1000) + " ago",
                           exit_column(p), command_column(p));
    }
    std::fputs(table.c_str(), stdout);
    out.status = 0;
  });
}

}  // namespace sbx::cli
