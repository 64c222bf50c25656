/* corral-init: a sandbox's PID 1, once its root is built.
 *
 * The spawner's clone child builds the sandbox (lib/backend/container/init.c)
 * and then executes this, so PID 1 owns a few pages of its own instead of
 * sharing the spawner's memory: an OOM kill inside the sandbox can then
 * never reach the spawner or another sandbox.  It tells the spawner it is
 * up (with the descriptors of the sandbox's root and tmpfs), then reaps
 * orphans forever with every signal blocked.  No libc: static, freestanding,
 * raw syscalls only, so it runs in any image. */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "../../lib/backend/container/spawn_proto.h"
#include "../../lib/util/rawsys.h"

/* Descriptors the clone child leaves us (see init.c). */
enum { SYNC_FD = 3, ROOT_FD = 4, TMPFS_FD = 5 };

__attribute__((noreturn, used)) void crl_init_entry(void);

__attribute__((noreturn, used)) void crl_init_entry(void)
{
    /* Nothing in the sandbox may trace or read us: without CAP_SYS_PTRACE
     * (not in a sandbox's set) a non-dumpable process is out of reach. */
    crl_raw2(SYS_prctl, PR_SET_DUMPABLE, 0);
    struct crl_spawn_reply r;
    for (unsigned i = 0; i < sizeof(r); i++)
        ((char *)&r)[i] = 0;
    r.op = CRL_SPAWN_REPLY;
    union {
        char buf[CMSG_SPACE(sizeof(int) * 2)];
        struct cmsghdr align;
    } u;
    for (unsigned i = 0; i < sizeof(u.buf); i++)
        u.buf[i] = 0;
    struct iovec iov = {.iov_base = &r, .iov_len = sizeof(r)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * 2);
    ((int *)CMSG_DATA(cm))[0] = ROOT_FD;
    ((int *)CMSG_DATA(cm))[1] = TMPFS_FD;
    /* If nobody hears this, the spawner is gone: so are we. */
    if (crl_raw3(SYS_sendmsg, SYNC_FD, &mh, MSG_NOSIGNAL) < 0)
        crl_raw_exit(1);
    crl_raw3(SYS_close_range, 0, ~0u, 0);

    unsigned long all = ~0ul, chld = 1ul << (SIGCHLD - 1);
    crl_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &all, 0, sizeof(all));
    for (;;) {
        int status;
        while (crl_raw4(SYS_wait4, -1, &status, WNOHANG | __WALL, 0) > 0)
            ;
        crl_raw4(SYS_rt_sigtimedwait, &chld, 0, 0, sizeof(chld));
    }
}

#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n xor %rbp, %rbp\n and $-16, %rsp\n call crl_init_entry\n ud2\n");
#elif defined(__aarch64__)
__asm__(".globl _start\n_start:\n mov x29, #0\n mov x30, #0\n bl crl_init_entry\n brk #0\n");
#endif
