#include "core/agent_binary.hpp"

#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "core/error.hpp"

namespace sbx {

std::string sbx_binary_dir() {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  std::string dir(self, static_cast<size_t>(n));
  return dir.substr(0, dir.rfind('/'));
}

std::string find_agent_binary() {
  std::string tried;
  auto usable = [&](const std::string& p) {
    tried += (tried.empty() ? "" : ", ") + p;
    return ::access(p.c_str(), X_OK) == 0;
  };
  if (const char* env = std::getenv("SBX_AGENT"); env && *env) {
    if (usable(env)) return env;
  }
  if (std::string dir = sbx_binary_dir(); !dir.empty()) {
    if (usable(dir + "/sbx-agent")) return dir + "/sbx-agent";
    if (usable(dir + "/../libexec/sbx/sbx-agent")) return dir + "/../libexec/sbx/sbx-agent";
  }
  if (usable(std::string(SBX_LIBEXECDIR) + "/sbx-agent")) return std::string(SBX_LIBEXECDIR) + "/sbx-agent";
  throw Error(Errc::not_found, "sbx-agent not found (looked at " + tried + ")")
      .set_hint("install sbx with `cmake --install`, or point SBX_AGENT at the sbx-agent binary");
}

}  // namespace sbx
