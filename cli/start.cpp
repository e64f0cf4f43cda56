// sbx start: bring a persistent sandbox back, with its files, after its agent
// went away (a host reboot): its disk is attached again and its agent started.
#include <cstdio>

#include "cli/common.hpp"

namespace sbx::cli {

void register_start(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("start", "Start a stopped persistent sandbox again, with its files");
  auto ids = std::make_shared<std::vector<std::string>>();
  sub->add_option("ids", *ids, "sandbox ids (or unambiguous prefixes)")->required();
  sub->callback([&g, &out, ids] {
    Config cfg = load_config(g);
    int failures = 0;
    for (auto& id : *ids) {
      try {
        std::printf("%s\n", backend_for_existing(cfg, id)->start(id).id.c_str());
      } catch (const Error& e) {
        print_error(e);
        ++failures;
      }
    }
    out.status = failures ? exit_status(Errc::io) : 0;
  });
}

}  // namespace sbx::cli
