// sbx image: build, import, list, inspect, remove and collect images (the
// store is core/images.hpp; building is core/image_build.hpp).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include <fmt/core.h>

#include "cli/common.hpp"
#include "core/image_build.hpp"
#include "core/units.hpp"

namespace sbx::cli {

namespace {

std::string short_id(const std::string& id) { return id.substr(0, 7 + 12); }

std::string age(int64_t created_ms) {
  using namespace std::chrono;
  auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  // Whole seconds: a table has no room for "43.995s".
  uint64_t s = static_cast<uint64_t>(std::max<int64_t>(0, now - created_ms)) / 1000;
  return created_ms ? format_duration_ms(s * 1000) + " ago" : "?";
}

std::string source_of(const images::Image& img) {
  auto src = img.meta.value("source", nlohmann::json::object());
  std::string type = src.value("type", "?");
  if (type == "recipe" && src.contains("recipe"))
    return "recipe " + src["recipe"].value("suite", "?") + " (" + std::to_string(src["recipe"].value("packages", nlohmann::json::array()).size()) + " packages)";
  if (type == "oci") return "oci " + src.value("src", "?");
  return type;
}

nlohmann::json image_json(const images::Store& store, const images::Image& img) {
  nlohmann::json j = img.meta;
  j["id"] = img.id;
  j["names"] = img.names;
  j["rootfs"] = img.rootfs;
  j["users"] = nlohmann::json::array();
  for (auto& u : store.users(img)) j["users"].push_back({{"sandbox", u.sandbox_id}, {"dir", u.sandbox_dir}});
  return j;
}

void add_build(CLI::App* image, Globals& g) {
  auto* sub = image->add_subcommand("build", "Build a Debian image with mmdebstrap from a recipe; prints its id");
  struct State {
    std::string name, suite, file;
    std::vector<std::string> packages;
  };
  auto st = std::make_shared<State>();
  sub->add_option("NAME", st->name, "the image's name (`default`: the built-in default recipe)")->required();
  sub->add_option("--packages", st->packages, "Debian packages to install, e.g. python3-numpy (repeatable, or comma-separated)")
      ->type_name("PKG")
      ->delimiter(',');
  sub->add_option("--suite", st->suite, "Debian suite (default bookworm)")->type_name("SUITE");
  sub->add_option("--file", st->file, "recipe file (YAML: suite, variant, packages, mirror)")->type_name("FILE");
  sub->callback([&g, st] {
    Config cfg = load_config(g);
    images::Recipe r;
    if (!st->file.empty()) r = images::load_recipe(st->file);
    else if (st->name == images::kDefaultName && st->packages.empty()) r = images::default_recipe();
    r.packages.insert(r.packages.end(), st->packages.begin(), st->packages.end());
    if (!st->suite.empty()) r.suite = st->suite;
    images::BuildOptions opts;
    opts.apt_cache = cfg.apt_cache_dir;
    opts.verbose = is_tty(2);
    opts.note = [](const std::string& m) { std::fprintf(stderr, "sbx: %s\n", m.c_str()); };
    auto store = images::store_for(cfg);
    auto t0 = std::chrono::steady_clock::now();
    auto made = images::build(store, st->name, r, opts);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    uint64_t size = made.image.meta.value("size", uint64_t{0});
    if (made.cached)
      std::fprintf(stderr, "sbx: %s is up to date (the same recipe was built before)\n", st->name.c_str());
    else
      std::fprintf(stderr, "sbx: built %s: %zu packages, %s, in %s\n", st->name.c_str(),
                   made.image.meta.value("packages", nlohmann::json::object()).size(), format_size(size).c_str(),
                   format_duration_ms(static_cast<uint64_t>(ms)).c_str());
    std::printf("%s\n", made.image.id.c_str());
  });
}

void add_import(CLI::App* image, Globals& g) {
  auto* sub = image->add_subcommand("import", "Import an OCI image (docker/podman save archive or layout directory); prints its id");
  struct State {
    std::string src, name, ref;
  };
  auto st = std::make_shared<State>();
  sub->add_option("SRC", st->src, "the archive or OCI layout directory")->required();
  sub->add_option("--name", st->name, "name the image")->type_name("NAME");
  sub->add_option("--ref", st->ref, "which image of a multi-image archive (a tag or digest)")->type_name("REF");
  sub->callback([&g, st] {
    Config cfg = load_config(g);
    auto store = images::store_for(cfg);
    auto made = images::import_oci(store, st->src, st->name, st->ref);
    if (made.cached) std::fprintf(stderr, "sbx: this image was imported before\n");
    std::printf("%s\n", made.image.id.c_str());
  });
}

void add_ls(CLI::App* image, Globals& g) {
  auto* sub = image->add_subcommand("ls", "List images");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "JSON array of images");
  sub->callback([&g, json] {
    Config cfg = load_config(g);
    auto store = images::store_for(cfg);
    auto all = store.list();
    if (*json) {
      nlohmann::json arr = nlohmann::json::array();
      for (auto& img : all) arr.push_back(image_json(store, img));
      std::printf("%s\n", arr.dump(2).c_str());
      return;
    }
    if (all.empty()) {
      std::printf("no images in %s (build one: sbx image build default)\n", store.dir().c_str());
      return;
    }
    std::printf("%-20s %-19s %9s %6s %-14s %s\n", "NAME", "ID", "SIZE", "USERS", "CREATED", "SOURCE");
    for (auto& img : all) {
      std::string names;
      for (auto& n : img.names) names += (names.empty() ? "" : ",") + n;
      std::printf("%-20s %-19s %9s %6zu %-14s %s\n", names.empty() ? "-" : names.c_str(), short_id(img.id).c_str(),
                  format_size(img.meta.value("size", uint64_t{0})).c_str(), store.users(img).size(),
                  age(img.meta.value("created_ms", int64_t{0})).c_str(), source_of(img).c_str());
    }
  });
}

void add_inspect(CLI::App* image, Globals& g) {
  auto* sub = image->add_subcommand("inspect", "Show an image's record (JSON): packages, source, size, users");
  auto ref = std::make_shared<std::string>();
  sub->add_option("IMAGE", *ref, "a name or id")->required();
  sub->callback([&g, ref] {
    Config cfg = load_config(g);
    auto store = images::store_for(cfg);
    std::printf("%s\n", image_json(store, store.get(*ref)).dump(2).c_str());
  });
}

void add_rm(CLI::App* image, Globals& g, Outcome& out) {
  auto* sub = image->add_subcommand("rm", "Remove images or names (refused while a sandbox uses the image)");
  auto refs = std::make_shared<std::vector<std::string>>();
  sub->add_option("IMAGE", *refs, "names or ids")->required();
  sub->callback([&g, &out, refs] {
    Config cfg = load_config(g);
    auto store = images::store_for(cfg);
    std::optional<Error> last;
    for (auto& ref : *refs) {
      try {
        for (auto& what : store.remove(ref)) std::printf("removed %s\n", what.c_str());
      } catch (const Error& e) {
        print_error(e);
        last = e;
      }
    }
    if (last) out.status = exit_status(last->code());
  });
}

void add_gc(CLI::App* image, Globals& g, Outcome& out) {
  auto* sub = image->add_subcommand("gc", "Remove unnamed unused images, abandoned builds and unused cached packages");
  struct State {
    bool dry_run = false, json = false;
  };
  auto st = std::make_shared<State>();
  sub->add_flag("--dry-run", st->dry_run, "list what would be removed, change nothing");
  sub->add_flag("--json", st->json, "JSON report");
  sub->callback([&g, &out, st] {
    Config cfg = load_config(g);
    std::vector<PlacedGcAction> actions;
    for (auto& a : images::store_for(cfg).gc(st->dry_run, cfg.apt_cache_dir)) actions.push_back({"", std::move(a)});
    out.status = print_gc_report(actions, st->dry_run, st->json);
  });
}

}  // namespace

void register_image(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("image", "Build, import, list and remove images (read-only root filesystems)");
  sub->require_subcommand(1);
  add_build(sub, g);
  add_import(sub, g);
  add_ls(sub, g);
  add_inspect(sub, g);
  add_rm(sub, g, out);
  add_gc(sub, g, out);
}

}  // namespace sbx::cli
