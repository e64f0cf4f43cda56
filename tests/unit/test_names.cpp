// Sandbox names (core/spec.hpp, core/registry.hpp): the shape of a name,
// uniqueness per owner at create, and what a user's word resolves to.
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/registry.hpp"
#include "core/spec.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Errc;
using sbx::Registry;
using sbx::SandboxRecord;
using sbx::SandboxSpec;
using sbx_test::error_of;
using sbx_test::TempDir;

namespace {

SandboxSpec named(const std::string& name, const std::string& owner = "") {
  SandboxSpec s;
  s.driver = "subprocess";
  s.name = name;
  if (!owner.empty()) s.labels[sbx::kOwnerLabel] = owner;
  return s;
}

SandboxRecord record(const std::string& id, const std::string& name, const std::string& owner = "") {
  SandboxRecord r;
  r.id = id;
  r.spec = named(name, owner);
  return r;
}

}  // namespace

TEST_CASE("names: the shape of a name", "[names]") {
  for (const char* ok : {"web", "w", "0day", "web-1", "a.b_c", "sbx_abc", "sbx_abcdefghijk", "sbx_abcdefghijklm"}) {
    CAPTURE(ok);
    CHECK(sbx::valid_sandbox_name(ok));
  }
  std::string too_long(64, 'a');
  for (std::string bad : {std::string(), too_long, std::string("Web"), std::string("-web"), std::string(".."),
                          std::string("_x"), std::string("a/b"), std::string("a b"), std::string("sbx_abcdefghijkl")}) {
    CAPTURE(bad);
    CHECK_FALSE(sbx::valid_sandbox_name(bad));
    CHECK(error_of([&] { sbx::check_sandbox_name(bad); }).code() == Errc::invalid_argument);
  }
  CHECK(sbx::valid_sandbox_name(std::string(63, 'a')));
  CHECK(error_of([] { sbx::check_sandbox_name("sbx_abcdefghijkl"); }).hint().find("id") != std::string::npos);
}

TEST_CASE("names: the JSON form carries the name; records without one still load", "[names]") {
  nlohmann::json j = named("web");
  CHECK(j.at("name") == "web");
  CHECK(j.get<SandboxSpec>().name == "web");
  nlohmann::json old = nlohmann::json::parse(R"({"id": "sbx_abcdefghijkl", "state": "running",
      "spec": {"driver": "subprocess", "image": "", "network": "none"}})");
  auto rec = old.get<SandboxRecord>();
  CHECK(rec.spec.name.empty());
}

TEST_CASE("names: unique per owner at create, freed by remove", "[names]") {
  TempDir tmp{"names"};
  Registry reg(tmp.path + "/state", 100000);
  SandboxRecord a = reg.create(named("web"));
  auto e = error_of([&] { reg.create(named("web")); });
  CHECK(e.code() == Errc::already_exists);
  CHECK(std::string(e.what()).find("'web'") != std::string::npos);
  CHECK(e.hint().find(a.id) != std::string::npos);
  CHECK(error_of([&] { reg.check_name_free(named("web")); }).code() == Errc::already_exists);
  // Another owner's "web", and any number of unnamed sandboxes, are fine.
  SandboxRecord b = reg.create(named("web", "alice"));
  CHECK(error_of([&] { reg.create(named("web", "alice")); }).code() == Errc::already_exists);
  reg.create(named(""));
  reg.create(named(""));
  // A claim giving a record a taken name is refused; its own name is not "taken".
  SandboxRecord c = reg.create(named(""));
  c.spec.name = "web";
  CHECK(error_of([&] { reg.save_named(c); }).code() == Errc::already_exists);
  a.spec.labels["x"] = "1";
  reg.save_named(a);
  reg.remove(a.id);
  reg.save_named(c);
  CHECK(reg.find(c.id)->spec.name == "web");
  (void)b;
}

TEST_CASE("names: an exact id, then a name of the owner, then an id prefix", "[names]") {
  std::vector<SandboxRecord> recs = {record("sbx_aaaaaaaaaaaa", "web"), record("sbx_aaaabbbbbbbb", "sbx_aaaa"),
                                     record("sbx_cccccccccccc", "web", "alice"),
                                     record("sbx_dddddddddddd", "api", "bob"), record("sbx_eeeeeeeeeeee", "api", "carol")};
  auto id_of = [&](const std::string& ref, const std::optional<std::string>& owner) {
    auto r = sbx::find_sandbox(recs, ref, owner);
    return r ? r->id : std::string("-");
  };
  CHECK(id_of("sbx_cccccccccccc", std::string()) == "sbx_cccccccccccc");  // an id is an id, whoever asks
  CHECK(id_of("web", std::string()) == "sbx_aaaaaaaaaaaa");
  CHECK(id_of("web", std::string("alice")) == "sbx_cccccccccccc");
  CHECK(id_of("api", std::string("alice")) == "-");
  CHECK(id_of("api", std::string("bob")) == "sbx_dddddddddddd");
  CHECK(error_of([&] { sbx::find_sandbox(recs, "api", std::nullopt); }).code() == Errc::invalid_argument);
  CHECK(id_of("sbx_aaaa", std::string()) == "sbx_aaaabbbbbbbb");  // the name, not the prefix of both
  // For an owner without that name it is a prefix, and one of two sandboxes.
  CHECK(error_of([&] { sbx::find_sandbox(recs, "sbx_aaaa", std::string("zed")); }).code() == Errc::invalid_argument);
  CHECK(id_of("sbx_aaaab", std::string()) == "sbx_aaaabbbbbbbb");
  CHECK(id_of("sbx_d", std::string()) == "sbx_dddddddddddd");
  CHECK(id_of("sbx_", std::string()) == "-");  // too short to be a prefix
  auto e = error_of([&] { sbx::resolve_sandbox(recs, "nope", std::string()); });
  CHECK(e.code() == Errc::not_found);
}

TEST_CASE("names: resolve on a registry", "[names]") {
  TempDir tmp{"names"};
  Registry reg(tmp.path + "/state", 100000);
  SandboxRecord a = reg.create(named("web"));
  SandboxRecord b = reg.create(named("web", "alice"));
  CHECK(sbx::resolve_sandbox(reg, a.id, std::string("alice")).id == a.id);
  CHECK(sbx::resolve_sandbox(reg, "web", std::string()).id == a.id);
  CHECK(sbx::resolve_sandbox(reg, "web", std::string("alice")).id == b.id);
  CHECK(sbx::resolve_sandbox(reg, b.id.substr(0, 12), std::string()).id == b.id);
  CHECK(error_of([&] { sbx::resolve_sandbox(reg, "web", std::string("bob")); }).code() == Errc::not_found);
  CHECK(error_of([&] { sbx::resolve_sandbox(reg, "web", std::nullopt); }).code() == Errc::invalid_argument);
  // By name only: another owner's sandbox is not found, whatever its id begins with.
  std::string alices_prefix = b.id.substr(0, 8);
  SandboxRecord c = reg.create(named(alices_prefix, "alice"));
  CHECK(sbx::find_named(reg, alices_prefix, std::string("alice"))->id == c.id);
  CHECK_FALSE(sbx::find_named(reg, alices_prefix, std::string()));
  CHECK_FALSE(sbx::find_named(reg, "web", std::string("bob")));
}
