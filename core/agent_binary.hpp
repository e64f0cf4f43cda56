// Finding the sbx-agent binary that drivers start inside sandboxes.
#pragma once

#include <string>

namespace sbx {

/// $SBX_AGENT, else sbx-agent beside the running sbx, else the install's
/// libexec directory. Throws not_found with the places it looked.
std::string find_agent_binary();

}  // namespace sbx
