/* corral-agent's internals (crl_ga_: the guest agent; crl_agent_ is
 * lib/agent's protocol): the guest's PID 1 in a microVM (init.c) and
 * the server of the agent protocol (serve.c, lib/agent/proto.h) that runs
 * the host's execs and file transfers. */
#ifndef CRL_GA_AGENT_H
#define CRL_GA_AGENT_H

#include <stdbool.h>

#include "../../lib/agent/msg.h"
#include "../../lib/util/err.h"

#define CRL_GA_VERSION "corral-agent 0.1"

struct crl_ga_opts {
    int fd;           /* the byte stream to the host */
    bool pid1;        /* the guest's init: reconnects, reaps, powers off */
    bool service;     /* a full system's agent (systemd's service): reconnects, powers off */
    const char *root; /* files are resolved inside it ("/" in a guest) */
};

/* Whether the agent outlives its host's connection (a restore gives the
 * guest a new host, which it greets): as PID 1 and as a system's service. */
static inline bool crl_ga_reconnects(const struct crl_ga_opts *o)
{
    return o->pid1 || o->service;
}

/* Serve the host on opts->fd until it hangs up (an ordinary process: end
 * of file or BYE) or forever (PID 1: a host that goes away may come back,
 * after a restore).  Returns 0 on an orderly end, -1 with *err when the
 * host broke the protocol or a syscall the loop needs failed. */
int crl_ga_serve(const struct crl_ga_opts *opts, struct crl_err *err);

/* PID 1's boot: the kernel's file systems, the modules, the console.
 * Returns the port to the host (after crl_guest_open_port), -1 with *err. */
int crl_ga_init_boot(struct crl_err *err);

/* PID 1 applies a CONFIG: hostname, clock, entropy, and (the first time
 * only) the root: the layers read-only under a writable overlay, then the
 * guest's root moved onto it.  -1 with *err naming what failed. */
int crl_ga_init_config(const struct crl_agent_config *c, bool first, struct crl_err *err);

/* A full system, CONFIG's init: PID 1 hands the guest to its init once
 * READY is out.  Returns only on failure. */
int crl_ga_exec_init(const char *init, struct crl_err *err);

/* The agent as a full system's service (corral-agent --systemd): the port,
 * the writable layer PID 1 left at CRL_GA_SYSTEM_RW, the system up.
 * Returns the port, -1 with *err. */
int crl_ga_service_boot(struct crl_err *err);
/* Its CONFIG (a clone's): identity, /etc files, volumes, network. */
int crl_ga_service_config(const struct crl_agent_config *c, struct crl_err *err);

/* Where PID 1 leaves a full system's writable layer and /etc layer (bound
 * under the new root's /run, a tmpfs it mounts), and the service's unit
 * and binary (in the /etc layer, above the image). */
#define CRL_GA_SYSTEM_RUN "/run/corral"
#define CRL_GA_SYSTEM_RW CRL_GA_SYSTEM_RUN "/rw"
#define CRL_GA_SYSTEM_ETC CRL_GA_SYSTEM_RUN "/etc-layer"
#define CRL_GA_SERVICE_BIN "/usr/lib/corral/corral-agent"
#define CRL_GA_SERVICE_UNIT "corral-agent.service"

/* The cgroup directory execs get leaves in (set before serving). */
extern char crl_ga_leaves[256];

/* Builtins (builtin.c): an EXEC's argv[0] the agent runs itself. */
#define CRL_GA_BUILTIN_PREFIX "corral:"
#define CRL_GA_BUILTIN_TAR_OUT "corral:tar-out"
#define CRL_GA_BUILTIN_TAR_IN "corral:tar-in"
#define CRL_GA_BUILTIN_FILE_IN "corral:file-in"
#define CRL_GA_BUILTIN_FILE_OUT "corral:file-out"
#define CRL_GA_BUILTIN_LAYER_OUT "corral:layer-out"
#define CRL_GA_BUILTIN_LAYER_IN "corral:layer-in"
#define CRL_GA_BUILTIN_FS "corral:fs" /* REQUEST: a filesystem operation (lib/helper/fsop.h) */
#define CRL_GA_BUILTIN_WATCH "corral:watch" /* PATH 0|1: its events, recursive with 1 */
#define CRL_GA_BUILTIN_SYNC "corral:sync"   /* every file system written back (a destroy's) */
/* corral:layer-out finds the writable layer (crl_ga_rw_fd) here. */
#define CRL_GA_LAYER_FD 3
/* In an EXEC's child, in its ids and cwd: the exit status. */
int crl_ga_builtin(char *const argv[]);
/* corral:layer-out and corral:layer-in (layer.c), as root. */
int crl_ga_layer(char *const argv[]);

/* The writable layer (PID 1's, once configured; -1 else): its use goes
 * out with every EXIT, for the sandbox's disk usage. */
extern int crl_ga_rw_fd;

/* PID 1 cannot exit (the kernel would panic): sync and power off. */
void crl_ga_power_off(void) __attribute__((noreturn));

#endif
