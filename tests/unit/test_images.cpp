// The image store's logic on a real directory: ids and names, resolution,
// rm refused while used (and stale users ignored), gc; recipe ids; sha256.
#include "core/images.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "core/config.hpp"
#include "core/image_build.hpp"
#include "core/sha256.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Errc;
using sbx_test::error_of;
using sbx_test::TempDir;
namespace images = sbx::images;

namespace {

const std::string kA = "sha256:" + std::string(64, 'a');
const std::string kB = "sha256:" + std::string(63, 'b') + "c";

// A fill that makes a tiny root with one marker file.
auto fill_with(const std::string& text, int* calls = nullptr) {
  return [text, calls](const std::string& rootfs) {
    if (calls) ++*calls;
    sbx::make_dirs(rootfs + "/etc");
    sbx_test::write_text(rootfs + "/etc/marker", text);
    return nlohmann::json{{"source", {{"type", "test"}}}, {"packages", {{"python3", "3.11.2-1+b1"}}}};
  };
}

std::unique_ptr<sbx::Driver> no_driver(const sbx::Config&) { return nullptr; }
std::vector<sbx::Probe> no_probes(const sbx::Config&, bool) { return {}; }

sbx::Config config_for(const std::string& dir) {
  sbx::ConfigInputs in;
  in.env["SBX_IMAGES_DIR"] = dir;
  return sbx::resolve_config_text(in, "", "");
}

}  // namespace

TEST_CASE("sha256 matches the FIPS 180-4 examples", "[images]") {
  CHECK(sbx::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sbx::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sbx::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  sbx::Sha256 h;  // a million 'a's, fed in odd-sized pieces across block edges
  std::string chunk(999, 'a');
  for (int i = 0; i < 1001; ++i) h.update(chunk);
  h.update(std::string(1000000 - 999 * 1001, 'a'));
  CHECK(h.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("a recipe's id depends on what it installs, not on how it was written", "[images]") {
  images::Recipe a, b;
  a.packages = {"python3-numpy", "curl"};
  b.packages = {"curl", "python3-numpy", "curl"};
  CHECK(images::recipe_id(a) == images::recipe_id(b));
  b.mirror = "http://deb.debian.org/debian";  // where from is not what
  CHECK(images::recipe_id(a) == images::recipe_id(b));
  b.suite = "trixie";
  CHECK(images::recipe_id(a) != images::recipe_id(b));
  // Python 3 brings the `python` name along.
  auto n = images::normalized(a);
  CHECK(std::find(n.packages.begin(), n.packages.end(), "python-is-python3") != n.packages.end());
  CHECK(images::recipe_id(images::default_recipe()) == images::recipe_id(images::default_recipe()));
  images::Recipe bad;
  bad.packages = {"numpy; rm -rf /"};
  CHECK(error_of([&] { images::normalized(bad); }).code() == Errc::invalid_argument);
  bad.packages = {};
  bad.variant = "huge";
  CHECK(error_of([&] { images::normalized(bad); }).code() == Errc::invalid_argument);
}

TEST_CASE("recipe files: packages as a list or a string, unknown keys refused", "[images]") {
  TempDir t("images");
  sbx_test::write_text(t / "r.yaml", "suite: bookworm\npackages: [python3-numpy, python3-requests]\n");
  auto r = images::load_recipe(t / "r.yaml");
  CHECK(r.packages == std::vector<std::string>{"python3-numpy", "python3-requests"});
  sbx_test::write_text(t / "s.yaml", "packages: python3-numpy python3-requests\n");
  CHECK(images::recipe_id(images::load_recipe(t / "s.yaml")) == images::recipe_id(r));
  sbx_test::write_text(t / "bad.yaml", "pakages: [curl]\n");
  auto e = error_of([&] { images::load_recipe(t / "bad.yaml"); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(std::string(e.what()).find("pakages") != std::string::npos);
}

TEST_CASE("a stored image is found by name, id and id prefix; a second add is a hit", "[images]") {
  TempDir t("images");
  images::Store store(t.path);
  int calls = 0;
  bool hit = true;
  auto img = store.add(kA, fill_with("one", &calls), &hit);
  CHECK_FALSE(hit);
  CHECK(img.id == kA);
  CHECK(img.rootfs == t.path + "/" + std::string(64, 'a') + "/rootfs");
  CHECK(sbx_test::read_text(img.rootfs + "/etc/marker") == "one");
  CHECK(img.meta["packages"]["python3"] == "3.11.2-1+b1");
  CHECK(img.meta["size"].get<uint64_t>() == 3);
  store.add(kA, fill_with("two", &calls), &hit);
  CHECK(hit);
  CHECK(calls == 1);
  CHECK(sbx_test::read_text(img.rootfs + "/etc/marker") == "one");
  store.tag("py", kA);
  CHECK(store.get("py").id == kA);
  CHECK(store.get(kA).id == kA);
  CHECK(store.get(std::string(64, 'a')).id == kA);
  CHECK(store.get("aaaaaaaa").id == kA);
  CHECK(store.get("py").names == std::vector<std::string>{"py"});
  auto missing = error_of([&] { store.get("numpy"); });
  CHECK(missing.code() == Errc::not_found);
  CHECK(missing.hint().find("sbx image build numpy") != std::string::npos);
  CHECK(error_of([&] { store.tag("host", kA); }).code() == Errc::invalid_argument);
  CHECK(error_of([&] { store.tag("../x", kA); }).code() == Errc::invalid_argument);
  CHECK(error_of([&] { store.tag("other", kB); }).code() == Errc::not_found);
}

TEST_CASE("a failed fill leaves nothing in the store", "[images]") {
  TempDir t("images");
  images::Store store(t.path);
  auto e = error_of([&] {
    store.add(kA, [](const std::string& rootfs) -> nlohmann::json {
      sbx_test::write_text(rootfs + "/half", "x");
      throw sbx::Error(Errc::io, "mmdebstrap failed");
    });
  });
  CHECK(e.code() == Errc::io);
  CHECK(store.list().empty());
  CHECK_FALSE(sbx::path_exists(t.path + "/" + std::string(64, 'a')));
  CHECK_FALSE(sbx::path_exists(t.path + "/tmp/" + std::string(64, 'a') + ".build"));
}

TEST_CASE("an image in use cannot be removed; a stale user does not count", "[images]") {
  TempDir t("images"), state("state");
  images::Store store(t.path);
  auto img = store.add(kA, fill_with("x"));
  store.tag("py", kA);
  store.tag("py2", kA);
  sbx::make_dirs(state / "sbx_aaaaaaaaaaaa");
  images::add_user(img.rootfs, "sbx_aaaaaaaaaaaa", state / "sbx_aaaaaaaaaaaa");
  images::add_user(img.rootfs, "sbx_bbbbbbbbbbbb", state / "sbx_bbbbbbbbbbbb");  // its directory is gone: stale
  REQUIRE(store.users(img).size() == 1);
  // Dropping one of two names deletes nothing, so it is allowed.
  CHECK(store.remove("py2") == std::vector<std::string>{"name py2"});
  auto e = error_of([&] { store.remove("py"); });
  CHECK(e.code() == Errc::conflict);
  CHECK(std::string(e.what()).find("sbx_aaaaaaaaaaaa") != std::string::npos);
  CHECK(error_of([&] { store.remove(kA); }).code() == Errc::conflict);
  images::drop_user(img.rootfs, "sbx_aaaaaaaaaaaa");
  auto gone = store.remove("py");
  CHECK(gone == std::vector<std::string>{"name py", "image " + kA});
  CHECK(store.list().empty());
  CHECK_FALSE(store.find("py"));
  // A sandbox cannot start on an image that was removed meanwhile.
  CHECK(error_of([&] { images::add_user(img.rootfs, "sbx_cccccccccccc", state.path); }).code() == Errc::not_found);
}

TEST_CASE("gc takes unnamed unused images, stale users, abandoned builds and unused debs", "[images]") {
  TempDir t("images"), state("state"), cache("apt");
  images::Store store(t.path);
  auto named = store.add(kA, fill_with("a"));
  store.tag("keep", kA);
  auto unnamed = store.add(kB, fill_with("b"));
  images::add_user(named.rootfs, "sbx_dddddddddddd", state / "gone");
  sbx::make_dirs(t.path + "/tmp/" + std::string(64, 'e') + ".build/rootfs");
  sbx_test::write_text(cache / "python3_3.11.2-1+b1_amd64.deb", "kept");
  sbx_test::write_text(cache / "curl_7.88.1-10_amd64.deb", "unused");
  auto dry = store.gc(true, cache.path);
  CHECK(dry.size() == 4);
  CHECK(store.list().size() == 2);
  auto done = store.gc(false, cache.path);
  for (auto& a : done) CHECK(a.done);
  auto left = store.list();
  REQUIRE(left.size() == 1);
  CHECK(left[0].id == kA);
  CHECK_FALSE(sbx::path_exists(named.dir + "/users/sbx_dddddddddddd"));
  CHECK_FALSE(sbx::path_exists(t.path + "/tmp/" + std::string(64, 'e') + ".build"));
  CHECK(sbx::path_exists(cache / "python3_3.11.2-1+b1_amd64.deb"));
  CHECK_FALSE(sbx::path_exists(cache / "curl_7.88.1-10_amd64.deb"));
  // An unnamed image a sandbox uses stays.
  auto again = store.add(kB, fill_with("b"));
  sbx::make_dirs(state / "live");
  images::add_user(again.rootfs, "sbx_eeeeeeeeeeee", state / "live");
  store.gc(false);
  CHECK(store.list().size() == 2);
}

TEST_CASE("resolving a spec's image: default, host, names, directories", "[images]") {
  TempDir t("images");
  auto cfg = config_for(t.path);
  CHECK(cfg.images_dir == t.path);
  CHECK(cfg.default_image == "default");
  sbx::DriverTable drivers = {{"withimages", "", &no_probes, &no_driver, true, true},
                              {"own", "", &no_probes, &no_driver, false, false}};
  // Nothing built: the host view, as before images.
  CHECK(images::resolve("", "withimages", cfg, drivers).empty());
  images::Store store(t.path);
  auto img = store.add(kA, fill_with("x"));
  store.tag("default", kA);
  CHECK(images::resolve("", "withimages", cfg, drivers) == img.rootfs);
  CHECK(images::resolve("", "own", cfg, drivers).empty());  // deno keeps its own files
  CHECK(images::resolve("host", "withimages", cfg, drivers).empty());
  CHECK(images::resolve("default", "own", cfg, drivers) == img.rootfs);  // explicit: the driver judges
  CHECK(images::resolve("/some/dir", "withimages", cfg, drivers) == "/some/dir");
  CHECK(error_of([&] { images::resolve("numpy", "withimages", cfg, drivers); }).code() == Errc::not_found);
  // A configured default that is missing is an error, not a quiet host view.
  sbx::ConfigInputs in;
  in.env["SBX_IMAGES_DIR"] = t.path;
  auto cfg2 = sbx::resolve_config_text(in, "defaults:\n  image: numpy\n", "/etc/sbx/config.yaml");
  auto e = error_of([&] { images::resolve("", "withimages", cfg2, drivers); });
  CHECK(e.code() == Errc::not_found);
  CHECK(std::string(e.what()).find("defaults.image") != std::string::npos);
  auto cfg3 = sbx::resolve_config_text(in, "defaults:\n  image: host\n", "/etc/sbx/config.yaml");
  CHECK(images::resolve("", "withimages", cfg3, drivers).empty());
  CHECK(error_of([&] { sbx::resolve_config_text(in, "defaults:\n  image: /srv/root\n", "f"); }).code() == Errc::invalid_argument);
  CHECK(error_of([&] { sbx::resolve_config_text(in, "images:\n  dirr: /x\n", "f"); }).code() == Errc::invalid_argument);
}
