// sbx resume: let paused sandboxes run again.
#include "cli/common.hpp"

namespace sbx::cli {

void register_resume(CLI::App& app, Globals& g, Outcome& out) {
  register_per_sandbox(app, g, out, "resume", "Resume paused sandboxes",
                       [](Backend& b, const std::string& id) { return b.resume(id); });
}

}  // namespace sbx::cli
