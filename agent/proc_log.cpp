#include "agent/proc_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::agent {

namespace {
Fd open_segment(const std::string& path) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
  if (!fd) throw sys_error("cannot create the log " + path, errno);
  return fd;
}
}  // namespace

KeptLog::KeptLog(std::string path, size_t segment_bytes) : path_(std::move(path)), segment_(segment_bytes) {
  ::unlink((path_ + ".1").c_str());
  fd_ = open_segment(path_);
}

void KeptLog::rotate() {
  // rename replaces the older segment in one step: a reader sees either.
  if (::rename(path_.c_str(), (path_ + ".1").c_str()) != 0) return;
  try {
    fd_ = open_segment(path_);
  } catch (const Error&) {
    fd_.reset();  // the disk is full or gone: keep what the old segment has
  }
  size_ = 0;
}

void KeptLog::append(std::string_view data) {
  while (fd_ && !data.empty()) {
    size_t room = segment_ - size_;
    std::string_view part = data.substr(0, room);
    ssize_t n = ::write(fd_.get(), part.data(), part.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    size_ += static_cast<size_t>(n);
    data.remove_prefix(static_cast<size_t>(n));
    if (size_ >= segment_) rotate();
  }
}

std::string KeptLog::read(int64_t tail_lines) const {
  if (path_.empty()) return {};
  std::string text = read_file_if_exists(path_ + ".1").value_or("");
  text += read_file_if_exists(path_).value_or("");
  if (tail_lines < 0) return text;
  return std::string(last_lines(text, tail_lines));
}

void KeptLog::remove() {
  if (path_.empty()) return;
  fd_.reset();
  ::unlink(path_.c_str());
  ::unlink((path_ + ".1").c_str());
}

std::string_view last_lines(std::string_view text, int64_t n) {
  if (n <= 0) return {};
  size_t end = text.size();
  // A trailing newline ends the last line; it does not start another.
  size_t pos = end && text[end - 1] == '\n' ? end - 1 : end;
  while (pos > 0) {
    size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string_view::npos) return text;
    if (--n == 0) return text.substr(nl + 1);
    pos = nl;
  }
  return text;
}

}  // namespace sbx::agent
