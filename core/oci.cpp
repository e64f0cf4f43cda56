// Reading an image's manifests and applying its layers (core/oci_layers.cpp).
//
// Three inputs, two manifest formats:
//   - an OCI layout (oci-layout, index.json, blobs/sha256/...), as a directory
//     (`podman save --format oci-dir`, skopeo) or a tar of one (`--format
//     oci-archive`, and `docker save` since Docker 25, which writes both);
//   - a docker archive (manifest.json naming a config and layer tars by path:
//     `docker save` before 25, `podman save --format docker-archive`).
// The files come from core/oci_sources.cpp, the layers go down in
// core/oci_layers.cpp.
//
// Every blob is checked as it is read: OCI blobs against their descriptor's
// digest and size, every layer's uncompressed tar against the config's
// diff_id, a docker archive's config against the image ID its name carries.
// The image's identity (ImageConfig::manifest_digest) is the digest of the
// manifest applied; a docker archive has no manifest blob, so there it is the
// config's digest, which is the image ID `docker images` shows.
#include "core/oci.hpp"

#include <fcntl.h>
#include <sys/utsname.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/oci_detail.hpp"

namespace sbx::oci {

namespace {

using detail::kImageHint;
using detail::ReadFn;
using detail::Source;
using nlohmann::json;

// Manifests, indexes and configs are a few KiB; the cap keeps a hostile
// archive from making sbx allocate what it says.
constexpr size_t kMaxJson = 4 << 20;
constexpr size_t kMaxLayers = 1000;
constexpr int kMaxIndexDepth = 4;

Error malformed(const std::string& what) {
  return Error(Errc::invalid_argument, "malformed image: " + what).set_hint(kImageHint);
}

// A member name as a manifest gives it: relative, no "..", "./" dropped.
std::string member_name(const std::string& raw, const std::string& what) {
  auto parts = detail::components(raw);
  if (!parts || (!raw.empty() && raw[0] == '/')) throw malformed(what + " names '" + raw + "', outside the image");
  if (parts->empty()) throw malformed(what + " names no file");
  std::string out;
  for (auto& p : *parts) out += (out.empty() ? "" : "/") + p;
  return out;
}

bool is_hex64(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

void check_digest(const std::string& d, const std::string& what) {
  if (d.rfind("sha256:", 0) != 0) {
    if (d.find(':') != std::string::npos)
      throw Error(Errc::invalid_argument, what + " uses the digest algorithm of '" + d + "', which sbx does not check")
          .set_hint("re-save the image with sha256 digests (the default of docker, podman and skopeo)");
    throw malformed(what + " has the digest '" + d + "'");
  }
  if (!is_hex64(std::string_view(d).substr(7))) throw malformed(what + " has the digest '" + d + "'");
}

// ---- JSON -------------------------------------------------------------------------

std::string read_small(Source& src, const std::string& name, const std::string& what) {
  std::string out;
  src.stream(name, [&](const ReadFn& read) {
    std::vector<char> buf(64 * 1024);
    while (size_t n = read(buf.data(), buf.size())) {
      if (out.size() + n > kMaxJson)
        throw Error(Errc::too_large, what + " (" + name + ") is larger than 4 MiB")
            .set_hint("that is no real image's " + what + "; check the archive");
      out.append(buf.data(), n);
    }
  });
  return out;
}

json parse_json(const std::string& text, const std::string& what) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    if (j.is_array() && what == "manifest.json") return j;
    throw malformed(what + " is not a JSON object");
  }
  return j;
}

std::string str(const json& j, const char* key, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (!it->is_string()) throw malformed(what + "'s " + key + " is not a string");
  return it->get<std::string>();
}

std::vector<std::string> strings(const json& j, const char* key, const std::string& what) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) throw malformed(what + "'s " + key + " is not a list");
  for (auto& v : *it) {
    if (!v.is_string()) throw malformed(what + "'s " + key + " holds a non-string");
    out.push_back(v.get<std::string>());
  }
  return out;
}

/// The run settings of an image config (the "config" object of the OCI/docker config).
ImageConfig run_settings(const json& cfg) {
  ImageConfig out;
  auto it = cfg.find("config");
  if (it == cfg.end() || it->is_null()) return out;
  if (!it->is_object()) throw malformed("the image config's config is not an object");
  const json& c = *it;
  out.env = strings(c, "Env", "the image config");
  out.cmd = strings(c, "Entrypoint", "the image config");
  for (auto& s : strings(c, "Cmd", "the image config")) out.cmd.push_back(s);
  out.workdir = str(c, "WorkingDir", "the image config");
  auto labels = c.find("Labels");
  if (labels != c.end() && !labels->is_null()) {
    if (!labels->is_object()) throw malformed("the image config's Labels is not an object");
    for (auto& [k, v] : labels->items()) {
      if (!v.is_string()) throw malformed("the image config's label " + k + " is not a string");
      out.labels[k] = v.get<std::string>();
    }
  }
  return out;
}

std::vector<std::string> diff_ids(const json& cfg) {
  auto it = cfg.find("rootfs");
  if (it == cfg.end() || !it->is_object()) return {};
  auto ids = strings(*it, "diff_ids", "the image config's rootfs");
  for (auto& d : ids) check_digest(d, "a diff_id of the image config");
  return ids;
}

// ---- references ---------------------------------------------------------------------

// "localhost/app", "docker.io/library/app:latest" and "app" all name app:latest.
std::string canonical_ref(std::string r) {
  for (const char* prefix : {"docker.io/library/", "docker.io/", "localhost/"})
    if (r.rfind(prefix, 0) == 0) r.erase(0, std::string(prefix).size());
  size_t slash = r.rfind('/'), colon = r.rfind(':');
  if (r.find('@') == std::string::npos && (colon == std::string::npos || (slash != std::string::npos && colon < slash)))
    r += ":latest";
  return r;
}

bool ref_matches(const std::string& ref, const std::string& name) {
  return !name.empty() && (ref == name || canonical_ref(ref) == canonical_ref(name));
}

[[noreturn]] void no_such_ref(const std::string& ref, const std::vector<std::string>& names, size_t count) {
  std::string list;
  for (auto& n : names) list += (list.empty() ? "" : ", ") + n;
  if (ref.empty())
    throw Error(Errc::invalid_argument, "the archive holds " + std::to_string(count) + " images")
        .set_hint("pick one with --ref" + (list.empty() ? std::string() : " (" + list + ")"));
  throw Error(Errc::not_found, "the archive holds no image named " + ref)
      .set_hint(list.empty() ? "its images are untagged; name one by digest with --ref sha256:..."
                             : "it holds " + list);
}

// ---- OCI layouts ----------------------------------------------------------------------

struct Descriptor {
  std::string media_type, digest;
  int64_t size = -1;
  json annotations, platform;
};

Descriptor descriptor(const json& j, const std::string& what) {
  if (!j.is_object()) throw malformed(what + " is not a descriptor object");
  Descriptor d;
  d.media_type = str(j, "mediaType", what);
  d.digest = str(j, "digest", what);
  check_digest(d.digest, what);
  auto size = j.find("size");
  if (size != j.end()) {
    if (!size->is_number_unsigned() || size->get<uint64_t>() > (uint64_t{1} << 50))
      throw malformed(what + "'s size is not a byte count");
    d.size = size->get<int64_t>();
  }
  if (auto a = j.find("annotations"); a != j.end() && a->is_object()) d.annotations = *a;
  if (auto p = j.find("platform"); p != j.end() && p->is_object()) d.platform = *p;
  return d;
}

std::string blob_path(const std::string& digest) { return "blobs/sha256/" + digest.substr(7); }

std::string read_blob(Source& src, const Descriptor& d, const std::string& what) {
  std::string data = read_small(src, blob_path(d.digest), what);
  if (d.size >= 0 && data.size() != static_cast<uint64_t>(d.size))
    throw Error(Errc::invalid_argument, what + " " + d.digest + " is " + std::to_string(data.size()) +
                                            " bytes, its descriptor says " + std::to_string(d.size))
        .set_hint("the archive is damaged or was altered after it was saved; save the image again");
  if (std::string got = detail::sha256_of(data); got != d.digest)
    throw Error(Errc::invalid_argument, what + " " + d.digest + " has the content of " + got)
        .set_hint("the archive is damaged or was altered after it was saved; save the image again");
  return data;
}

std::vector<Descriptor> manifests_of(const json& index, const std::string& what) {
  auto it = index.find("manifests");
  if (it == index.end() || !it->is_array() || it->empty()) throw malformed(what + " lists no manifests");
  std::vector<Descriptor> out;
  for (auto& m : *it) out.push_back(descriptor(m, "a manifest descriptor in " + what));
  return out;
}

std::vector<std::string> ref_names(const Descriptor& d) {
  std::vector<std::string> out;
  for (const char* key : {"io.containerd.image.name", "org.opencontainers.image.ref.name"}) {
    auto it = d.annotations.find(key);
    if (it != d.annotations.end() && it->is_string()) out.push_back(it->get<std::string>());
  }
  return out;
}

Descriptor pick_by_ref(const std::vector<Descriptor>& ms, const std::string& ref) {
  std::vector<std::string> names;
  for (auto& m : ms)
    for (auto& n : ref_names(m)) names.push_back(n);
  if (ref.empty()) {
    if (ms.size() == 1) return ms[0];
    no_such_ref(ref, names, ms.size());
  }
  for (auto& m : ms) {
    if (ref == m.digest) return m;
    for (auto& n : ref_names(m))
      if (ref_matches(ref, n)) return m;
  }
  no_such_ref(ref, names, ms.size());
}

bool is_index(const Descriptor& d, const json& j) {
  return d.media_type == "application/vnd.oci.image.index.v1+json" ||
         d.media_type == "application/vnd.docker.distribution.manifest.list.v2+json" ||
         (j.contains("manifests") && !j.contains("layers"));
}

std::string host_arch() {
  struct utsname u {};
  ::uname(&u);
  std::string m = u.machine;
  if (m == "x86_64") return "amd64";
  if (m == "aarch64") return "arm64";
  return m;
}

// A multi-platform index: the entry for this host (attestations, with
// platform unknown/unknown, are skipped).
Descriptor pick_platform(const std::vector<Descriptor>& ms, const std::string& digest) {
  std::vector<Descriptor> fit;
  for (auto& m : ms) {
    std::string os, arch;
    if (m.platform.is_object()) os = str(m.platform, "os", "a platform"), arch = str(m.platform, "architecture", "a platform");
    if ((os.empty() && arch.empty()) || (os == "linux" && arch == host_arch())) fit.push_back(m);
  }
  if (fit.size() == 1) return fit[0];
  throw Error(Errc::invalid_argument, "the image index " + digest + " has " + std::to_string(fit.size()) +
                                          " manifests for linux/" + host_arch())
      .set_hint("save the image for one platform (podman save / docker save of a single-platform image)");
}

struct LayerRef {
  std::string path;
  detail::LayerCheck check;
};

ImageConfig apply(Source& src, int root_fd, const json& config, std::vector<LayerRef> layers) {
  ImageConfig out = run_settings(config);
  auto ids = diff_ids(config);
  if (layers.size() > kMaxLayers)
    throw malformed("it has " + std::to_string(layers.size()) + " layers (at most " + std::to_string(kMaxLayers) +
                    " are accepted)");
  if (!ids.empty() && ids.size() != layers.size())
    throw malformed("the manifest lists " + std::to_string(layers.size()) + " layers, the config " +
                    std::to_string(ids.size()));
  for (size_t i = 0; i < layers.size(); ++i) {
    auto& l = layers[i];
    if (!ids.empty()) l.check.diff_id = ids[i];
    if (l.check.name.empty()) l.check.name = !l.check.diff_id.empty() ? l.check.diff_id : l.path;
    src.stream(l.path, [&](const ReadFn& read) { detail::apply_layer(root_fd, read, l.check); });
    out.layers.push_back(!l.check.digest.empty() ? l.check.digest : l.check.name);
  }
  return out;
}

ImageConfig unpack_oci(Source& src, int root_fd, const std::string& ref) {
  json index = parse_json(read_small(src, "index.json", "the OCI index"), "index.json");
  Descriptor d = pick_by_ref(manifests_of(index, "index.json"), ref);
  json manifest;
  for (int depth = 0;; ++depth) {
    manifest = parse_json(read_blob(src, d, "the manifest"), "the manifest " + d.digest);
    if (!is_index(d, manifest)) break;
    if (depth == kMaxIndexDepth) throw malformed("image indexes nest deeper than " + std::to_string(depth));
    d = pick_platform(manifests_of(manifest, "the image index " + d.digest), d.digest);
  }
  auto cfg = manifest.find("config");
  if (cfg == manifest.end()) throw malformed("the manifest " + d.digest + " has no config");
  json config = parse_json(read_blob(src, descriptor(*cfg, "the manifest's config"), "the image config"),
                           "the image config");
  auto ls = manifest.find("layers");
  if (ls == manifest.end() || !ls->is_array()) throw malformed("the manifest " + d.digest + " has no layer list");
  std::vector<LayerRef> layers;
  for (auto& l : *ls) {
    Descriptor ld = descriptor(l, "a layer of the manifest " + d.digest);
    layers.push_back({blob_path(ld.digest), {ld.digest, ld.digest, ld.size, ""}});
  }
  ImageConfig out = apply(src, root_fd, config, std::move(layers));
  out.manifest_digest = d.digest;
  return out;
}

// ---- docker archives --------------------------------------------------------------------

const json& pick_docker(const json& manifest, const std::string& ref) {
  if (!manifest.is_array() || manifest.empty()) throw malformed("manifest.json lists no images");
  std::vector<std::string> names;
  for (auto& m : manifest) {
    if (!m.is_object()) throw malformed("manifest.json holds a non-object");
    for (auto& t : strings(m, "RepoTags", "manifest.json")) names.push_back(t);
  }
  if (ref.empty()) {
    if (manifest.size() == 1) return manifest[0];
    no_such_ref(ref, names, manifest.size());
  }
  for (auto& m : manifest) {
    std::string config = str(m, "Config", "manifest.json");
    if (ref.rfind("sha256:", 0) == 0 && config.find(ref.substr(7)) != std::string::npos) return m;
    for (auto& t : strings(m, "RepoTags", "manifest.json"))
      if (ref_matches(ref, t)) return m;
  }
  no_such_ref(ref, names, manifest.size());
}

// The digest a docker archive's member name carries: "<hex>.json" (the
// config, named by the image ID) or "blobs/sha256/<hex>" (Docker 25+).
std::string digest_in_name(const std::string& path) {
  std::string base = path.substr(path.rfind('/') + 1);
  if (path.rfind("blobs/sha256/", 0) == 0 && is_hex64(base)) return "sha256:" + base;
  if (base.size() == 69 && base.compare(64, 5, ".json") == 0 && is_hex64(base.substr(0, 64)))
    return "sha256:" + base.substr(0, 64);
  return "";
}

ImageConfig unpack_docker(Source& src, int root_fd, const std::string& ref) {
  json manifest = parse_json(read_small(src, "manifest.json", "the docker manifest"), "manifest.json");
  const json& m = pick_docker(manifest, ref);
  std::string config_path = member_name(str(m, "Config", "manifest.json"), "manifest.json's Config");
  std::string config_text = read_small(src, config_path, "the image config");
  std::string config_digest = detail::sha256_of(config_text);
  if (std::string named = digest_in_name(config_path); !named.empty() && named != config_digest)
    throw Error(Errc::invalid_argument, "the image config " + config_path + " has the content of " + config_digest)
        .set_hint("the archive is damaged or was altered after it was saved; save the image again");
  json config = parse_json(config_text, "the image config");
  std::vector<LayerRef> layers;
  for (auto& l : strings(m, "Layers", "manifest.json")) {
    std::string path = member_name(l, "manifest.json's Layers");
    std::string digest = digest_in_name(path);
    layers.push_back({path, {digest, digest, -1, ""}});
  }
  ImageConfig out = apply(src, root_fd, config, std::move(layers));
  out.manifest_digest = config_digest;
  return out;
}

}  // namespace

ImageConfig unpack(const std::string& src, const std::string& rootfs, const std::string& ref) {
  return with_context("importing the image " + src, [&] {
    auto source = detail::open_source(src);
    Fd root(::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root) throw sys_error("cannot open the root directory " + rootfs, errno);
    if (source->has("index.json")) return unpack_oci(*source, root.get(), ref);
    if (source->has("manifest.json")) return unpack_docker(*source, root.get(), ref);
    throw Error(Errc::invalid_argument, src + " is not an image: it has neither index.json (an OCI layout) nor "
                                              "manifest.json (a docker archive)")
        .set_hint(kImageHint);
  });
}

}  // namespace sbx::oci
