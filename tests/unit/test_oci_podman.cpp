// A real podman round trip through sbx::oci::unpack: a busybox rootfs is
// `podman import`ed, a second layer (deleting a file: a whiteout) is added by
// `podman build --isolation chroot` (which needs no OCI runtime and no
// network), and the image is saved as a docker archive, an OCI archive and an
// OCI directory; each unpacks to the same runnable tree with podman's config.
// Podman keeps its storage in the test's temp dir (vfs driver), so the host's
// containers are not touched. Without podman the test says so and passes,
// unless SBX_REQUIRE_CAPABILITIES=1 (CI) makes it fail.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/oci.hpp"
#include "tests/unit/helpers.hpp"

using sbx_test::exists;
using sbx_test::read_text;
using sbx_test::TempDir;
using sbx_test::write_text;

namespace {

// Runs a shell command, its output kept in `log`; returns its exit status.
int sh(const std::string& cmd, const std::string& log) {
  int rc = std::system((cmd + " >" + log + " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

bool have_podman() { return std::system("command -v podman >/dev/null 2>&1") == 0; }

std::string busybox_rootfs(const TempDir& t) {
  std::string r = t / "rootfs";
  for (const char* d : {"bin", "etc", "tmp"}) sbx::make_dirs(r + "/" + d);
  REQUIRE(sh("cp /bin/busybox " + r + "/bin/busybox", t / "cp.log") == 0);
  for (const char* applet : {"sh", "echo", "cat", "ls", "rm", "mkdir"})
    REQUIRE(::symlink("busybox", (r + "/bin/" + applet).c_str()) == 0);
  write_text(r + "/etc/marker", "from the base layer\n");
  write_text(r + "/etc/gone", "deleted by the second layer\n");
  return r;
}

}  // namespace

TEST_CASE("oci: podman-saved images unpack (docker-archive, oci-archive, oci-dir)", "[oci][podman]") {
  if (!have_podman() || !exists("/bin/busybox")) {
    if (const char* must = std::getenv("SBX_REQUIRE_CAPABILITIES"); must && std::string(must) == "1")
      FAIL("SBX_REQUIRE_CAPABILITIES=1 but podman or busybox-static is missing");
    WARN("SKIPPED: podman or busybox-static is not installed (apt-get install podman busybox-static)");
    return;
  }
  TempDir t("oci-podman");
  std::string root = busybox_rootfs(t);
  std::string podman = "podman --root " + (t / "storage") + " --runroot " + (t / "run") +
                       " --storage-driver vfs --events-backend none --cgroup-manager cgroupfs";
  std::string log = t / "podman.log";
  auto run = [&](const std::string& cmd) {
    int rc = sh(cmd, log);
    INFO(cmd << "\n" << read_text(log));
    REQUIRE(rc == 0);
  };
  run("tar -C " + root + " -cf " + (t / "rootfs.tar") + " .");
  run(podman + " import --change 'CMD [\"/bin/sh\"]' " + (t / "rootfs.tar") + " localhost/sbxtest:base");

  sbx::make_dirs(t / "ctx");
  write_text(t / "ctx/Containerfile",
             "FROM localhost/sbxtest:base\n"
             "RUN rm /etc/gone && mkdir /data && echo built > /data/new\n"
             "ENV GREETING=hello\n"
             "WORKDIR /data\n"
             "LABEL org.example=yes\n");
  // chroot isolation runs RUN without an OCI runtime (crun refuses hybrid cgroups here).
  bool built = sh(podman + " build --isolation chroot --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 -t "
                           "localhost/sbxtest:built " + (t / "ctx"),
                  log) == 0;
  if (!built) WARN("podman build failed, checking the one-layer image only (test_oci.cpp covers layers):\n" << read_text(log));
  std::string image = built ? "localhost/sbxtest:built" : "localhost/sbxtest:base";

  run(podman + " save --format docker-archive -o " + (t / "docker.tar") + " " + image);
  run(podman + " save --format oci-archive -o " + (t / "oci.tar") + " " + image);
  run(podman + " save --format oci-dir -o " + (t / "oci-dir") + " " + image);
  auto index = nlohmann::json::parse(read_text(t / "oci-dir/index.json"));
  std::string oci_manifest = index["manifests"][0]["digest"];

  for (const char* format : {"docker.tar", "oci.tar", "oci-dir"}) {
    INFO(format);
    std::string out = t / (std::string("out-") + format);
    sbx::make_dirs(out);
    auto c = sbx::oci::unpack(t / format, out, "sbxtest:" + std::string(built ? "built" : "base"));
    CHECK(read_text(out + "/bin/busybox") == read_text("/bin/busybox"));
    CHECK((::access((out + "/bin/busybox").c_str(), X_OK) == 0));
    CHECK(read_text(out + "/etc/marker") == "from the base layer\n");
    CHECK(c.layers.size() == (built ? 2u : 1u));
    if (std::string(format) != "docker.tar") CHECK(c.manifest_digest == oci_manifest);
    if (built) {
      CHECK(!exists(out + "/etc/gone"));
      CHECK(read_text(out + "/data/new") == "built\n");
      CHECK(std::find(c.env.begin(), c.env.end(), "GREETING=hello") != c.env.end());
      CHECK(c.workdir == "/data");
      CHECK(c.labels["org.example"] == "yes");
    }
    CHECK(c.cmd == std::vector<std::string>{"/bin/sh"});
    // The tree runs: busybox through its applet link, chrooted into it (as root).
    if (::geteuid() != 0) continue;
    int rc = sh("chroot " + out + " /bin/sh -c 'echo hi from the image'", t / "chroot.log");
    CHECK(rc == 0);
    CHECK(read_text(t / "chroot.log") == "hi from the image\n");
  }
}
