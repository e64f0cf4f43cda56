// Human sizes ("256M") and durations ("10m", "1h30m") in and out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sbx {

/// "512", "256k", "256M", "1.5G", "2GiB" -> bytes (binary multiples). Throws invalid_argument.
uint64_t parse_size(std::string_view text);
/// "30", "30s", "10m", "1h30m", "2d", "500ms" -> milliseconds; "0" means none. Throws invalid_argument.
uint64_t parse_duration_ms(std::string_view text);
/// 268435456 -> "256M".
std::string format_size(uint64_t bytes);
/// 5400000 -> "1h30m"; 0 -> "-".
std::string format_duration_ms(uint64_t ms);

}  // namespace sbx
