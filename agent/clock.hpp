// The agent's one clock for durations and idleness: monotonic milliseconds.
#pragma once

#include <time.h>

#include <cstdint>

namespace sbx::agent {

inline int64_t mono_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace sbx::agent
