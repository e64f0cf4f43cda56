// The YAML config file (core/config.hpp): any text resolves to a config or an
// sbx::Error naming what is wrong, never another exception.
#include <cstdint>
#include <string>

#include "core/config.hpp"
#include "core/error.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sbx::ConfigInputs in;
  in.home = "/nonexistent-home";
  in.hostname = "sbx-0";
  try {
    (void)sbx::resolve_config_text(in, std::string(sbx_fuzz::as_view(data, size)), "fuzz.yaml");
  } catch (const sbx::Error&) {
  }
  return 0;
}
