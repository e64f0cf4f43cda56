#include "core/units.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace sbx {

namespace {
std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits "1.5G" into 1.5 and "g"; throws when there is no leading number.
double leading_number(std::string_view text, std::string_view what, size_t& used) {
  std::string s(text);
  size_t i = 0;
  int dots = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) dots += s[i++] == '.';
  // "1.2.3G" must not quietly read as 1.2G.
  if (i == 0 || dots > 1 || s[0] == '.' || s[i - 1] == '.')
    throw Error(Errc::invalid_argument, "invalid " + std::string(what) + " '" + std::string(text) + "'");
  used = i;
  // Digits alone, so strtod reads them all; hundreds of them overflow to
  // HUGE_VAL (std::stod would throw std::out_of_range), which the callers'
  // "too large" checks refuse.
  return std::strtod(s.substr(0, i).c_str(), nullptr);
}
}  // namespace

uint64_t parse_size(std::string_view text) {
  size_t used = 0;
  double n = leading_number(text, "size", used);
  std::string unit = lower(text.substr(used));
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  if (unit.size() == 2 && unit.back() == 'i') unit.pop_back();
  double mult = 1;
  if (unit.empty()) mult = 1;
  else if (unit == "k") mult = 1024.0;
  else if (unit == "m") mult = 1024.0 * 1024;
  else if (unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t") mult = 1024.0 * 1024 * 1024 * 1024;
  else
    throw Error(Errc::invalid_argument, "invalid size '" + std::string(text) + "'")
        .set_hint("use a number with an optional unit: 512k, 256M, 2G");
  double v = n * mult;
  // 2^63: llround's range; no real size comes near it.
  if (v >= 9.2e18) throw Error(Errc::invalid_argument, "size '" + std::string(text) + "' is too large");
  return static_cast<uint64_t>(std::llround(v));
}

uint64_t parse_duration_ms(std::string_view text) {
  if (text.empty()) throw Error(Errc::invalid_argument, "empty duration");
  uint64_t total = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    size_t used = 0;
    double n = leading_number(rest, "duration", used);
    rest.remove_prefix(used);
    size_t u = 0;
    while (u < rest.size() && std::isalpha(static_cast<unsigned char>(rest[u]))) ++u;
    std::string unit = lower(rest.substr(0, u));
    rest.remove_prefix(u);
    double mult;
    if (unit.empty() || unit == "s") mult = 1000;
    else if (unit == "ms") mult = 1;
    else if (unit == "m") mult = 60'000;
    else if (unit == "h") mult = 3'600'000;
    else if (unit == "d") mult = 86'400'000;
    else
      throw Error(Errc::invalid_argument, "invalid duration '" + std::string(text) + "'")
          .set_hint("use a number with a unit: 500ms, 30s, 10m, 1h30m, 2d");
    double part = n * mult;
    if (part >= 9.2e18 || total + static_cast<uint64_t>(std::llround(part)) >= 9'200'000'000'000'000'000ull)
      throw Error(Errc::invalid_argument, "duration '" + std::string(text) + "' is too long");
    total += static_cast<uint64_t>(std::llround(part));
  }
  return total;
}

std::string format_size(uint64_t bytes) {
  const char* units[] = {"", "K", "M", "G", "T"};
  int i = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && i < 4 && std::fmod(v, 1024) == 0) {
    v /= 1024;
    ++i;
  }
  if (v >= 1024 && i < 4) {  // not an exact multiple: one decimal is enough
    while (v >= 1024 && i < 4) {
      v /= 1024;
      ++i;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%s", v, units[i]);
    return buf;
  }
  return std::to_string(static_cast<uint64_t>(v)) + units[i];
}

namespace {
// "1.5s", "1.25s", "30s": a timeout of 1.5s must not be reported as 1s, so
// below the minutes the milliseconds are kept (trailing zeros dropped).
std::string seconds_text(uint64_t s, uint64_t ms) {
  std::string out = std::to_string(s);
  if (ms) {
    std::string frac = std::to_string(ms + 1000).substr(1);
    while (frac.back() == '0') frac.pop_back();
    out += "." + frac;
  }
  return out + "s";
}
}  // namespace

std::string format_duration_ms(uint64_t ms) {
  if (ms == 0) return "-";
  if (ms < 1000) return std::to_string(ms) + "ms";
  uint64_t s = ms / 1000;
  std::string out;
  if (s >= 86400) {
    out += std::to_string(s / 86400) + "d";
    s %= 86400;
    if (s >= 3600) out += std::to_string(s / 3600) + "h";
    return out;
  }
  if (s >= 3600) {
    out += std::to_string(s / 3600) + "h";
    s %= 3600;
    if (s >= 60) out += std::to_string(s / 60) + "m";
    return out;
  }
  if (s >= 60) {
    out += std::to_string(s / 60) + "m";
    s %= 60;
    if (s || ms % 1000) out += seconds_text(s, ms % 1000);
    return out;
  }
  return seconds_text(s, ms % 1000);
}

}  // namespace sbx
