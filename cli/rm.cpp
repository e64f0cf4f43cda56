// sbx rm: destroy sandboxes and free what they held.
#include <cstdio>

#include "backends/drivers.hpp"
#include "cli/common.hpp"
#include "core/local_backend.hpp"

namespace sbx::cli {

void register_rm(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("rm", "Remove sandboxes");
  struct State {
    std::vector<std::string> ids;
    bool force = false, all = false;
  };
  auto st = std::make_shared<State>();
  sub->add_option("ids", st->ids, "sandbox ids (or unambiguous prefixes)");
  sub->add_flag("-f,--force", st->force, "no error for ids that do not exist");
  sub->add_flag("--all", st->all, "remove every sandbox");
  sub->callback([&g, &out, st] {
    if (st->ids.empty() && !st->all) throw Error(Errc::usage, "no sandbox named").set_hint("sbx rm ID [ID...] or sbx rm --all");
    Config cfg = load_config(g);
    std::vector<std::string> ids = st->ids;
    // Held to the end: no warm-pool refill (a one-shot's, just returned) starts
    // a spare after the listing, so --all leaves nothing.
    Fd pool_turn;
    LocalBackend local(cfg, builtin_drivers());
    if (st->all) {
      pool_turn = local.settle_pool();
      for (auto& b : all_backends(cfg))
        for (auto& r : b->list()) ids.push_back(r.id);
    }
    int failures = 0;
    for (auto id : ids) {
      try {
        backend_for_existing(cfg, id)->remove(id);
        std::printf("%s\n", id.c_str());
      } catch (const Error& e) {
        if (st->force && e.code() == Errc::not_found) continue;
        print_error(e);
        ++failures;
      }
    }
    // A one-shot's detached teardown past its record is not listed: wait for it too.
    if (st->all) {
      for (auto& path : local.settle_removals()) {
        print_error(Error(Errc::io, "the removal of " + path + " is still under way")
                        .set_hint("its remover held it for " + std::to_string(LocalBackend::kRemovalWaitMs / 1000) +
                                  " s; `sbx gc` finishes it once that process is gone"));
        ++failures;
      }
    }
    out.status = failures ? exit_status(Errc::io) : 0;
  });
}

}  // namespace sbx::cli
