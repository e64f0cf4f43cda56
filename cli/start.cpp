// sbx start: bring a persistent sandbox back, with its files, after its agent
// went away (a host reboot): its disk is attached again and its agent started.
#include "cli/common.hpp"

namespace sbx::cli {

void register_start(CLI::App& app, Globals& g, Outcome& out) {
  register_per_sandbox(app, g, out, "start", "Start a stopped persistent sandbox again, with its files",
                       [](Backend& b, const std::string& id) { return b.start(id); });
}

}  // namespace sbx::cli
