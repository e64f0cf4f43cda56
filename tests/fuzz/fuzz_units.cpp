// Sizes and durations as users (flags, YAML, API bodies) write them: any text
// parses or throws invalid_argument, and what format_* prints parses back to
// (about) the same value.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "core/units.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = sbx_fuzz::as_view(data, size);
  try {
    uint64_t bytes = sbx::parse_size(text);
    // Whole units print exactly; anything else with one decimal, at most 5% off.
    std::string shown = sbx::format_size(bytes);
    uint64_t back = sbx::parse_size(shown);
    uint64_t off = back > bytes ? back - bytes : bytes - back;
    if (shown.find('.') == std::string::npos ? off != 0 : off > bytes / 20) std::abort();
  } catch (const sbx::Error& e) {
    if (e.code() != sbx::Errc::invalid_argument) std::abort();
  }
  try {
    uint64_t ms = sbx::parse_duration_ms(text);
    // Past a minute the printed form drops the smaller units: it is for reading, not exact.
    std::string shown = sbx::format_duration_ms(ms);
    if (ms != 0 && (sbx::parse_duration_ms(shown) > ms || sbx::format_duration_ms(sbx::parse_duration_ms(shown)) != shown))
      std::abort();
  } catch (const sbx::Error& e) {
    if (e.code() != sbx::Errc::invalid_argument) std::abort();
  }
  return 0;
}
