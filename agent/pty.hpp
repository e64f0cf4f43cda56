// The terminal of a tty exec: a pseudo-terminal pair whose slave becomes the
// command's controlling terminal (the shim opens it after setsid) and whose
// master the agent reads and writes for the host.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

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

/// Whether this kernel's terminals turn a typed Ctrl-C, Ctrl-\ or Ctrl-Z into
/// a signal for their foreground process group. Linux's do; gVisor 20221219's
/// pass them through as bytes. Probed once (a terminal, a child that makes it
/// its controlling one, a typed Ctrl-C), the first time a terminal is asked for.
bool terminal_sends_signals();

/// Where a kernel's terminal does not send them, the agent does (signal keys):
/// it finds them in what the user types, by the terminal's own settings (ISIG,
/// VINTR, VQUIT, VSUSP), and has the command's shim, which holds the terminal
/// as its controlling one, signal the foreground process group.
struct TypedSignal {
  size_t at;  ///< offset of the key in what was typed (the key itself is not input)
  int sig;    ///< SIGINT, SIGQUIT or SIGTSTP
};
std::vector<TypedSignal> typed_signals(int master, std::string_view typed);

/// The signal the agent sends the shim to have it raise `sig` in the
/// foreground (a real-time one, which nothing else sends the shim), and back.
int shim_signal_for(int sig);
int typed_signal_of(int shim_signal);

/// Feeds `typed` to a command on a terminal: the bytes through `write`, a
/// signal key as a signal to the shim `shim_pid` (with signal keys only).
void feed_terminal(int master, pid_t shim_pid, bool signal_keys, std::string_view typed,
                   const std::function<void(std::string_view)>& write);

}  // namespace sbx::agent
