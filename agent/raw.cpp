#include "agent/raw.hpp"

// The vfork child returns on its parent's stack, so the return address is
// kept in a register across the call, as libc's own vfork does; unlike it,
// a failure is returned, not stored in errno.
__asm__(
    ".section .text.sbx_raw_vfork,\"ax\",@progbits\n"
    ".globl sbx_raw_vfork\n"
    ".type sbx_raw_vfork,@function\n"
    "sbx_raw_vfork:\n"
    "  popq %rdi\n"
    "  movl $58, %eax\n"  // SYS_vfork
    "  syscall\n"
    "  pushq %rdi\n"
    "  ret\n"
    ".size sbx_raw_vfork, .-sbx_raw_vfork\n"
    ".section .text.sbx_raw_sigreturn,\"ax\",@progbits\n"
    ".globl sbx_raw_sigreturn\n"
    ".type sbx_raw_sigreturn,@function\n"
    "sbx_raw_sigreturn:\n"
    "  movl $15, %eax\n"  // SYS_rt_sigreturn
    "  syscall\n"
    ".size sbx_raw_sigreturn, .-sbx_raw_sigreturn\n"
    ".text\n");
