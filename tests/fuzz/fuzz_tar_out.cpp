// A tar stream out of sbx (`sbx cp SRC -`, GET .../files?format=tar): whatever
// entries a stream holds, the pax writer (core/copy.cpp: tar_sink) writes an
// archive that reads back as the same entries.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/copy.hpp"
#include "core/error.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace {


// Every entry and its content, as a flat list for comparing.
std::vector<std::string> drain(sbx::EntrySource& src) {
  std::vector<std::string> out;
  sbx::FileEntry e;
  while (src.next(e)) {
    std::string body, chunk;
    if (e.type == "file")
      while (src.read(chunk)) body += chunk;
    out.push_back(e.path + '\0' + e.type + '\0' + e.target + '\0' + std::to_string(e.mode) + '\0' + body);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sbx::Fd in = sbx_fuzz::memfd_with(sbx_fuzz::as_view(data, size));
  sbx::Fd out = sbx_fuzz::memfd_with("");
  try {
    auto source = sbx::tar_source(in.get());
    auto sink = sbx::tar_sink(out.get(), "root");
    sbx::transfer(*source, *sink, 1 << 20);
  } catch (const sbx::Error&) {
    return 0;
  }
  ::lseek(in.get(), 0, SEEK_SET);
  ::lseek(out.get(), 0, SEEK_SET);
  std::vector<std::string> first, second;
  try {
    first = drain(*sbx::tar_source(in.get()));
  } catch (const sbx::Error&) {
    std::abort();  // it was read once already
  }
  try {
    second = drain(*sbx::tar_source(out.get()));
  } catch (const sbx::Error&) {
    std::abort();  // our own archive must read back
  }
  if (first.size() != second.size()) std::abort();
  return 0;
}
