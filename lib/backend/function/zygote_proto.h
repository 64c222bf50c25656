/* corrald <-> corral-zygote, over a SOCK_SEQPACKET socketpair (the zygote's
 * end is its fd 3).  One zygote per runtime; it never runs user code itself:
 * each FORK makes a child that jails itself (jail.h) and then runs the
 * call.  Descriptors travel with SCM_RIGHTS.  Both ends are built from one
 * tree, so the structs are the wire format. */
#ifndef CRL_FUNCTION_ZYGOTE_PROTO_H
#define CRL_FUNCTION_ZYGOTE_PROTO_H

#include <stdint.h>

#define CRL_ZYG_FD 3
#define CRL_ZYG_MAX_MSG (2u << 20)
#define CRL_ZYG_MAX_CGROUP_FDS 6
#define CRL_ZYG_FIXED_FDS 5 /* stdin, stdout, stderr, scratch dir, status */
#define CRL_ZYG_MAX_FDS (CRL_ZYG_FIXED_FDS + CRL_ZYG_MAX_CGROUP_FDS)
/* In a call, until it runs the call (python) or executes it (shell): the
 * status pipe, close-on-exec.  Closed unwritten: started.  Else one line,
 * "ERRNO STEP", says why it could not start. */
#define CRL_ZYG_STATUS_FD 1000

enum crl_zyg_op {
    /* fds: stdin, stdout, stderr, the scratch dir (O_PATH), the status
     * pipe's write end, then the cgroup.procs files the child writes itself
     * into (v1), or the one cgroup directory it is cloned into (v2:
     * CLONE_INTO_CGROUP) */
    CRL_ZYG_FORK = 1,
    CRL_ZYG_REPLY = 100, /* to a FORK: pid, and its pidfd; or err */
    CRL_ZYG_EXITED,      /* a child ended (unsolicited) */
    CRL_ZYG_HELLO,       /* the zygote is ready */
};

enum crl_zyg_kind {
    CRL_ZYG_ARGV = 0,    /* execute argv (strings: argv..., env...) */
    CRL_ZYG_SOURCE = 1,  /* run source in the runtime (strings: source, env...) */
    CRL_ZYG_RESTORE = 2, /* no user code: apply the checkpoint tar on stdin to the scratch
                            dir (crl_tar_apply), its result's line on stderr, its
                            enum crl_stream_status the exit code (strings: "restore") */
};

struct crl_zyg_fork {
    uint64_t id;
    uint32_t op;
    uint32_t kind;
    uint32_t uid, gid;
    uint32_t n_cgroup_fds;
    uint32_t into_cgroup; /* 1: the cgroup fd is a directory for clone3 */
    uint32_t argc, envc;  /* strings follow the struct, NUL-terminated */
    uint32_t nproc, nofile;
    uint64_t fsize_bytes;
    char scratch[256]; /* its path, for rules and HOME */
};

struct crl_zyg_reply {
    uint64_t id;
    uint32_t op;
    int32_t err; /* errno, 0: ok */
    int32_t pid;
    int32_t status; /* EXITED: wait status */
    double cpu_s;
    uint64_t maxrss_bytes;
    char msg[200];
};

#endif
