// raw::status_mask (agent/raw.hpp): the masks the agent reads at its start
// to make only the system calls it needs, checked against the kernel's own
// answers on this host.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/prctl.h>

#include "agent/raw.hpp"

using sbx::agent::raw::status_mask;

TEST_CASE("CapBnd is the bounding set prctl reports", "[raw]") {
  unsigned long bounding = 0;
  REQUIRE(status_mask("CapBnd", bounding));
  for (int cap = 0; cap < 64; ++cap) {
    int r = ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (r < 0) {  // past the kernel's last capability
      CHECK((bounding >> cap) == 0);
      break;
    }
    CHECK(((bounding >> cap) & 1) == static_cast<unsigned long>(r));
  }
}

TEST_CASE("SigIgn lists exactly the ignored signals", "[raw]") {
  struct sigaction old {};
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  REQUIRE(::sigaction(SIGUSR2, &ign, &old) == 0);
  unsigned long ignored = 0;
  bool found = status_mask("SigIgn", ignored);
  ::sigaction(SIGUSR2, &old, nullptr);
  REQUIRE(found);
  CHECK(((ignored >> (SIGUSR2 - 1)) & 1) == 1);
  unsigned long after = 0;
  REQUIRE(status_mask("SigIgn", after));
  CHECK(((after >> (SIGUSR2 - 1)) & 1) == (old.sa_handler == SIG_IGN ? 1u : 0u));
}

TEST_CASE("a field the kernel does not report is not found", "[raw]") {
  unsigned long mask = 7;
  CHECK_FALSE(status_mask("NoSuchField", mask));
  CHECK_FALSE(status_mask("Cap", mask));  // a prefix of CapInh etc. is not the field
  CHECK(mask == 7);
}
