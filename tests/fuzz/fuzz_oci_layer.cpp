// One image layer (core/oci_detail.hpp: apply_layer): a tar, plain or
// compressed, applied onto a root that holds a symlink out of it. Whiteouts,
// hard links, "..", absolute names and devices never reach beside the root.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "core/oci_detail.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sbx_fuzz::TempDir t;
  sbx_fuzz::plant_outside(t, "root");
  if (::symlink("../outside", (t / "root/up").c_str()) != 0) std::abort();
  if (::symlink(t.path.c_str(), (t / "root/abs").c_str()) != 0) std::abort();
  {
    sbx::Fd root(::open((t / "root").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    size_t at = 0;
    sbx::oci::detail::ReadFn read = [&](char* buf, size_t cap) {
      size_t n = std::min(cap, size - at);
      if (n) std::memcpy(buf, data + at, n);
      at += n;
      return n;
    };
    try {
      sbx::oci::detail::apply_layer(root.get(), read, sbx::oci::detail::LayerCheck{"fuzz", "", -1, ""});
    } catch (const sbx::Error&) {
    }
  }
  sbx_fuzz::check_outside(t, "root");
  return 0;
}
