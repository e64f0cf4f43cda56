#include "backends/common/cgroup.hpp"

#include <catch2/catch.hpp>

using sbx::cgroup::attach_mode;

// /proc/mounts of this project's CI host: v1 controllers and a v2 mount (hybrid).
static const char* kHybrid =
    "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
    "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
    "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
    "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";

TEST_CASE("cgroup attach: a hybrid host without favordynmods names its v2 mount to remount") {
  auto m = attach_mode(kHybrid);
  CHECK_FALSE(m.favor_dynmods);
  CHECK(m.mount == "/sys/fs/cgroup/unified");
  CHECK(m.options == "rw,relatime");  // kept in the remount: cgroup2 drops what it is not given
}

TEST_CASE("cgroup attach: favordynmods on any cgroup root counts, as an option and not a substring") {
  auto m = attach_mode(std::string(kHybrid) + "cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids,favordynmods 0 0\n");
  CHECK(m.favor_dynmods);
  CHECK(m.mount == "/sys/fs/cgroup/pids");
  // Not a cgroup mount, or not the whole option: no.
  CHECK_FALSE(attach_mode("none /mnt/x tmpfs rw,favordynmods 0 0\n").favor_dynmods);
  CHECK_FALSE(attach_mode("cgroup2 /sys/fs/cgroup cgroup2 rw,nofavordynmodsx 0 0\n").favor_dynmods);
}

TEST_CASE("cgroup attach: a v1-only host names its first hierarchy, a host without cgroups none") {
  CHECK(attach_mode("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n").mount == "/sys/fs/cgroup/cpu");
  CHECK(attach_mode("proc /proc proc rw 0 0\n").mount.empty());
  CHECK(attach_mode("").mount.empty());
}

TEST_CASE("cpu cap: a 20 ms period, longer where the quota would be under the kernel's 1 ms") {
  using sbx::cgroup::cpu_period_us;
  CHECK(cpu_period_us(1) == 20'000);
  CHECK(cpu_period_us(2) == 20'000);
  CHECK(cpu_period_us(0.05) == 20'000);  // quota 1 ms, the kernel's least
  CHECK(cpu_period_us(0.01) == 100'000);
  CHECK(cpu_period_us(0.0001) == 1'000'000);  // the kernel's longest (sbx takes no cap under 0.01)
}
