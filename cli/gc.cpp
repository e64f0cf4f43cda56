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
    std::vector<PlacedGcAction> actions;
    for (auto& backend : all_backends(cfg))
      for (auto& a : backend->gc(st->dry_run).actions) actions.push_back({backend->where(), std::move(a)});
    out.status = print_gc_report(actions, st->dry_run, st->json);
  });
}

}  // namespace sbx::cli
