// The host's terminal for `sbx exec -t` and `sbx attach`: raw mode for as long
// as a session runs (restored on every way out: return, exception, a signal
// that ends sbx, a crash), its window size and the SIGWINCH that reports a new
// one, and the keys that detach an attach.
#pragma once

#include <signal.h>
#include <termios.h>

#include <optional>
#include <string>
#include <string_view>

#include "core/fd.hpp"
#include "core/spec.hpp"

namespace sbx {

/// The size of the terminal on fd; {0, 0} when fd is no terminal.
WindowSize window_size(int fd);

/// Raw mode on the terminal fd while this object lives: every key is a byte
/// for the sandbox (Ctrl-C, Ctrl-Z and Ctrl-D included), nothing echoes
/// locally. Signals that would end sbx without running destructors (SIGTERM,
/// SIGHUP, SIGINT, SIGQUIT where their disposition is still the default, and
/// the crash signals) restore the terminal first. One at a time per process.
class RawMode {
 public:
  /// Throws invalid_argument when fd is no terminal.
  explicit RawMode(int fd);
  ~RawMode();
  RawMode(const RawMode&) = delete;
  RawMode& operator=(const RawMode&) = delete;

 private:
  void put_back();
  int fd_;
  termios saved_{};
  struct ::sigaction old_actions_[8]{};
};

/// SIGWINCH on the terminal fd becomes a WindowSize (4 bytes, written whole)
/// on a self-pipe, the form ExecIO::resize_fd takes. One at a time per process.
class WindowWatch {
 public:
  /// With announce, the current size is written at once (an attach tells the
  /// process the size of the terminal it now has).
  explicit WindowWatch(int tty_fd, bool announce = false);
  ~WindowWatch();
  WindowWatch(const WindowWatch&) = delete;
  WindowWatch& operator=(const WindowWatch&) = delete;
  /// The read end, non-blocking.
  int fd() const { return read_.get(); }

 private:
  Fd read_, write_;
  struct ::sigaction old_{};
};

/// The newest size waiting on a WindowWatch's pipe (older ones are stale), or
/// nothing. Relays call it before forwarding typed input, not only when poll()
/// reported the pipe: a SIGWINCH that came before the keystrokes may have been
/// handled only on poll's way back, after it looked at the pipe, and the
/// program must see the new size before it reads what was typed after it.
std::optional<WindowSize> take_window_size(int fd);

/// Finds the detach keys, Ctrl-P Ctrl-Q (as docker's), in what the user types.
class DetachKeys {
 public:
  /// Appends to `forward` what of `typed` goes to the process; true once the
  /// keys were typed (what follows them is dropped). A Ctrl-P at the end of a
  /// chunk is held until the next key says whether it starts the sequence.
  bool feed(std::string_view typed, std::string& forward);

 private:
  bool pending_ = false;
};

}  // namespace sbx
