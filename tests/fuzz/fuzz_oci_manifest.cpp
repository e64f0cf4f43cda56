// An OCI layout's index, manifest and image config (core/oci.cpp), from one
// input: the three JSON texts separated by "\n--\n". So that the fuzzer gets
// past the digest checks, "@M", "@C" and "@L" in them become the digests of
// the manifest, the config and an empty layer, and "@MS", "@CS", "@LS" their sizes.
#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/oci.hpp"
#include "core/sha256.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace {

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
  return s;
}

// Blob `text` under blobs/sha256/ with its digest and size standing for `token`s in `into`.
std::string stored(const sbx_fuzz::TempDir& t, const std::string& text, const std::string& token, std::string into) {
  std::string digest = sbx::sha256_of(text);
  std::string path = t / ("layout/blobs/sha256/" + digest.substr(7));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) sbx_fuzz::write_text(path, text);
  into = replaced(std::move(into), token + "S", std::to_string(text.size()));
  return replaced(std::move(into), token, digest);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(sbx_fuzz::as_view(data, size));
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    size_t sep = input.find("\n--\n", at);
    parts.push_back(input.substr(at, sep == std::string::npos ? std::string::npos : sep - at));
    if (sep == std::string::npos || parts.size() == 3) break;
    at = sep + 4;
  }
  parts.resize(3);
  sbx_fuzz::TempDir t;
  for (auto* d : {"layout", "layout/blobs", "layout/blobs/sha256", "rootfs"})
    if (::mkdir((t / d).c_str(), 0755) != 0) std::abort();
  sbx_fuzz::write_text(t / "layout/oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  std::string layer(1024, '\0');  // an empty tar
  std::string config = stored(t, layer, "@L", parts[2]);
  std::string manifest = stored(t, layer, "@L", parts[1]);
  manifest = stored(t, config, "@C", manifest);
  std::string index = stored(t, manifest, "@M", parts[0]);
  sbx_fuzz::write_text(t / "layout/index.json", index);
  try {
    (void)sbx::oci::unpack(t / "layout", t / "rootfs");
  } catch (const sbx::Error&) {
  }
  return 0;
}
