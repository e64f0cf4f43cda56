#include "cli/interactive.hpp"

namespace sbx::cli {

TerminalSession::TerminalSession(ExecIO& io, bool raw, bool announce) {
  sizes_.emplace(0, announce);
  io.resize_fd = sizes_->fd();
  if (raw) raw_.emplace(0);
}

}  // namespace sbx::cli
