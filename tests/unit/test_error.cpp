#include "core/error.hpp"

#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

#include "tests/unit/helpers.hpp"

using sbx::Errc;
using sbx::Error;
using sbx_test::error_of;

namespace {
const Errc kAllCodes[] = {Errc::usage,         Errc::invalid_argument, Errc::not_found,     Errc::already_exists,
                          Errc::unavailable,   Errc::permission_denied, Errc::limit_exceeded, Errc::timeout,
                          Errc::io,            Errc::protocol,          Errc::conflict,       Errc::unauthenticated,
                          Errc::forbidden,     Errc::too_large,         Errc::internal};
}  // namespace

TEST_CASE("error: what() is the message alone without context or errno", "[error]") {
  Error e(Errc::not_found, "sandbox sbx_x does not exist");
  CHECK(std::string(e.what()) == "sandbox sbx_x does not exist");
  CHECK(e.code() == Errc::not_found);
  CHECK(e.sys_errno() == 0);
  CHECK(e.message() == "sandbox sbx_x does not exist");
  CHECK(e.context().empty());
  CHECK(e.hint().empty());
}

TEST_CASE("error: context chain is printed outermost first", "[error]") {
  Error e(Errc::io, "disk full");
  e.add_context("writing record.json").add_context("saving sbx_abc").add_context("creating a sandbox");
  CHECK(std::string(e.what()) == "creating a sandbox: saving sbx_abc: writing record.json: disk full");
  REQUIRE(e.context().size() == 3);
  // The vector keeps the order the context was added: innermost first.
  CHECK(e.context()[0] == "writing record.json");
  CHECK(e.context()[1] == "saving sbx_abc");
  CHECK(e.context()[2] == "creating a sandbox");
  // Context never changes the code or the innermost message.
  CHECK(e.code() == Errc::io);
  CHECK(e.message() == "disk full");
}

TEST_CASE("error: errno text comes last, after the message", "[error]") {
  Error e(Errc::io, "cannot write /x", ENOSPC);
  e.add_context("copying");
  CHECK(std::string(e.what()) == std::string("copying: cannot write /x: ") + std::strerror(ENOSPC));
  CHECK(e.sys_errno() == ENOSPC);
}

TEST_CASE("error: hint is kept apart from what()", "[error]") {
  Error e(Errc::unavailable, "no backend");
  e.set_hint("set SANDBOX_MANAGER_URL");
  CHECK(e.hint() == "set SANDBOX_MANAGER_URL");
  CHECK(std::string(e.what()) == "no backend");
  // A later hint replaces the earlier one.
  e.set_hint("other");
  CHECK(e.hint() == "other");
  // Adding context keeps the hint.
  e.add_context("ctx");
  CHECK(e.hint() == "other");
  CHECK(std::string(e.what()) == "ctx: no backend");
}

TEST_CASE("error: copies keep the whole chain", "[error]") {
  Error e(Errc::timeout, "deadline", ETIMEDOUT);
  e.add_context("exec").set_hint("raise --timeout");
  Error c = e;
  CHECK(std::string(c.what()) == std::string(e.what()));
  CHECK(c.hint() == "raise --timeout");
  CHECK(c.code() == Errc::timeout);
  c.add_context("outer");
  CHECK(std::string(c.what()) != std::string(e.what()));
}

TEST_CASE("error: code_name of every code is its stable snake_case name", "[error]") {
  CHECK(sbx::code_name(Errc::usage) == "usage");
  CHECK(sbx::code_name(Errc::invalid_argument) == "invalid_argument");
  CHECK(sbx::code_name(Errc::not_found) == "not_found");
  CHECK(sbx::code_name(Errc::already_exists) == "already_exists");
  CHECK(sbx::code_name(Errc::unavailable) == "unavailable");
  CHECK(sbx::code_name(Errc::permission_denied) == "permission_denied");
  CHECK(sbx::code_name(Errc::limit_exceeded) == "limit_exceeded");
  CHECK(sbx::code_name(Errc::timeout) == "timeout");
  CHECK(sbx::code_name(Errc::io) == "io");
  CHECK(sbx::code_name(Errc::protocol) == "protocol");
  CHECK(sbx::code_name(Errc::conflict) == "conflict");
  CHECK(sbx::code_name(Errc::unauthenticated) == "unauthenticated");
  CHECK(sbx::code_name(Errc::forbidden) == "forbidden");
  CHECK(sbx::code_name(Errc::internal) == "internal");
  std::set<std::string_view> names;
  for (Errc c : kAllCodes) names.insert(sbx::code_name(c));
  CHECK(names.size() == std::size(kAllCodes));
}

TEST_CASE("error: exit_status follows docker's conventions", "[error]") {
  CHECK(sbx::exit_status(Errc::usage) == 2);
  CHECK(sbx::exit_status(Errc::invalid_argument) == 2);
  CHECK(sbx::exit_status(Errc::timeout) == 124);
  for (Errc c : kAllCodes) {
    CAPTURE(sbx::code_name(c));
    if (c == Errc::usage || c == Errc::invalid_argument || c == Errc::timeout) continue;
    CHECK(sbx::exit_status(c) == 125);
  }
}

TEST_CASE("error: http_status of every code", "[error]") {
  CHECK(sbx::http_status(Errc::usage) == 400);
  CHECK(sbx::http_status(Errc::invalid_argument) == 400);
  CHECK(sbx::http_status(Errc::not_found) == 404);
  CHECK(sbx::http_status(Errc::already_exists) == 409);
  CHECK(sbx::http_status(Errc::conflict) == 409);
  CHECK(sbx::http_status(Errc::unavailable) == 503);
  CHECK(sbx::http_status(Errc::permission_denied) == 403);
  CHECK(sbx::http_status(Errc::forbidden) == 403);
  CHECK(sbx::http_status(Errc::unauthenticated) == 401);
  CHECK(sbx::http_status(Errc::limit_exceeded) == 429);
  // A payload past its cap is 413: the platform's client retries 429s, and retrying the same payload never helps.
  CHECK(sbx::http_status(Errc::too_large) == 413);
  CHECK(sbx::http_status(Errc::timeout) == 504);
  CHECK(sbx::http_status(Errc::io) == 502);
  CHECK(sbx::http_status(Errc::protocol) == 502);
  CHECK(sbx::http_status(Errc::internal) == 500);
}

TEST_CASE("error: errc_from_errno maps errno values to the closest code", "[error]") {
  auto [err, code] = GENERATE(table<int, Errc>({
      {ENOENT, Errc::not_found},           {ESRCH, Errc::not_found},
      {EEXIST, Errc::already_exists},      {EPERM, Errc::permission_denied},
      {EACCES, Errc::permission_denied},   {ENOSPC, Errc::limit_exceeded},
      {EDQUOT, Errc::limit_exceeded},      {EFBIG, Errc::limit_exceeded},
      {EMFILE, Errc::limit_exceeded},      {ENFILE, Errc::limit_exceeded},
      {ETIMEDOUT, Errc::timeout},          {EINVAL, Errc::invalid_argument},
      {ENAMETOOLONG, Errc::invalid_argument}, {ELOOP, Errc::invalid_argument},
      {ENOTDIR, Errc::invalid_argument},   {EISDIR, Errc::invalid_argument},
      {EXDEV, Errc::invalid_argument},     {ECONNREFUSED, Errc::protocol},
      {ECONNRESET, Errc::protocol},        {EPIPE, Errc::protocol},
      {ENOSYS, Errc::unavailable},         {EOPNOTSUPP, Errc::unavailable},
      {EIO, Errc::io},                     {EBADF, Errc::io},
      {0, Errc::io},
  }));
  CAPTURE(err);
  CHECK(sbx::errc_from_errno(err) == code);
}

TEST_CASE("error: sys_error derives the code from errno and keeps it", "[error]") {
  Error e = sbx::sys_error("cannot open /nope", ENOENT);
  CHECK(e.code() == Errc::not_found);
  CHECK(e.sys_errno() == ENOENT);
  CHECK(e.message() == "cannot open /nope");
  CHECK(std::string(e.what()) == std::string("cannot open /nope: ") + std::strerror(ENOENT));
  CHECK(sbx::sys_error("x", EACCES).code() == Errc::permission_denied);
}

TEST_CASE("error: with_context returns the value when nothing is thrown", "[error]") {
  int v = sbx::with_context("computing", [] { return 42; });
  CHECK(v == 42);
  int calls = 0;
  sbx::with_context("void call", [&] { ++calls; });
  CHECK(calls == 1);
  // A reference result stays a reference.
  int target = 1;
  int& ref = sbx::with_context("ref", [&]() -> int& { return target; });
  ref = 7;
  CHECK(target == 7);
}

TEST_CASE("error: with_context adds its context to an escaping sbx::Error", "[error]") {
  auto e = error_of([] {
    sbx::with_context("outer step", [] {
      sbx::with_context("inner step", [] { throw Error(Errc::conflict, "wrong state"); });
    });
  });
  CHECK(e.code() == Errc::conflict);
  REQUIRE(e.context().size() == 2);
  CHECK(e.context()[0] == "inner step");
  CHECK(e.context()[1] == "outer step");
  CHECK(std::string(e.what()) == "outer step: inner step: wrong state");
}

TEST_CASE("error: with_context keeps the hint and lets other exceptions through untouched", "[error]") {
  auto e = error_of([] {
    sbx::with_context("ctx", [] { throw Error(Errc::io, "boom").set_hint("do this"); });
  });
  CHECK(e.hint() == "do this");
  CHECK(std::string(e.what()) == "ctx: boom");
  CHECK_THROWS_AS(sbx::with_context("ctx", [] { throw std::runtime_error("not ours"); }), std::runtime_error);
  try {
    sbx::with_context("ctx", [] { throw std::runtime_error("not ours"); });
  } catch (const std::runtime_error& re) {
    CHECK(std::string(re.what()) == "not ours");
  }
}
