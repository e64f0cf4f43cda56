// Finding the sbx-agent binary that drivers start inside sandboxes.
#pragma once

#include <string>

namespace sbx {

/// The directory of the running sbx binary (/proc/self/exe), or "" when unknown:
/// where its companions (sbx-agent, the guest image, the deno agent) sit in a
/// build tree or an install.
std::string sbx_binary_dir();

/// $SBX_AGENT, else sbx-agent beside the running sbx, else the install's
/// libexec directory. Throws not_found with the places it looked.
std::string find_agent_binary();

}  // namespace sbx
