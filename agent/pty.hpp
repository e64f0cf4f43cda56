// The terminal of a tty exec: a pseudo-terminal pair whose slave becomes the
// command's controlling terminal (the shim opens it after setsid) and whose
// master the agent reads and writes for the host.
#pragma once

#include <cstdint>
#include <string>

#include "core/fd.hpp"

namespace sbx::agent {

struct Pty {
  Fd master;               ///< close-on-exec, blocking (the caller decides)
  std::string slave_path;  ///< /dev/pts/N, opened by the command's shim
};

/// A new pseudo-terminal of rows x cols (0: 24 x 80). Throws when the
/// sandbox has no /dev/ptmx or its devpts is full.
Pty open_pty(uint16_t rows, uint16_t cols);

/// Sets the terminal's size; the kernel tells the foreground process group (SIGWINCH).
void set_window_size(int master, uint16_t rows, uint16_t cols);

}  // namespace sbx::agent
