/* The JSON payloads of the agent protocol (proto.h), over jansson: a
 * parser for each type that checks every field (kind, range, length) and
 * refuses keys it does not know, and a builder for each that checks the
 * same and gives text the parser takes back unchanged.  The host parses
 * what the guest sends (HELLO, READY, EXIT, RESULT, ERROR) and builds the
 * rest; the agent the other way round.
 *
 * Every parser takes a payload the decoder returned (a JSON object of at
 * most CRL_AGENT_MAX_JSON bytes) and fails with CRL_E_INVALID naming the
 * message and its field ("EXEC: argv[3] is not a string").  Every builder
 * returns malloc'd compact JSON in *out (*len bytes, NUL-terminated) or -1
 * with the same kind of error; its output is at most CRL_AGENT_MAX_JSON. */
#ifndef CRL_AGENT_MSG_H
#define CRL_AGENT_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

/* Limits a parser enforces (bytes exclude the NUL). */
#define CRL_AGENT_MAX_NAME 128              /* agent, kernel: printable ASCII */
#define CRL_AGENT_MAX_TEXT 1024             /* error and reason text: UTF-8 without controls */
#define CRL_AGENT_MAX_PATH 4095             /* absolute, no NUL */
#define CRL_AGENT_MAX_DEVICE 63             /* a guest block device: "/dev/vdb" */
#define CRL_AGENT_MAX_HOSTNAME 63           /* one DNS label: [A-Za-z0-9-], not at either end */
#define CRL_AGENT_MAX_LAYERS 32             /* image layers in CONFIG */
#define CRL_AGENT_MAX_ARGS 1024             /* argv entries, and env entries */
#define CRL_AGENT_MAX_ARGS_SIZE (48 * 1024) /* argv and env's bytes together */
#define CRL_AGENT_MIN_SEED 16               /* entropy seed, bytes once decoded */
#define CRL_AGENT_MAX_SEED 512
#define CRL_AGENT_MAX_ETC 2048                 /* each of CONFIG's /etc files */
#define CRL_AGENT_MAX_DISK_MB (1 << 24)        /* 16 TiB */
#define CRL_AGENT_MAX_SIGNAL 64                /* signals are 1..64 */
#define CRL_AGENT_MAX_USAGE ((int64_t)1 << 53) /* usage counters stay exact in JSON */
#define CRL_AGENT_MAX_VOLUMES 8                /* CONFIG's volumes */
#define CRL_AGENT_MACHINE_ID 32                /* hex digits of a machine-id */

/* HELLO {"proto": 2, "agent": "corral-agent 0.1", "kernel": "6.1.0-28-cloud-amd64"} */
struct crl_agent_hello {
    int proto; /* CRL_AGENT_PROTO_VERSION: a parser refuses any other */
    char agent[CRL_AGENT_MAX_NAME + 1];
    char kernel[CRL_AGENT_MAX_NAME + 1];
};

/* CONFIG {"hostname": "sb-1", "realtime_ns": 1764645000000000000, "seed": base64,
 *         "layers": ["/dev/vdb", ...] (top first), "disk": "/dev/vda", "disk_mb": 1024}
 * disk: the writable layer's device; "" (the key left out) for a tmpfs,
 * then of disk_mb MiB (0, left out: the kernel's default, half the RAM).
 * "net": {"address": "10.0.0.2", "prefix": 30, "gateway": "10.0.0.1"}: the
 * network device's IPv4 address and default route (left out: none).
 * "volumes": [{"device": "/dev/vdi", "path": "/data", "read_only": true}]:
 * ext4 file systems to mount at their paths in the new root (left out:
 * none).
 * "init": "/sbin/init": a full system's guest (the vm backend): PID 1
 * builds the root, answers READY and execs this program (systemd), which
 * starts the agent again as a service; it greets the host anew (HELLO)
 * once the system is up.  Left out: the agent stays PID 1 (a microVM).
 * "machine_id": 32 lowercase hex digits, the guest's /etc/machine-id (a
 * full system's; left out: none is written). */
struct crl_agent_volume {
    char device[CRL_AGENT_MAX_DEVICE + 1];
    char path[CRL_AGENT_MAX_PATH + 1];
    bool read_only;
};

struct crl_agent_config {
    char hostname[CRL_AGENT_MAX_HOSTNAME + 1];
    int64_t realtime_ns; /* CLOCK_REALTIME to set, 0..2^63-1 */
    uint8_t seed[CRL_AGENT_MAX_SEED];
    size_t seed_len; /* CRL_AGENT_MIN_SEED..CRL_AGENT_MAX_SEED */
    size_t n_layers; /* 0..CRL_AGENT_MAX_LAYERS */
    char layers[CRL_AGENT_MAX_LAYERS][CRL_AGENT_MAX_DEVICE + 1];
    char disk[CRL_AGENT_MAX_DEVICE + 1];
    uint32_t disk_mb;
    /* "etc": {"hostname", "hosts", "resolv.conf"}: the files the sandbox's
     * /etc gets whatever its image holds (lib/core/etc.h); "" left out. */
    char etc_hostname[CRL_AGENT_MAX_ETC + 1];
    char etc_hosts[CRL_AGENT_MAX_ETC + 1];
    char etc_resolv_conf[CRL_AGENT_MAX_ETC + 1];
    char net_address[16]; /* dotted IPv4, "" for no network */
    char net_gateway[16];
    unsigned net_prefix; /* 1..32 */
    size_t n_volumes;    /* 0..CRL_AGENT_MAX_VOLUMES */
    struct crl_agent_volume volumes[CRL_AGENT_MAX_VOLUMES];
    char init[CRL_AGENT_MAX_PATH + 1]; /* "" for none */
    char machine_id[CRL_AGENT_MACHINE_ID + 1];
};

/* READY {"uptime_ms": n}: the guest's CLOCK_BOOTTIME when it was ready. */
struct crl_agent_ready {
    int64_t uptime_ms;
};

/* EXEC {"argv": [...], "env": ["K=V", ...], "cwd": "/", "uid": 0, "gid": 0,
 *       "stdin": false, "tty": false, "rows": 24, "cols": 80}
 * argv: 1..CRL_AGENT_MAX_ARGS strings; env: 0..CRL_AGENT_MAX_ARGS "K=V"
 * strings with a non-empty K; the two within CRL_AGENT_MAX_ARGS_SIZE
 * bytes.  stdin: STDIN frames will follow (else the command's stdin is
 * /dev/null).  uid and gid: 0..2^32-2. */
struct crl_agent_exec {
    char **argv; /* argc strings and a NULL */
    size_t argc;
    char **env; /* envc strings and a NULL */
    size_t envc;
    char cwd[CRL_AGENT_MAX_PATH + 1];
    uint32_t uid, gid;
    bool stdin_open;
    bool tty;            /* a terminal of the guest's as its stdio (output: STDOUT only) */
    unsigned rows, cols; /* tty: 1..CRL_AGENT_MAX_TTY each (left out: 24x80) */
};
void crl_agent_exec_free(struct crl_agent_exec *m);

#define CRL_AGENT_MAX_TTY 4096

/* STARTED {"pid": n}: the EXEC's command runs (it was executed), as pid n
 * of the guest (2..2^22), before any of its output. */
struct crl_agent_started {
    int pid;
};

/* RESIZE {"rows": r, "cols": c}: the EXEC's terminal's new size. */
struct crl_agent_resize {
    unsigned rows, cols;
};

/* Why an exec ended, as the guest saw it (the host adds its own reasons:
 * a timeout, a client that went away). */
enum crl_agent_exit_reason {
    CRL_AGENT_EXITED = 1,   /* "exited": code is set */
    CRL_AGENT_SIGNALED,     /* "signaled": signal is set */
    CRL_AGENT_OOM_KILLED,   /* "oom_killed": signal is set (SIGKILL) */
    CRL_AGENT_START_FAILED, /* "start_failed": error_no is set (ENOENT: no such command) */
};

/* EXIT {"reason": "exited", "code": 0, "usage": {"utime_us", "stime_us",
 *       "maxrss_kb", "disk_bytes"}}, or "signal": n, or "errno": n, as the reason says:
 * exactly the one field the reason names. */
struct crl_agent_exit {
    enum crl_agent_exit_reason reason;
    int code;                              /* 0..255 */
    int signal;                            /* 1..CRL_AGENT_MAX_SIGNAL */
    int error_no;                          /* 1..4095 */
    int64_t utime_us, stime_us, maxrss_kb; /* 0..CRL_AGENT_MAX_USAGE */
    int64_t disk_bytes; /* the writable layer's use when it ended; -1 (left out): unknown */
};

/* SIGNAL {"signal": n, "scope": "tree"}: to the exec's process and all it
 * started (its session: what it left to run in the background too), or,
 * with "descendants", to all that but the process itself (a session's
 * shell, whose command timed out), "process" to the process alone,
 * "group" to its process group.  scope left out: tree. */
enum crl_agent_signal_scope {
    CRL_AGENT_SIGNAL_TREE,
    CRL_AGENT_SIGNAL_DESCENDANTS,
    CRL_AGENT_SIGNAL_PROCESS,
    CRL_AGENT_SIGNAL_GROUP,
};
struct crl_agent_signal {
    int signal;
    enum crl_agent_signal_scope scope;
};

/* FILE_GET {"path": "/abs", "tar": false}: the guest answers with DATA
 * frames (a file's bytes, or a tar of a directory when tar) and a RESULT.
 * FILE_PUT {"path": "/abs", "mode": 420, "tar": false}: the host sends
 * DATA frames and an empty one; the guest writes them (a tar is unpacked
 * under path) and answers with a RESULT. */
struct crl_agent_file {
    char path[CRL_AGENT_MAX_PATH + 1];
    bool tar;
    int mode; /* FILE_PUT only: 0..07777 */
};

/* RESULT {"ok": true} or {"ok": false, "error": "...", "errno": n};
 * errno is optional (0: none). */
struct crl_agent_result {
    bool ok;
    int error_no;
    char error[CRL_AGENT_MAX_TEXT + 1];
};

/* ERROR {"message": "..."} */
struct crl_agent_error {
    char message[CRL_AGENT_MAX_TEXT + 1];
};

int crl_agent_parse_hello(const void *p, size_t len, struct crl_agent_hello *m,
                          struct crl_err *err);
int crl_agent_parse_config(const void *p, size_t len, struct crl_agent_config *m,
                           struct crl_err *err);
int crl_agent_parse_ready(const void *p, size_t len, struct crl_agent_ready *m,
                          struct crl_err *err);
/* On success *m owns memory: crl_agent_exec_free() it.  On failure *m
 * holds nothing. */
int crl_agent_parse_exec(const void *p, size_t len, struct crl_agent_exec *m, struct crl_err *err);
int crl_agent_parse_exit(const void *p, size_t len, struct crl_agent_exit *m, struct crl_err *err);
int crl_agent_parse_signal(const void *p, size_t len, struct crl_agent_signal *m,
                           struct crl_err *err);
int crl_agent_parse_started(const void *p, size_t len, struct crl_agent_started *m,
                            struct crl_err *err);
int crl_agent_parse_resize(const void *p, size_t len, struct crl_agent_resize *m,
                           struct crl_err *err);
/* type: CRL_AGENT_FILE_GET or CRL_AGENT_FILE_PUT (only a PUT has a mode) */
int crl_agent_parse_file(uint16_t type, const void *p, size_t len, struct crl_agent_file *m,
                         struct crl_err *err);
int crl_agent_parse_result(const void *p, size_t len, struct crl_agent_result *m,
                           struct crl_err *err);
int crl_agent_parse_error(const void *p, size_t len, struct crl_agent_error *m,
                          struct crl_err *err);

int crl_agent_build_hello(const struct crl_agent_hello *m, char **out, size_t *len,
                          struct crl_err *err);
int crl_agent_build_config(const struct crl_agent_config *m, char **out, size_t *len,
                           struct crl_err *err);
int crl_agent_build_ready(const struct crl_agent_ready *m, char **out, size_t *len,
                          struct crl_err *err);
int crl_agent_build_exec(const struct crl_agent_exec *m, char **out, size_t *len,
                         struct crl_err *err);
int crl_agent_build_exit(const struct crl_agent_exit *m, char **out, size_t *len,
                         struct crl_err *err);
int crl_agent_build_signal(const struct crl_agent_signal *m, char **out, size_t *len,
                           struct crl_err *err);
int crl_agent_build_started(const struct crl_agent_started *m, char **out, size_t *len,
                            struct crl_err *err);
int crl_agent_build_resize(const struct crl_agent_resize *m, char **out, size_t *len,
                           struct crl_err *err);
int crl_agent_build_file(uint16_t type, const struct crl_agent_file *m, char **out, size_t *len,
                         struct crl_err *err);
int crl_agent_build_result(const struct crl_agent_result *m, char **out, size_t *len,
                           struct crl_err *err);
int crl_agent_build_error(const struct crl_agent_error *m, char **out, size_t *len,
                          struct crl_err *err);

#endif
