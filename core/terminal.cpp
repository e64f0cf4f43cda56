#include "core/terminal.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

#include "core/error.hpp"

namespace sbx {

namespace {

// What a signal handler needs to put the terminal back: set while a RawMode lives.
int g_raw_fd = -1;
termios g_saved{};

constexpr int kRestoringSignals[] = {SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGSEGV, SIGBUS, SIGABRT, SIGFPE};
static_assert(sizeof kRestoringSignals / sizeof *kRestoringSignals == 8, "RawMode::old_actions_ has one slot per signal");

// Only async-signal-safe calls: put the terminal back, then die of the signal as before.
extern "C" void restore_and_reraise(int sig) {
  if (g_raw_fd >= 0) ::tcsetattr(g_raw_fd, TCSANOW, &g_saved);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

int g_winch_tty = -1, g_winch_pipe = -1;

extern "C" void announce_size(int) {
  int saved = errno;
  winsize ws{};
  if (::ioctl(g_winch_tty, TIOCGWINSZ, &ws) == 0) {
    WindowSize w{ws.ws_row, ws.ws_col};
    ssize_t ignored = ::write(g_winch_pipe, &w, sizeof w);  // a full pipe drops a stale size
    (void)ignored;
  }
  errno = saved;
}

constexpr char kCtrlP = 0x10, kCtrlQ = 0x11;

}  // namespace

WindowSize window_size(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) != 0) return {};
  return {ws.ws_row, ws.ws_col};
}

RawMode::RawMode(int fd) : fd_(fd) {
  if (::tcgetattr(fd, &saved_) != 0) throw Error(Errc::invalid_argument, "not a terminal");
  g_saved = saved_;
  g_raw_fd = fd;
  struct sigaction sa {};
  sa.sa_handler = restore_and_reraise;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof kRestoringSignals / sizeof *kRestoringSignals; ++i) {
    int sig = kRestoringSignals[i];
    ::sigaction(sig, nullptr, &old_actions_[i]);
    // A handler the caller set (sbx exec forwards SIGTERM) stays: it returns, and so do we.
    if (old_actions_[i].sa_handler == SIG_DFL) ::sigaction(sig, &sa, nullptr);
  }
  termios raw = saved_;
  ::cfmakeraw(&raw);
  // TCSANOW, not TCSAFLUSH: what the user typed ahead is theirs, not to be dropped.
  if (::tcsetattr(fd, TCSANOW, &raw) != 0) {
    int e = errno;
    put_back();
    throw sys_error("cannot put the terminal in raw mode", e);
  }
}

RawMode::~RawMode() { put_back(); }

void RawMode::put_back() {
  ::tcsetattr(fd_, TCSANOW, &saved_);
  for (size_t i = 0; i < sizeof kRestoringSignals / sizeof *kRestoringSignals; ++i)
    ::sigaction(kRestoringSignals[i], &old_actions_[i], nullptr);
  g_raw_fd = -1;
}

WindowWatch::WindowWatch(int tty_fd, bool announce) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw sys_error("pipe", errno);
  read_.reset(fds[0]);
  write_.reset(fds[1]);
  g_winch_tty = tty_fd;
  g_winch_pipe = fds[1];
  struct sigaction sa {};
  sa.sa_handler = announce_size;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGWINCH, &sa, &old_);
  if (announce) announce_size(SIGWINCH);
}

WindowWatch::~WindowWatch() {
  ::sigaction(SIGWINCH, &old_, nullptr);
  g_winch_pipe = -1;
}

std::optional<WindowSize> take_window_size(int fd) {
  std::optional<WindowSize> newest;
  WindowSize w;
  while (::read(fd, &w, sizeof w) == static_cast<ssize_t>(sizeof w)) newest = w;
  return newest;
}

bool DetachKeys::feed(std::string_view typed, std::string& forward) {
  for (char c : typed) {
    if (pending_) {
      pending_ = false;
      if (c == kCtrlQ) return true;
      forward += kCtrlP;  // not the sequence after all: the Ctrl-P was the user's
    }
    if (c == kCtrlP) pending_ = true;
    else forward += c;
  }
  return false;
}

}  // namespace sbx
