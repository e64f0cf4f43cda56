// `sbx serve --require-kvm`: the refusal built from the micro-VM start checks,
// and what detect_kvm() says of this host's /dev/kvm.
#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "backends/microvm/driver.hpp"
#include "backends/microvm/host.hpp"
#include "core/fsutil.hpp"
#include "tests/unit/helpers.hpp"

using sbx_test::contains;
using sbx_test::error_of;

TEST_CASE("require_checks: passes when every check is ok, else names each failure and the first remedy") {
  using sbx::Probe;
  std::vector<Probe> ok = {{true, "running as root", "uid 0", ""}, {true, "KVM", "/dev/kvm works", ""}};
  sbx::microvm::require_checks(ok);  // does not throw

  std::vector<Probe> bad = {{true, "running as root", "uid 0", ""},
                            {false, "KVM", "/dev/kvm is PVM (kvm_pvm)", "run on a host with hardware KVM"},
                            {false, "guest image", "missing", "build it"}};
  auto e = error_of([&] { sbx::microvm::require_checks(bad); });
  CHECK(e.code() == sbx::Errc::unavailable);
  CHECK(contains(e.message(), "--require-kvm"));
  CHECK(contains(e.message(), "KVM: /dev/kvm is PVM (kvm_pvm); guest image: missing"));
  CHECK_FALSE(contains(e.message(), "running as root"));
  CHECK(e.hint() == "run on a host with hardware KVM");
}

TEST_CASE("detect_kvm: a PVM /dev/kvm is refused with what to do, whatever SBX_MICROVM_ACCEL says") {
  ::setenv("SBX_MICROVM_ACCEL", "kvm", 1);
  auto dev = sbx::microvm::detect_kvm();
  CHECK(sbx::microvm::choose_accel().kvm);  // the override still rules the driver's choice
  ::unsetenv("SBX_MICROVM_ACCEL");
  if (!sbx::path_exists("/sys/module/kvm_pvm") || !sbx::path_exists("/dev/kvm")) {
    CHECK(dev.kvm == sbx::microvm::choose_accel().kvm);
    return;
  }
  CHECK_FALSE(dev.kvm);
  CHECK(contains(dev.why, "PVM"));
  CHECK(contains(dev.fix, "hardware KVM"));
}
