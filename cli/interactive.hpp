// The host terminal's part in a terminal session (`sbx exec -t`, `sbx attach`
// to a process started with -t): raw mode while the user types to the
// sandbox, and the window sizes its terminal follows.
#pragma once

#include <optional>

#include "core/agent_client.hpp"
#include "core/terminal.hpp"

namespace sbx::cli {

class TerminalSession {
 public:
  /// Watches stdin's terminal for resizes (io.resize_fd); raw: puts it in raw
  /// mode; announce: sends its current size at once.
  TerminalSession(ExecIO& io, bool raw, bool announce);

 private:
  std::optional<WindowWatch> sizes_;
  std::optional<RawMode> raw_;  // last: restored first
};

}  // namespace sbx::cli
