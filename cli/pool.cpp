// sbx pool: the warm pool of this host's state root (core/pool.hpp), for
// hosts without a manager; `sbx serve` keeps its own pool filled by itself.
#include <algorithm>
#include <cstdio>

#include <fmt/core.h>

#include "backends/drivers.hpp"
#include "cli/common.hpp"
#include "core/local_backend.hpp"

namespace sbx::cli {

void register_pool(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("pool", "Fill, show or drain the warm pool of pre-started sandboxes");
  sub->require_subcommand(1);
  struct State {
    bool json = false;
    std::string driver;
  };
  auto st = std::make_shared<State>();

  auto* fill = sub->add_subcommand("fill", "Start sandboxes until each driver's pool has its configured size");
  fill->callback([&g, &out] {
    Config cfg = load_config(g);
    bool any = false;
    for (auto& [d, n] : cfg.pool_sizes) any = any || n > 0;
    if (!any)
      throw Error(Errc::invalid_argument, "no pool is configured")
          .set_hint("set SBX_POOL=subprocess=2 or `pool: {subprocess: 2}` in the config file");
    LocalBackend local(cfg, builtin_drivers());
    auto rep = local.fill_pool();
    for (auto& id : rep.started) std::printf("%s\n", id.c_str());
    for (auto& [d, why] : rep.errors) print_error(Error(Errc::unavailable, "cannot fill the " + d + " pool: " + why));
    out.status = rep.errors.empty() ? 0 : exit_status(Errc::unavailable);
  });

  auto* status = sub->add_subcommand("status", "Show each driver's pool: size, ready, starting, stale");
  status->add_flag("--json", st->json, "JSON array, one object per driver");
  status->callback([&g, &out, st] {
    Config cfg = load_config(g);
    LocalBackend local(cfg, builtin_drivers());
    auto rows = local.pool_status();
    if (st->json) {
      nlohmann::json arr = nlohmann::json::array();
      for (auto& r : rows)
        arr.push_back({{"driver", r.driver}, {"size", r.size}, {"ready", r.ready}, {"starting", r.starting},
                       {"stale", r.stale}, {"problem", r.problem}});
      std::printf("%s\n", arr.dump(2).c_str());
    } else {
      // A pool is a driver's, or a snapshot's (snapshot:NAME): the column fits the longest.
      size_t w = 11;
      for (auto& r : rows) w = std::max(w, r.driver.size());
      std::string table = fmt::format("{:<{}} {:>4} {:>5} {:>8} {:>5}  {}\n", "POOL", w, "SIZE", "READY", "STARTING",
                                      "STALE", "PROBLEM");
      for (auto& r : rows)
        table += fmt::format("{:<{}} {:>4} {:>5} {:>8} {:>5}  {}\n", r.driver, w, r.size, r.ready, r.starting, r.stale,
                             r.problem);
      std::fputs(table.c_str(), stdout);
    }
    out.status = 0;
  });

  auto* drain = sub->add_subcommand("drain", "Remove the pooled (unclaimed) sandboxes");
  drain->add_option("--driver", st->driver, "only this driver's pool")->type_name("NAME");
  drain->callback([&g, &out, st] {
    Config cfg = load_config(g);
    LocalBackend local(cfg, builtin_drivers());
    for (auto& id : local.drain_pool(st->driver)) std::printf("%s\n", id.c_str());
    out.status = 0;
  });
}

}  // namespace sbx::cli
