// sbx pause: stop every process of running sandboxes (no CPU; memory and
// files kept) until `sbx resume`, or until an exec, cp, ps or port-forward
// needs the sandbox, which resumes it first.
#include "cli/common.hpp"

namespace sbx::cli {

void register_pause(CLI::App& app, Globals& g, Outcome& out) {
  register_per_sandbox(app, g, out, "pause", "Pause sandboxes: their processes stop, their memory stays",
                       [](Backend& b, const std::string& id) { return b.pause(id); });
}

}  // namespace sbx::cli
