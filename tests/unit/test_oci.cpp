// sbx::oci::unpack against real archives: layer tars written here with
// libarchive (plain, gzip, zstd) and packed as docker archives, OCI layouts
// and OCI archives; hostile layers refused with a planted tree left alone; and
// a podman round trip (import, build, save in three formats) where podman is.
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/lazy_libs.hpp"
#include "core/oci.hpp"
#include "core/oci_detail.hpp"
#include "tests/unit/helpers.hpp"

using nlohmann::json;
using sbx::oci::detail::sha256_of;
using sbx_test::exists;
using sbx_test::read_text;
using sbx_test::TempDir;
using sbx_test::write_text;

namespace {

const sbx::ArchiveApi& la() { return sbx::archive_api(); }

struct Ent {
  std::string name;
  char type = 'f';   // f file, d dir, l symlink, h hard link, c char device, p FIFO
  std::string data;  // content, or link target
  unsigned mode = 0644;
  int uid = 0, gid = 0;
};

constexpr int64_t kMtime = 1'600'000'000;

// A tar (pax) of the entries, optionally compressed ("gzip", "zstd").
std::string tar_bytes(const std::vector<Ent>& entries, const std::string& filter = "") {
  TempDir scratch("oci-tar");
  std::string path = scratch / "t";
  {
    sbx::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    REQUIRE(fd);
    archive* a = la().archive_write_new();
    REQUIRE(la().archive_write_set_format_pax_restricted(a) == ARCHIVE_OK);
    if (filter == "gzip") REQUIRE(la().archive_write_add_filter_gzip(a) == ARCHIVE_OK);
    if (filter == "zstd") REQUIRE(la().archive_write_add_filter_zstd(a) == ARCHIVE_OK);
    REQUIRE(la().archive_write_open_fd(a, fd.get()) == ARCHIVE_OK);
    for (auto& e : entries) {
      archive_entry* ent = la().archive_entry_new();
      la().archive_entry_set_pathname(ent, e.name.c_str());
      la().archive_entry_set_perm(ent, static_cast<mode_t>(e.mode));
      la().archive_entry_set_mtime(ent, kMtime, 0);
      la().archive_entry_set_uid(ent, e.uid);
      la().archive_entry_set_gid(ent, e.gid);
      switch (e.type) {
        case 'f':
          la().archive_entry_set_filetype(ent, AE_IFREG);
          la().archive_entry_set_size(ent, static_cast<la_int64_t>(e.data.size()));
          break;
        case 'd': la().archive_entry_set_filetype(ent, AE_IFDIR); break;
        case 'l':
          la().archive_entry_set_filetype(ent, AE_IFLNK);
          la().archive_entry_set_symlink(ent, e.data.c_str());
          break;
        case 'h':
          la().archive_entry_set_filetype(ent, AE_IFREG);
          la().archive_entry_set_hardlink(ent, e.data.c_str());
          break;
        case 'c':
          la().archive_entry_set_filetype(ent, AE_IFCHR);
          la().archive_entry_set_rdev(ent, makedev(1, 3));
          break;
        case 'p': la().archive_entry_set_filetype(ent, AE_IFIFO); break;
      }
      REQUIRE(la().archive_write_header(a, ent) == ARCHIVE_OK);
      if (e.type == 'f' && !e.data.empty())
        REQUIRE(la().archive_write_data(a, e.data.data(), e.data.size()) == static_cast<la_ssize_t>(e.data.size()));
      la().archive_entry_free(ent);
    }
    REQUIRE(la().archive_write_close(a) == ARCHIVE_OK);
    la().archive_write_free(a);
  }
  return read_text(path);
}

using Files = std::map<std::string, std::string>;

std::string hex(const std::string& digest) { return digest.substr(7); }

json config_json(const std::vector<std::string>& diff_ids) {
  return {{"architecture", "amd64"},
          {"os", "linux"},
          {"config",
           {{"Env", {"PATH=/usr/bin:/bin", "GREETING=hi"}},
            {"Entrypoint", {"/bin/sh"}},
            {"Cmd", {"-c", "echo"}},
            {"WorkingDir", "/srv"},
            {"Labels", {{"org.example", "yes"}}}}},
          {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}};
}

struct Layer {
  std::vector<Ent> entries;
  std::string filter;  // "", "gzip", "zstd"
};

std::vector<std::string> diff_ids_of(const std::vector<Layer>& layers) {
  std::vector<std::string> out;
  for (auto& l : layers) out.push_back(sha256_of(tar_bytes(l.entries)));
  return out;
}

// A docker archive (old layout: <n>/layer.tar, <config hex>.json).
Files docker_image(const std::vector<Layer>& layers, std::string* config_digest = nullptr,
                   const std::string& tag = "localhost/app:1") {
  Files f;
  std::string config = config_json(diff_ids_of(layers)).dump();
  std::string cd = sha256_of(config);
  if (config_digest) *config_digest = cd;
  f[hex(cd) + ".json"] = config;
  json paths = json::array();
  for (size_t i = 0; i < layers.size(); ++i) {
    std::string p = "layer" + std::to_string(i) + "/layer.tar";
    f[p] = tar_bytes(layers[i].entries);
    paths.push_back(p);
  }
  f["manifest.json"] = json::array({{{"Config", hex(cd) + ".json"}, {"RepoTags", {tag}}, {"Layers", paths}}}).dump();
  return f;
}

// Adds one image to an OCI layout; returns its manifest digest.
std::string add_oci_image(Files& f, const std::vector<Layer>& layers, const std::string& ref,
                          std::vector<std::string>* layer_digests = nullptr) {
  std::string config = config_json(diff_ids_of(layers)).dump();
  f["blobs/sha256/" + hex(sha256_of(config))] = config;
  json ls = json::array();
  for (auto& l : layers) {
    std::string blob = tar_bytes(l.entries, l.filter);
    std::string d = sha256_of(blob);
    f["blobs/sha256/" + hex(d)] = blob;
    if (layer_digests) layer_digests->push_back(d);
    ls.push_back({{"mediaType", "application/vnd.oci.image.layer.v1.tar" + (l.filter.empty() ? "" : "+" + l.filter)},
                  {"digest", d},
                  {"size", blob.size()}});
  }
  json m = {{"schemaVersion", 2},
            {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
            {"config",
             {{"mediaType", "application/vnd.oci.image.config.v1+json"},
              {"digest", sha256_of(config)},
              {"size", config.size()}}},
            {"layers", ls}};
  std::string manifest = m.dump();
  std::string md = sha256_of(manifest);
  f["blobs/sha256/" + hex(md)] = manifest;
  json index = f.count("index.json") ? json::parse(f["index.json"]) : json{{"schemaVersion", 2}, {"manifests", json::array()}};
  index["manifests"].push_back({{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                                {"digest", md},
                                {"size", manifest.size()},
                                {"annotations", {{"org.opencontainers.image.ref.name", ref}}}});
  f["index.json"] = index.dump();
  f["oci-layout"] = R"({"imageLayoutVersion":"1.0.0"})";
  return md;
}

void write_dir(const Files& f, const std::string& dir) {
  for (auto& [name, data] : f) {
    std::string p = dir + "/" + name;
    sbx::make_dirs(p.substr(0, p.rfind('/')));
    write_text(p, data);
  }
}

std::string write_tar(const Files& f, const std::string& path, const std::string& filter = "") {
  std::vector<Ent> es;
  for (auto& [name, data] : f) es.push_back({name, 'f', data});
  write_text(path, tar_bytes(es, filter));
  return path;
}

struct stat lstat_of(const std::string& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (dirent* e = ::readdir(d))
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.emplace_back(e->d_name);
  ::closedir(d);
  return out;
}

// The layers of the main test image: the first lays down a tree, the second
// and third delete and hide parts of it through whiteouts.
std::vector<Layer> sample_layers() {
  Layer base{{{"etc", 'd', "", 0755},
              {"etc/passwd", 'f', "root:x:0:0\n"},
              {"./bin/", 'd', "", 0755},
              {"bin/busybox", 'f', "BUSYBOX", 04755},
              {"bin/sh", 'l', "busybox"},
              {"bin/ls", 'h', "bin/busybox"},
              {"opt/lower.txt", 'f', "lower"},
              {"var/gone.txt", 'f', "gone"},
              {"var/keep.txt", 'f', "keep"},
              {"run/initctl", 'p', "", 0600},
              {"home/u/file", 'f', "mine", 0600, 1000, 1000},
              {"/abs/file", 'f', "absolute names are taken relative"},
              {"srv/old.txt", 'f', "old"},
              {"swap", 'd', "", 0755},
              {"swap/inner", 'f', "a directory replaced by a file"}},
             ""};
  Layer second{{{"var/.wh.gone.txt", 'f', ""},
                {"opt/.wh..wh..opq", 'f', ""},
                {"opt/new.txt", 'f', "new"},
                {"etc/passwd", 'f', "root:x:0:0:new\n"},
                {"newdir/x", 'f', "same-layer whiteouts do not hide"},
                {"newdir/.wh.x", 'f', ""},
                {"swap", 'f', "now a file"}},
               ""};
  Layer third{{{"srv/a.txt", 'f', "kept: written before the marker, in the same layer"},
               {"srv/.wh..wh..opq", 'f', ""}},
              ""};
  return {base, second, third};
}

void check_sample_tree(const std::string& r) {
  CHECK(read_text(r + "/etc/passwd") == "root:x:0:0:new\n");
  CHECK(read_text(r + "/bin/busybox") == "BUSYBOX");
  CHECK((lstat_of(r + "/bin/busybox").st_mode & 07777) == 04755);
  CHECK(lstat_of(r + "/bin/busybox").st_mtime == kMtime);
  char buf[64] = {};
  REQUIRE(::readlink((r + "/bin/sh").c_str(), buf, sizeof buf - 1) > 0);
  CHECK(std::string(buf) == "busybox");
  CHECK(lstat_of(r + "/bin/ls").st_ino == lstat_of(r + "/bin/busybox").st_ino);
  CHECK(S_ISFIFO(lstat_of(r + "/run/initctl").st_mode));
  CHECK(!exists(r + "/var/gone.txt"));
  CHECK(read_text(r + "/var/keep.txt") == "keep");
  CHECK(!exists(r + "/opt/lower.txt"));
  CHECK(read_text(r + "/opt/new.txt") == "new");
  CHECK(exists(r + "/newdir/x"));
  CHECK(exists(r + "/srv/a.txt"));
  CHECK(!exists(r + "/srv/old.txt"));
  CHECK(read_text(r + "/abs/file") == "absolute names are taken relative");
  CHECK(read_text(r + "/swap") == "now a file");
  if (::geteuid() == 0) {
    CHECK(lstat_of(r + "/home/u/file").st_uid == 1000);
    CHECK(lstat_of(r + "/home/u/file").st_gid == 1000);
  }
  CHECK((lstat_of(r + "/home/u/file").st_mode & 07777) == 0600);
}

void check_sample_config(const sbx::oci::ImageConfig& c) {
  CHECK(c.env == std::vector<std::string>{"PATH=/usr/bin:/bin", "GREETING=hi"});
  CHECK(c.cmd == std::vector<std::string>{"/bin/sh", "-c", "echo"});
  CHECK(c.workdir == "/srv");
  CHECK(c.labels == std::map<std::string, std::string>{{"org.example", "yes"}});
}

}  // namespace

TEST_CASE("oci: SHA-256 gives the known answer", "[oci]") {
  CHECK(sha256_of("abc") == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_of("") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("oci: a docker archive's layers go down in order with whiteouts, links and modes", "[oci]") {
  TempDir t("oci");
  auto layers = sample_layers();
  std::string config_digest;
  std::string archive = write_tar(docker_image(layers, &config_digest), t / "image.tar");
  sbx::make_dirs(t / "rootfs");
  auto c = sbx::oci::unpack(archive, t / "rootfs");
  check_sample_tree(t / "rootfs");
  check_sample_config(c);
  CHECK(c.manifest_digest == config_digest);
  CHECK(c.layers == diff_ids_of(layers));
}

TEST_CASE("oci: OCI layouts (directory and archive) with gzip and zstd layers; --ref picks the image", "[oci]") {
  TempDir t("oci");
  auto layers = sample_layers();
  layers[0].filter = "gzip";
  layers[1].filter = "zstd";
  layers.push_back(Layer{{}, "gzip"});  // an empty layer, as some builders write for ENV-only steps
  Files f;
  std::vector<std::string> digests;
  std::string md = add_oci_image(f, layers, "localhost/app:1", &digests);
  add_oci_image(f, {Layer{{{"other", 'f', "x"}}, ""}}, "other:2");
  write_dir(f, t / "layout");
  std::string tarball = write_tar(f, t / "layout.tar");
  std::string gz = write_tar(f, t / "layout.tar.gz", "gzip");

  for (const std::string& src : {t / "layout", tarball, gz}) {
    INFO(src);
    std::string root = t / ("root-" + std::to_string(std::hash<std::string>{}(src)));
    sbx::make_dirs(root);
    auto c = sbx::oci::unpack(src, root, "app:1");  // matches localhost/app:1
    check_sample_tree(root);
    check_sample_config(c);
    CHECK(c.manifest_digest == md);
    CHECK(c.manifest_digest == sha256_of(f["blobs/sha256/" + hex(md)]));
    CHECK(c.layers == digests);
    CHECK(!exists(root + "/other"));
  }
  sbx::make_dirs(t / "r2");
  auto e = sbx_test::error_of([&] { sbx::oci::unpack(t / "layout", t / "r2"); });
  CHECK(e.code() == sbx::Errc::invalid_argument);
  CHECK(e.hint().find("--ref") != std::string::npos);
  e = sbx_test::error_of([&] { sbx::oci::unpack(t / "layout", t / "r2", "nope"); });
  CHECK(e.code() == sbx::Errc::not_found);
  CHECK(e.hint().find("localhost/app:1") != std::string::npos);
  auto c = sbx::oci::unpack(t / "layout", t / "r2", md);  // by digest
  CHECK(c.manifest_digest == md);
}

TEST_CASE("oci: content that does not match its digest is refused", "[oci]") {
  TempDir t("oci");
  Layer l{{{"a", 'f', "original"}}, "gzip"};
  SECTION("a layer blob altered in an OCI layout") {
    Files f;
    std::vector<std::string> digests;
    add_oci_image(f, {l}, "x", &digests);
    std::string& blob = f["blobs/sha256/" + hex(digests[0])];
    blob = tar_bytes({{"a", 'f', "tampered"}}, "gzip");
    write_dir(f, t / "layout");
    sbx::make_dirs(t / "root");
    auto e = sbx_test::error_of([&] { sbx::oci::unpack(t / "layout", t / "root"); });
    CHECK(e.code() == sbx::Errc::invalid_argument);
    CHECK(std::string(e.what()).find(digests[0]) != std::string::npos);
  }
  SECTION("a docker archive whose config names other layers") {
    Files f = docker_image({l});
    f["layer0/layer.tar"] = tar_bytes({{"a", 'f', "tampered"}});
    sbx::make_dirs(t / "root");
    auto e = sbx_test::error_of([&] { sbx::oci::unpack(write_tar(f, t / "d.tar"), t / "root"); });
    CHECK(e.code() == sbx::Errc::invalid_argument);
    CHECK(std::string(e.what()).find("uncompressed content") != std::string::npos);
  }
  SECTION("a manifest blob altered") {
    Files f;
    std::string md = add_oci_image(f, {l}, "x");
    f["blobs/sha256/" + hex(md)][0] = ' ';
    write_dir(f, t / "layout");
    sbx::make_dirs(t / "root");
    auto e = sbx_test::error_of([&] { sbx::oci::unpack(t / "layout", t / "root"); });
    CHECK(e.code() == sbx::Errc::invalid_argument);
  }
}

namespace {

// Unpacks a one-or-more-layer docker archive into <t>/rootfs beside a planted
// <t>/outside tree, and returns the refusal.
sbx::Error refused(const TempDir& t, const std::vector<Layer>& layers) {
  sbx::make_dirs(t / "outside");
  write_text(t / "outside/secret", "planted");
  sbx::make_dirs(t / "rootfs");
  std::string archive = write_tar(docker_image(layers), t / "hostile.tar");
  return sbx_test::error_of([&] { sbx::oci::unpack(archive, t / "rootfs"); });
}

void check_outside_untouched(const TempDir& t) {
  CHECK(read_text(t / "outside/secret") == "planted");
  CHECK(lstat_of(t / "outside/secret").st_nlink == 1);
  std::vector<std::string> names;
  for (auto& n : list_dir(t / "outside")) names.push_back(n);
  CHECK(names == std::vector<std::string>{"secret"});
  CHECK(!exists(t / "escape"));
}

}  // namespace

TEST_CASE("oci: hostile layers are refused and nothing lands outside the root", "[oci]") {
  TempDir t("oci");
  std::string outside = t / "outside";
  struct Case {
    const char* what;
    std::vector<Layer> layers;
    std::string entry, says;
  };
  std::vector<Case> cases = {
      {"a .. name", {Layer{{{"../escape", 'f', "x"}}, ""}}, "../escape", "'..'"},
      {"a deeper .. name", {Layer{{{"a/../../escape", 'f', "x"}}, ""}}, "a/../../escape", "'..'"},
      {"a symlink used as a parent",
       {Layer{{{"etc", 'l', outside}, {"etc/passwd", 'f', "x"}}, ""}},
       "etc/passwd",
       "symbolic link"},
      {"a symlink from a lower layer used as a parent",
       {Layer{{{"lib", 'l', outside}}, ""}, Layer{{{"lib/evil", 'f', "x"}}, ""}},
       "lib/evil",
       "symbolic link"},
      {"an absolute hard link to a host file", {Layer{{{"shadow", 'h', "/etc/shadow"}}, ""}}, "shadow", "not in the image"},
      {"a hard link climbing out", {Layer{{{"x", 'h', "../outside/secret"}}, ""}}, "x", "outside the image"},
      {"a hard link through a symlink",
       {Layer{{{"up", 'l', outside}, {"y", 'h', "up/secret"}}, ""}},
       "y",
       "symbolic link"},
      {"a character device", {Layer{{{"dev/null", 'c', ""}}, ""}}, "dev/null", "device node"},
  };
  for (auto& c : cases) {
    INFO(c.what);
    TempDir td("oci-hostile");
    for (auto& l : c.layers)
      for (auto& e : l.entries)
        if (e.type == 'l' && e.data == outside) e.data = td / "outside";
    auto e = refused(td, c.layers);
    CHECK(e.code() == sbx::Errc::invalid_argument);
    std::string msg = e.what();
    CHECK(msg.find("'" + c.entry + "'") != std::string::npos);
    CHECK(msg.find(c.says) != std::string::npos);
    CHECK(msg.find(diff_ids_of(c.layers).back()) != std::string::npos);  // names the layer
    CHECK(!e.hint().empty());
    check_outside_untouched(td);
  }
  struct stat shadow;
  if (::lstat("/etc/shadow", &shadow) == 0) CHECK(shadow.st_nlink == 1);
}

TEST_CASE("oci: malformed images are refused, and manifests are read within a cap", "[oci]") {
  TempDir t("oci");
  sbx::make_dirs(t / "root");
  SECTION("a huge manifest.json") {
    Files f{{"manifest.json", "[" + std::string(5 << 20, ' ') + "]"}};
    auto e = sbx_test::error_of([&] { sbx::oci::unpack(write_tar(f, t / "a.tar"), t / "root"); });
    CHECK(e.code() == sbx::Errc::too_large);
  }
  SECTION("a config path leaving the archive") {
    Files f = docker_image({Layer{{{"a", 'f', "x"}}, ""}});
    json m = json::parse(f["manifest.json"]);
    m[0]["Config"] = "../x.json";
    f["manifest.json"] = m.dump();
    auto e = sbx_test::error_of([&] { sbx::oci::unpack(write_tar(f, t / "a.tar"), t / "root"); });
    CHECK(e.code() == sbx::Errc::invalid_argument);
    CHECK(std::string(e.what()).find("outside the image") != std::string::npos);
  }
  SECTION("a tar that is no image") {
    auto e = sbx_test::error_of(
        [&] { sbx::oci::unpack(write_tar(Files{{"hello", "x"}}, t / "a.tar"), t / "root"); });
    CHECK(e.code() == sbx::Errc::invalid_argument);
    CHECK(std::string(e.what()).find("neither index.json") != std::string::npos);
  }
  SECTION("a file that is no tar") {
    write_text(t / "junk", std::string(4096, 'j'));
    auto e = sbx_test::error_of([&] { sbx::oci::unpack(t / "junk", t / "root"); });
    CHECK(e.code() == sbx::Errc::invalid_argument);
    CHECK(!e.hint().empty());
  }
  SECTION("a layer that is not a tar") {
    Files f;
    add_oci_image(f, {Layer{{{"a", 'f', "x"}}, ""}}, "x");
    json idx = json::parse(f["index.json"]);
    std::string md = idx["manifests"][0]["digest"];
    json m = json::parse(f["blobs/sha256/" + hex(md)]);
    std::string junk(3000, 'q');
    f["blobs/sha256/" + hex(sha256_of(junk))] = junk;
    m["layers"][0] = {{"mediaType", "application/vnd.oci.image.layer.v1.tar"}, {"digest", sha256_of(junk)}, {"size", 3000}};
    json cfg = config_json({sha256_of(junk)});
    f["blobs/sha256/" + hex(sha256_of(cfg.dump()))] = cfg.dump();
    m["config"] = {{"mediaType", "application/vnd.oci.image.config.v1+json"}, {"digest", sha256_of(cfg.dump())}, {"size", cfg.dump().size()}};
    std::string mtext = m.dump();
    f["blobs/sha256/" + hex(sha256_of(mtext))] = mtext;
    idx["manifests"][0]["digest"] = sha256_of(mtext);
    idx["manifests"][0]["size"] = mtext.size();
    f["index.json"] = idx.dump();
    write_dir(f, t / "layout");
    auto e = sbx_test::error_of([&] { sbx::oci::unpack(t / "layout", t / "root"); });
    CHECK(e.code() == sbx::Errc::invalid_argument);
    CHECK(std::string(e.what()).find(sha256_of(junk)) != std::string::npos);
  }
}
