#include "rawclone.h"

/* The child pops fn and arg from its new stack: nothing of the parent's
 * stack frame is used after the system call. */
#if defined(__x86_64__)
/* clone(flags=rdi, newsp=rsi, parent_tid=rdx, child_tid=r10, tls=r8) */
__asm__(".text\n"
        ".globl crl_raw_clone\n"
        ".type crl_raw_clone,@function\n"
        "crl_raw_clone:\n"
        "  and $-16, %rsi\n"
        "  sub $16, %rsi\n"
        "  mov %rcx, 0(%rsi)\n" /* fn */
        "  mov %r8, 8(%rsi)\n"  /* arg */
        "  xor %r10d, %r10d\n"
        "  xor %r8d, %r8d\n"
        "  mov $56, %eax\n" /* SYS_clone */
        "  syscall\n"
        "  test %rax, %rax\n"
        "  jnz 1f\n"
        "  xor %ebp, %ebp\n"
        "  pop %rax\n"
        "  pop %rdi\n"
        "  call *%rax\n"
        "  mov %eax, %edi\n"
        "  mov $60, %eax\n" /* SYS_exit */
        "  syscall\n"
        "  hlt\n"
        "1: ret\n"
        ".size crl_raw_clone, .-crl_raw_clone\n");
#elif defined(__aarch64__)
/* clone(flags=x0, newsp=x1, parent_tid=x2, tls=x3, child_tid=x4) */
__asm__(".text\n"
        ".globl crl_raw_clone\n"
        ".type crl_raw_clone,%function\n"
        "crl_raw_clone:\n"
        "  and x1, x1, #-16\n"
        "  stp x3, x4, [x1, #-16]!\n" /* fn, arg */
        "  mov x3, #0\n"
        "  mov x4, #0\n"
        "  mov x8, #220\n" /* SYS_clone */
        "  svc #0\n"
        "  cbz x0, 1f\n"
        "  ret\n"
        "1: ldp x1, x0, [sp], #16\n"
        "  blr x1\n"
        "  mov x8, #93\n" /* SYS_exit */
        "  svc #0\n"
        ".size crl_raw_clone, .-crl_raw_clone\n");
#else
#error "crl_raw_clone supports x86_64 and aarch64"
#endif
