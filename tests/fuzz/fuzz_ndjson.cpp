// The remote client's reader of an exec's NDJSON stream (core/wire.hpp), as a
// manager (or whatever answers in its place) sends it, in pieces of any size.
#include <cstdint>
#include <string>

#include <fuzzer/FuzzedDataProvider.h>

#include "core/error.hpp"
#include "core/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  size_t out = 0;
  sbx::NdjsonExecParser parser([&](std::string_view s) { out += s.size(); },
                               [&](std::string_view s) { out += s.size(); });
  try {
    while (in.remaining_bytes() > 0)
      parser.feed(in.ConsumeBytesAsString(in.ConsumeIntegralInRange<size_t>(1, 128)));
    parser.finish();
    if (parser.done()) (void)parser.result().exit_code;
  } catch (const sbx::Error&) {
    // Any code: a stream may carry the manager's own {"error": {...}} line,
    // whose code is the manager's. Anything but an sbx::Error escapes and fails.
  }
  return 0;
}
