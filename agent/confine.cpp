#include "agent/confine.hpp"

#include <linux/capability.h>
#include <linux/securebits.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <initializer_list>

#include "agent/raw.hpp"

namespace sbx::agent {

namespace {
constexpr int kSecureBits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                            SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                            SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

// lock_privileges ran to its end: the bounding set, emptied last, is empty,
// and the securebits are set where the kernel has them.
bool privileges_locked() {
  if (raw::sys(SYS_prctl, PR_CAPBSET_READ, CAP_CHOWN) != 0) return false;
  long bits = raw::sys(SYS_prctl, PR_GET_SECUREBITS);
  return bits < 0 ? bits == -EINVAL : (bits & kSecureBits) == kSecureBits;
}

// Set by the agent alone, once its own lock_privileges succeeded: what it
// gave up cannot be taken back, and every process it starts inherits it. A
// shim that locks for itself must not set it, since it shares this memory
// with an agent that did not.
bool agent_locked = false;
}  // namespace

// Raw system calls (agent/raw.hpp): drop_privileges runs in an exec's shim,
// which shares the agent's memory and so must leave errno alone.
int lock_privileges() {
  // Lock root out of regaining capabilities through exec or setuid games
  // before the power to do so (CAP_SETPCAP) is itself dropped.
  if (long r = raw::sys(SYS_prctl, PR_SET_SECUREBITS, kSecureBits); r != 0) {
    // gVisor (runsc) implements no securebits at all: both calls fail with
    // EINVAL. There the emptied bounding set, capset and no_new_privs below
    // still keep root from regaining capabilities through exec; any other failure stops.
    if (!(r == -EINVAL && raw::sys(SYS_prctl, PR_GET_SECUREBITS) == -EINVAL)) return static_cast<int>(-r);
  }
  if (long r = raw::sys(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); r != 0 && r != -EINVAL)
    return static_cast<int>(-r);
  if (long r = raw::sys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); r != 0) return static_cast<int>(-r);
  // Last, so that an empty bounding set means all of the above is done.
  // Only what the set holds: under gVisor each call is a round trip to the
  // sentry (~85 us here), and runsc starts the agent with 13 of the 41.
  // Unlisted, every number is tried: capabilities run from 0 to the
  // kernel's last without a gap, and one past the last is EINVAL.
  unsigned long bounding = ~0ul;
  raw::status_mask("CapBnd", bounding);
  for (int cap = 0; cap <= 63; ++cap) {
    if (!(bounding >> cap & 1)) continue;
    long r = raw::sys(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0);
    if (r == 0) continue;
    if (r == -EINVAL) break;
    return static_cast<int>(-r);
  }
  return 0;
}

int lock_agent_privileges() {
  int e = lock_privileges();
  agent_locked = e == 0;
  return e;
}

int drop_privileges() {
  if (!agent_locked && !privileges_locked())
    if (int e = lock_privileges()) return e;
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  return static_cast<int>(-raw::sys(SYS_capset, &hdr, data));
}

namespace {
// Refused with EPERM: each is either privileged (and so useless without
// capabilities, but a kernel attack surface all the same) or lets code look
// past the sandbox (kernel keyring, perf counters, the kernel log).
constexpr int kDenied[] = {
    SCMP_SYS(mount),         SCMP_SYS(umount2),         SCMP_SYS(pivot_root),     SCMP_SYS(chroot),
    SCMP_SYS(swapon),        SCMP_SYS(swapoff),         SCMP_SYS(reboot),         SCMP_SYS(init_module),
    SCMP_SYS(finit_module),  SCMP_SYS(delete_module),   SCMP_SYS(kexec_load),     SCMP_SYS(kexec_file_load),
    SCMP_SYS(keyctl),        SCMP_SYS(add_key),         SCMP_SYS(request_key),    SCMP_SYS(bpf),
    SCMP_SYS(perf_event_open), SCMP_SYS(acct),          SCMP_SYS(settimeofday),   SCMP_SYS(clock_settime),
    SCMP_SYS(clock_adjtime), SCMP_SYS(adjtimex),        SCMP_SYS(syslog),         SCMP_SYS(quotactl),
    SCMP_SYS(lookup_dcookie), SCMP_SYS(userfaultfd),    SCMP_SYS(open_by_handle_at), SCMP_SYS(name_to_handle_at),
    SCMP_SYS(iopl),          SCMP_SYS(ioperm),          SCMP_SYS(setns),          SCMP_SYS(unshare),
    SCMP_SYS(mount_setattr), SCMP_SYS(move_mount),      SCMP_SYS(open_tree),      SCMP_SYS(fsopen),
    SCMP_SYS(fsconfig),      SCMP_SYS(fsmount),         SCMP_SYS(fspick),         SCMP_SYS(vhangup),
    SCMP_SYS(uselib),        SCMP_SYS(io_uring_setup),  SCMP_SYS(io_uring_enter), SCMP_SYS(io_uring_register),
    SCMP_SYS(fanotify_init), SCMP_SYS(kcmp),            SCMP_SYS(process_vm_writev), SCMP_SYS(personality),
};
constexpr unsigned long kNamespaceFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                          CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP;
}  // namespace

int install_seccomp_filter() {
  scmp_filter_ctx ctx = ::seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return ENOMEM;
  int rc = 0;
  // The rules must hold for 32-bit and x32 entry points too, or they are a side door.
  for (uint32_t arch : {SCMP_ARCH_X86, SCMP_ARCH_X32}) {
    rc = ::seccomp_arch_add(ctx, arch);
    if (rc == -EEXIST) rc = 0;
    if (rc != 0) break;
  }
  for (int sc : kDenied) {
    if (rc != 0) break;
    rc = ::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), sc, 0);
  }
  // New namespaces are refused through clone's flags (one rule per flag; rules
  // for one syscall are or-ed). clone3 passes its flags in memory a filter
  // cannot read, so it answers ENOSYS and libc falls back to clone.
  for (unsigned long flag = 1; rc == 0 && flag != 0; flag <<= 1) {
    if (!(kNamespaceFlags & flag)) continue;
    // What SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag) says, without its C99 compound literal (clang refuses it in C++).
    const scmp_arg_cmp masked{0, SCMP_CMP_MASKED_EQ, flag, flag};
    rc = ::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, masked);
  }
  if (rc == 0) rc = ::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  if (rc == 0) rc = ::seccomp_load(ctx);
  ::seccomp_release(ctx);
  return rc < 0 ? -rc : rc;
}

}  // namespace sbx::agent
