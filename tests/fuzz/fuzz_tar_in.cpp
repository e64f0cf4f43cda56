// A tar stream into sbx (`sbx cp - DEST`, PUT .../files with a tar body):
// libarchive reads it (core/copy.cpp: tar_source) and the host sink applies
// the project's path rules. Whatever the archive, nothing lands beside the
// target, and failures are sbx::Errors.
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/copy.hpp"
#include "core/error.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sbx_fuzz::TempDir t;
  sbx_fuzz::plant_outside(t, "in");
  if (::symlink("../outside", (t / "in/up").c_str()) != 0) std::abort();
  sbx::Fd tar = sbx_fuzz::memfd_with(sbx_fuzz::as_view(data, size));
  try {
    auto source = sbx::tar_source(tar.get());
    auto sink = sbx::host_path_sink(t / "in/target");
    sbx::transfer(*source, *sink, 1 << 20);
  } catch (const sbx::Error&) {
  }
  sbx_fuzz::check_outside(t, "in");
  return 0;
}
