#include "agent/pty.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>

#include <cerrno>

#include "core/error.hpp"

namespace sbx::agent {

namespace {
constexpr uint16_t kDefaultRows = 24, kDefaultCols = 80;
}

Pty open_pty(uint16_t rows, uint16_t cols) {
  Pty p;
  p.master.reset(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!p.master) throw sys_error("cannot open a terminal (/dev/ptmx)", errno);
  char name[128];
  if (::grantpt(p.master.get()) != 0 || ::unlockpt(p.master.get()) != 0 ||
      ::ptsname_r(p.master.get(), name, sizeof name) != 0)
    throw sys_error("cannot set up a terminal", errno);
  p.slave_path = name;
  set_window_size(p.master.get(), rows ? rows : kDefaultRows, cols ? cols : kDefaultCols);
  return p;
}

void set_window_size(int master, uint16_t rows, uint16_t cols) {
  winsize ws{};
  ws.ws_row = rows;
  ws.ws_col = cols;
  if (rows && cols) ::ioctl(master, TIOCSWINSZ, &ws);  // a size of 0 would tell programs nothing
}

}  // namespace sbx::agent
