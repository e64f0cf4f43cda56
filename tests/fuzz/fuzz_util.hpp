// What the fuzz targets share: a private temporary directory (tests/temp_dir.hpp)
// and an in-memory file to hand bytes to code that reads fds.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/fsutil.hpp"
#include "tests/temp_dir.hpp"

namespace sbx_fuzz {

/// The temporary directory the unit tests use too.
using sbx_test::TempDir;

/// A memfd holding `bytes`, positioned at its start.
inline sbx::Fd memfd_with(std::string_view bytes) {
  sbx::Fd fd(::memfd_create("sbx-fuzz", MFD_CLOEXEC));
  if (!fd) std::abort();
  sbx::write_all(fd.get(), bytes);
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) std::abort();
  return fd;
}

/// Writes `text` to a new file at `path`.
inline void write_text(const std::string& path, std::string_view text) {
  sbx::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) std::abort();
  sbx::write_all(fd.get(), text);
}

/// The names in a directory, "." and ".." included.
inline std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) std::abort();
  while (auto* e = ::readdir(d)) out.insert(e->d_name);
  ::closedir(d);
  return out;
}

/// Makes t/outside/secret and t/`inside`: what the input works on, and what no input may reach.
inline void plant_outside(const TempDir& t, const std::string& inside) {
  if (::mkdir((t / "outside").c_str(), 0755) != 0 || ::mkdir((t / inside).c_str(), 0755) != 0) std::abort();
  write_text(t / "outside/secret", "secret");
}

/// Aborts unless t holds only `inside` and outside/, and outside/ only its secret, unchanged.
inline void check_outside(const TempDir& t, const std::string& inside) {
  if (names_in(t.path) != std::set<std::string>{".", "..", inside, "outside"}) std::abort();
  if (names_in(t / "outside") != std::set<std::string>{".", "..", "secret"}) std::abort();
  if (sbx::read_file(t / "outside/secret") != "secret") std::abort();
}

/// The input as a string_view.
inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace sbx_fuzz
