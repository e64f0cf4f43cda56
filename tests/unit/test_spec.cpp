// What core/spec.hpp decides about requests: the state filter both the CLI
// (`sbx ls -f state=`) and the API (`?state=`) validate with.
#include <string>

#include <catch2/catch.hpp>

#include "core/spec.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Errc;
using sbx_test::error_of;

TEST_CASE("spec: a bad state filter says so, for ls and the API alike", "[spec]") {
  CHECK(sbx::parse_state_filter("running") == sbx::SandboxState::running);
  CHECK(sbx::parse_state_filter("pooled") == sbx::SandboxState::pooled);
  CHECK(sbx::parse_state_filter("paused") == sbx::SandboxState::paused);
  CHECK(sbx::state_name(sbx::SandboxState::paused) == "paused");
  auto e = error_of([] { sbx::parse_state_filter("bogus"); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(std::string(e.what()) == "the filter state=bogus: unknown sandbox state 'bogus'");
  CHECK(e.hint() == "states are creating, running, paused, dead, failed, pooled");
}
