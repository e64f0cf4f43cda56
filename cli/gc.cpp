// sbx gc: collect idle, expired and dead sandboxes and orphaned resources.
#include <cstdio>

#include "cli/common.hpp"

namespace sbx::cli {

void register_gc(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("gc", "Remove idle, expired and dead sandboxes and orphans");
  struct State {
    bool dry_run = false, json = false;
  };
  auto st = std::make_shared<State>();
  sub->add_flag("--dry-run", st->dry_run, "list what would be done, change nothing");
  sub->add_flag("--json", st->json, "JSON report");
  sub->callback([&g, &out, st] {
    Config cfg = load_config(g);
    int failures = 0;
    nlohmann::json arr = nlohmann::json::array();
    for (auto& backend : all_backends(cfg)) {
      std::string where = backend->where();
      for (auto& a : backend->gc(st->dry_run).actions) {
        if (!st->dry_run && !a.done) ++failures;
        arr.push_back({{"kind", a.kind}, {"target", a.target}, {"reason", a.reason}, {"done", a.done},
                       {"error", a.error}, {"where", where}});
        if (st->json) continue;
        const char* verb = st->dry_run ? "would remove" : a.done ? "removed" : "failed to remove";
        std::printf("%s %s %s%s: %s%s%s\n", verb, a.kind.c_str(), a.target.c_str(),
                    where == "local" ? "" : (" on " + where).c_str(), a.reason.c_str(), a.error.empty() ? "" : " — ",
                    a.error.c_str());
      }
    }
    if (st->json) std::printf("%s\n", nlohmann::json{{"dry_run", st->dry_run}, {"actions", arr}}.dump(2).c_str());
    else if (arr.empty()) std::printf("nothing to collect\n");
    out.status = failures ? exit_status(Errc::io) : 0;
  });
}

}  // namespace sbx::cli
