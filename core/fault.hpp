#pragma once
// Fault injection, for tests only: named points at each real step of create,
// exec, cp and rm, where a test makes this process die as a SIGKILL (a crash,
// an OOM kill, a host losing power to the manager) would.
//
//   SBX_TEST_CRASH_AT=NAME[:N]  SIGKILL this process the Nth time (default 1st) it reaches NAME
//   SBX_TEST_FAULT_TRACE=FILE   append the name of every point reached to FILE (how tests list them)
//   SBX_TEST_STALL_AT=NAME:MS   sleep MS milliseconds each time this process reaches NAME (a slow
//                               step, for tests of whoever waits for it)
//
// None is read unless set; unset, a point costs one cached check. Not a
// user interface: docs/security.md ("Faults") says what the tests do with it.

namespace sbx::fault {

/// A step has just been taken (its effect is on the host): die here if asked to.
void point(const char* name);

}  // namespace sbx::fault
