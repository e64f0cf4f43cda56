#include "core/image_build.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <set>

#include <yaml-cpp/yaml.h>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/oci.hpp"
#include "core/sha256.hpp"

namespace sbx::images {

namespace {

// Bumped whenever what a recipe builds changes meaning (new post-steps, a
// new normal form), so an old image is not taken for the new recipe's.
constexpr int kRecipeFormat = 1;

const std::vector<std::string> kVariants = {"essential", "apt", "required", "minbase", "important", "standard"};

bool valid_package(const std::string& p) {
  // Debian policy 5.6.1: lowercase letters, digits, + - . ; at least two, starting alphanumeric.
  if (p.size() < 2 || p.size() > 128 || !std::isalnum(static_cast<unsigned char>(p[0]))) return false;
  return std::all_of(p.begin(), p.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
  });
}

std::optional<std::string> which(const std::string& prog) {
  const char* path = std::getenv("PATH");
  std::string p = path && *path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (size_t pos = 0; pos <= p.size();) {
    size_t colon = std::min(p.find(':', pos), p.size());
    std::string cand = p.substr(pos, colon - pos) + "/" + prog;
    if (colon > pos && ::access(cand.c_str(), X_OK) == 0) return cand;
    pos = colon + 1;
  }
  return std::nullopt;
}

// Runs argv to completion and returns its exit status and output. `merged`:
// stdout and stderr both, each line also shown on our stderr when `echo`
// (mmdebstrap's progress). Otherwise stdout alone, stderr left to ours.
std::pair<int, std::string> run(const std::vector<std::string>& argv, bool merged, bool echo) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(out[0]);
    ::close(out[1]);
    throw sys_error("fork", err);
  }
  if (pid == 0) {
    ::dup2(out[1], 1);
    if (merged) ::dup2(out[1], 2);
    int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[8192];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (echo) (void)!::write(2, buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return {code, text};
}

// What dpkg says is installed in the new root: package -> version.
nlohmann::json package_versions(const std::string& rootfs) {
  auto [code, text] = run({"dpkg-query", "--admindir=" + rootfs + "/var/lib/dpkg", "-W", "-f=${Package}\t${Version}\n"},
                          false, false);
  if (code != 0) throw Error(Errc::io, "dpkg-query could not list the new image's packages (exit " + std::to_string(code) + ")");
  nlohmann::json out = nlohmann::json::object();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = std::min(text.find('\n', pos), text.size());
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    auto tab = line.find('\t');
    if (tab != std::string::npos && tab + 1 < line.size()) out[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return out;
}

// The lines of mmdebstrap's log that say why it failed, and the package apt could not find.
// `shown` is the part the user has not seen yet (empty when it went to the terminal).
Error build_failure(int code, const std::string& shown, const std::string& log) {
  std::string unknown, last;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t nl = std::min(log.find('\n', pos), log.size());
    std::string line = log.substr(pos, nl - pos);
    pos = nl + 1;
    const std::string marker = "Unable to locate package ";
    if (auto at = line.find(marker); at != std::string::npos && unknown.empty()) unknown = line.substr(at + marker.size());
    if (line.rfind("E: ", 0) == 0 && last.empty()) last = line.substr(3);
  }
  if (!unknown.empty())
    return Error(Errc::not_found, "package '" + unknown + "' is not in the Debian archive")
        .set_hint("check its name with `apt-cache search` (Python modules are python3-NAME, e.g. python3-numpy)");
  std::string tail = shown.size() > 1500 ? shown.substr(shown.size() - 1500) : shown;
  return Error(Errc::io, "mmdebstrap failed (exit " + std::to_string(code) + ")" + (last.empty() ? "" : ": " + last))
      .set_hint(tail.empty() ? "see its output above" : "its last output:\n" + tail);
}

std::vector<std::string> mmdebstrap_argv(const Recipe& r, const std::string& rootfs, const std::string& cache) {
  std::vector<std::string> argv = {"mmdebstrap", "--mode=root", "--variant=" + r.variant,
                                   // The result is renamed into place only when whole: a crash loses nothing, so no fsyncs.
                                   "--dpkgopt=force-unsafe-io", "--aptopt=Acquire::Languages \"none\""};
  if (!r.packages.empty()) {
    std::string list;
    for (auto& p : r.packages) list += (list.empty() ? "" : ",") + p;
    argv.push_back("--include=" + list);
  }
  if (!cache.empty()) {
    // Downloaded .debs kept between builds (mmdebstrap's documented recipe):
    // they stay in the root until copied out, then leave the image.
    argv.insert(argv.end(), {"--skip=download/empty", "--skip=essential/unlink",
                             "--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/",
                             "--setup-hook=sync-in " + cache + " /var/cache/apt/archives/",
                             "--customize-hook=sync-out /var/cache/apt/archives " + cache,
                             "--customize-hook=rm -f \"$1\"/var/cache/apt/archives/*.deb"});
  }
  // sbx's default working directory exists in every image.
  argv.push_back("--customize-hook=mkdir -p \"$1\"/work");
  argv.push_back(r.suite);
  argv.push_back(rootfs);
  if (!r.mirror.empty()) argv.push_back(r.mirror);
  return argv;
}

std::vector<std::string> yaml_list(const YAML::Node& n, const std::string& where) {
  std::vector<std::string> out;
  if (n.IsScalar()) {
    std::string t = n.Scalar();
    for (size_t pos = 0; pos <= t.size();) {
      size_t sep = std::min(t.find_first_of(", \t\n", pos), t.size());
      if (sep > pos) out.push_back(t.substr(pos, sep - pos));
      pos = sep + 1;
    }
    return out;
  }
  if (!n.IsSequence()) throw Error(Errc::invalid_argument, where + ": packages must be a list of package names");
  for (const auto& item : n) {
    if (!item.IsScalar()) throw Error(Errc::invalid_argument, where + ": an entry of packages is not a name");
    out.push_back(item.Scalar());
  }
  return out;
}

}  // namespace

Recipe default_recipe() {
  Recipe r;
  // Small on purpose: what `python` commands and everyday shell scripts reach
  // for. minbase already has bash, coreutils, dash, findutils, grep, gzip,
  // sed, tar, mawk, util-linux.
  r.packages = {"python3", "python-is-python3", "procps", "less", "xz-utils", "ca-certificates", "curl", "iproute2"};
  return normalized(r);
}

Recipe load_recipe(const std::string& path) {
  auto text = read_file_if_exists(path);
  if (!text) throw Error(Errc::not_found, "recipe file " + path + " does not exist");
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    throw Error(Errc::invalid_argument, "invalid YAML in " + path + ": " + e.msg);
  }
  Recipe r;
  if (root.IsNull()) return r;
  if (!root.IsMap()) throw Error(Errc::invalid_argument, path + ": a recipe is a mapping (suite, variant, packages, mirror)");
  for (const auto& kv : root) {
    std::string key = kv.first.Scalar();
    std::string at = path + " line " + std::to_string(kv.first.Mark().line + 1);
    if (key == "packages") r.packages = yaml_list(kv.second, at);
    else if (key != "suite" && key != "variant" && key != "mirror")
      throw Error(Errc::invalid_argument, "unknown key '" + key + "' in " + at + " (accepted: suite, variant, packages, mirror)");
    else if (!kv.second.IsScalar())
      throw Error(Errc::invalid_argument, at + ": " + key + " must be a single value");
    else (key == "suite" ? r.suite : key == "variant" ? r.variant : r.mirror) = kv.second.Scalar();
  }
  return r;
}

Recipe normalized(Recipe r) {
  if (r.suite.empty() || !std::all_of(r.suite.begin(), r.suite.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
      }))
    throw Error(Errc::invalid_argument, "'" + r.suite + "' is not a Debian suite").set_hint("e.g. bookworm, trixie, stable");
  if (std::find(kVariants.begin(), kVariants.end(), r.variant) == kVariants.end())
    throw Error(Errc::invalid_argument, "unknown variant '" + r.variant + "'").set_hint("variants: minbase, apt, essential, required, important, standard");
  if (!r.mirror.empty() && r.mirror.rfind("http://", 0) != 0 && r.mirror.rfind("https://", 0) != 0)
    throw Error(Errc::invalid_argument, "mirror '" + r.mirror + "' is not an http(s) URL");
  std::set<std::string> pkgs;
  for (auto& p : r.packages) {
    if (!valid_package(p))
      throw Error(Errc::invalid_argument, "'" + p.substr(0, 80) + "' is not a Debian package name")
          .set_hint("Python packages come from Debian too: python3-numpy, python3-requests, ...");
    pkgs.insert(p);
  }
  // The platform's commands call `python`; wherever Python 3 is, so is that name.
  bool python = std::any_of(pkgs.begin(), pkgs.end(), [](const std::string& p) { return p.rfind("python3", 0) == 0; });
  if (python) pkgs.insert("python-is-python3");
  r.packages.assign(pkgs.begin(), pkgs.end());
  return r;
}

nlohmann::json recipe_json(const Recipe& r) {
  return {{"format", kRecipeFormat}, {"suite", r.suite}, {"variant", r.variant}, {"packages", r.packages}};
}

std::string recipe_id(const Recipe& r) { return "sha256:" + sha256_hex(recipe_json(normalized(r)).dump()); }

Made build(Store& store, const std::string& name, const Recipe& in, const BuildOptions& opts) {
  check_image_name(name);
  Recipe r = normalized(in);
  if (::geteuid() != 0)
    throw Error(Errc::permission_denied, "building an image needs root (mmdebstrap installs packages as root)")
        .set_hint("run it as root: sudo sbx image build " + name);
  if (!which("mmdebstrap"))
    throw Error(Errc::unavailable, "mmdebstrap is not installed").set_hint("apt-get install mmdebstrap");
  if (!opts.apt_cache.empty()) make_dirs(opts.apt_cache, 0755);
  std::string id = recipe_id(r);
  auto fill = [&](const std::string& rootfs) {
    if (opts.note)
      opts.note("building " + name + " (" + r.suite + ", " + std::to_string(r.packages.size()) + " packages) with mmdebstrap");
    // mmdebstrap wants the target empty, and it is: Store::add made it so.
    auto [code, text] = run(mmdebstrap_argv(r, rootfs, opts.apt_cache), true, opts.verbose);
    if (code == 127 && text.empty())
      throw Error(Errc::unavailable, "mmdebstrap could not be started").set_hint("apt-get install mmdebstrap");
    if (code != 0) throw build_failure(code, opts.verbose ? std::string() : text, text);
    if (opts.note) opts.note("recording package versions");
    nlohmann::json source = {{"type", "recipe"}, {"recipe", recipe_json(r)}};
    if (!r.mirror.empty()) source["mirror"] = r.mirror;
    return nlohmann::json{{"source", source}, {"packages", package_versions(rootfs)}};
  };
  Made m;
  m.image = store.add(id, fill, &m.cached);
  store.tag(name, m.image.id);
  m.image = store.get(m.image.id);
  return m;
}

Made import_oci(Store& store, const std::string& src, const std::string& name, const std::string& ref) {
  if (!name.empty()) check_image_name(name);
  if (!path_exists(src)) throw Error(Errc::not_found, "no OCI archive or layout at " + src);
  auto fill = [&](const std::string& rootfs) {
    oci::ImageConfig c = oci::unpack(src, rootfs, ref);
    nlohmann::json source = {{"type", "oci"}, {"src", src}, {"ref", ref}, {"layers", c.layers}, {"env", c.env},
                             {"cmd", c.cmd}, {"workdir", c.workdir}, {"labels", c.labels}};
    nlohmann::json packages = nlohmann::json::object();
    if (path_exists(rootfs + "/var/lib/dpkg/status")) {
      try {
        packages = package_versions(rootfs);
      } catch (const Error&) {  // a foreign dpkg database: the image is still fine
      }
    }
    return nlohmann::json{{"id", c.manifest_digest}, {"source", source}, {"packages", packages}};
  };
  Made m;
  m.image = store.add("", fill, &m.cached);
  if (!name.empty()) store.tag(name, m.image.id);
  m.image = store.get(m.image.id);
  return m;
}

}  // namespace sbx::images
