/* corrald <-> corral-zygote, and corrald <-> a sandbox's keeper, over
 * SOCK_SEQPACKET socketpairs.  Descriptors travel with SCM_RIGHTS.  Both
 * ends are built from one tree, so the structs are the wire format; every
 * end still checks what it receives (sizes, counts, NUL-terminated
 * strings), as a keeper shares its namespaces with the sandbox's code.
 *
 * The zygote (one per runtime, its socket at fd 3) never runs user code:
 * it makes keepers.  A keeper is a fork of the zygote, born in fresh mount,
 * pid, ipc and uts namespaces (its PID 1), that builds the sandbox's root
 * and waits in corrald's pool; a create claims one and gives it the
 * sandbox's identity, and from then on each call is a fork of it that
 * jails itself (jail.h) and runs.
 *
 *   corrald -> zygote   KEEPER               (no fds)
 *   zygote  -> corrald  REPLY {pid}          fds: corrald's end of the keeper's socket, its pidfd
 *   keeper  -> corrald  READY                fds: its root and scratch dirs (O_PATH); or err
 *   corrald -> keeper   CLAIM                fds: netns, the sandbox's cgroup directories (v1: one
 *                                                 a hierarchy; v2: one), corrald's own cgroup's
 *   keeper  -> corrald  REPLY {id 0}         (err and step on failure; it then exits)
 *   corrald -> keeper   FORK                 fds: stdin, stdout, stderr, status pipe, then the
 *                                                 cgroup fds (see struct crl_zyg_fork)
 *   keeper  -> corrald  REPLY {pid}          fds: its pidfd; or err
 *   keeper  -> corrald  EXITED {pid, status} unsolicited, for each call that ends
 *   corrald -> keeper   END                  (no fds; it kills everything of the sandbox,
 *                                                 removes its IPC objects and exits)
 */
#ifndef CRL_FUNCTION_ZYGOTE_PROTO_H
#define CRL_FUNCTION_ZYGOTE_PROTO_H

#include <stdint.h>

#include "../../util/timens.h"

#define CRL_ZYG_FD 3
#define CRL_ZYG_MAX_MSG (2u << 20)
#define CRL_ZYG_MAX_CGROUP_FDS 6
#define CRL_ZYG_FIXED_FDS 4 /* stdin, stdout, stderr, status */
#define CRL_ZYG_MAX_FDS (CRL_ZYG_FIXED_FDS + CRL_ZYG_MAX_CGROUP_FDS)
#define CRL_ZYG_MAX_VOLUMES 8 /* CRL_SPEC_MAX_VOLUMES */
#define CRL_ZYG_VOLUME_PATH 256
/* In a call, until it runs the call (python) or executes it (shell): the
 * status pipe, close-on-exec.  Closed unwritten: started.  Else one line,
 * "ERRNO STEP", says why it could not start. */
#define CRL_ZYG_STATUS_FD 1000

/* Inside a function sandbox: its writable dir (cwd, HOME, TMPDIR, the root
 * of the files API, what a checkpoint holds). */
#define CRL_FN_SCRATCH "/scratch"

enum crl_zyg_op {
    CRL_ZYG_KEEPER = 1, /* make a keeper */
    CRL_ZYG_CLAIM,      /* a keeper becomes a sandbox's */
    CRL_ZYG_FORK,       /* a keeper forks a call */
    CRL_ZYG_END,        /* a keeper ends its sandbox: its processes, its IPC objects, itself */
    CRL_ZYG_REPLY = 100,
    CRL_ZYG_EXITED, /* a call ended (unsolicited) */
    CRL_ZYG_HELLO,  /* the zygote is ready */
    CRL_ZYG_READY,  /* a keeper has built its root */
};

enum crl_zyg_kind {
    CRL_ZYG_ARGV = 0,    /* execute argv (strings: argv..., env...) */
    CRL_ZYG_SOURCE = 1,  /* run source in the runtime (strings: source, env...) */
    CRL_ZYG_RESTORE = 2, /* no user code: apply the checkpoint tar on stdin to the scratch
                            dir (crl_tar_apply), its result's line on stderr, its
                            enum crl_stream_status the exit code (strings: "restore") */
};

/* KEEPER and END: no more than which request it is. */
struct crl_zyg_req {
    uint64_t id;
    uint32_t op;
    uint32_t pad;
};

/* Who a sandbox is: what a keeper needs to become its. */
struct crl_zyg_claim {
    uint32_t op;
    uint32_t uid, gid;
    uint32_t n_cgroup_fds; /* after the netns fd: the sandbox's cgroup */
    uint32_t n_home_fds;   /* after those: corrald's own cgroup, to go back to */
    uint32_t pad;
    struct crl_timens timens; /* its clocks, which start at its claim */
    char hostname[64];        /* NUL-terminated */
    /* after the home fds: volumes' mounts (idmapped to uid, by corrald) to
     * attach at these paths (absolute, normal: the spec checked them) */
    uint32_t n_volumes;
    uint32_t volumes_ro; /* bit i: volume i is read-only */
    char volume_paths[CRL_ZYG_MAX_VOLUMES][CRL_ZYG_VOLUME_PATH];
};

struct crl_zyg_fork {
    uint64_t id;
    uint32_t op;
    uint32_t kind;
    uint32_t n_cgroup_fds;
    uint32_t into_cgroup; /* 1: the cgroup fd is a directory for clone3 */
    uint32_t argc, envc;  /* strings follow the struct, NUL-terminated */
    uint32_t nproc, nofile;
    uint32_t tty; /* 1: stdio is a terminal's slave, to be the controlling terminal */
    uint32_t pad;
};

struct crl_zyg_reply {
    uint64_t id;
    uint32_t op;
    int32_t err;    /* errno, 0: ok */
    int32_t pid;    /* in the keeper's pid namespace for a call, the host's for a keeper */
    int32_t status; /* EXITED: wait status */
    double cpu_s;
    uint64_t maxrss_bytes;
    char msg[200]; /* what failed (a step name), NUL-terminated */
};

#endif
