// A private temporary directory for tests, unit and fuzz alike (so no Catch2
// here): made with mkdtemp, removed with everything in it when the object dies.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx_test {

struct TempDir {
  std::string path;
  /// Throws when mkdtemp fails: a test fails, a fuzz target aborts.
  explicit TempDir(const std::string& tag = "unit") {
    std::string tmpl = "/tmp/sbx-test-" + tag + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw sbx::sys_error("mkdtemp " + tmpl, errno);
    path = tmpl;
  }
  ~TempDir() {
    try {
      sbx::remove_tree(path);
    } catch (...) {
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  /// path + "/" + rel.
  std::string operator/(const std::string& rel) const { return path + "/" + rel; }
};

}  // namespace sbx_test
