/* corral: the command-line client.  One .c per command (cmd_*.c), each a
 * thin front end over lib/client; what they share lives here: flag
 * parsing, the spec flags, error reporting and streamed command output.
 *
 * Exit codes: 0 success; 1 an error (printed once, as "corral: <message>");
 * 2 a usage error; run and exec exit with the command's status instead
 * (128+n for signal n, 124 for a timeout). */
#ifndef CORRAL_CLI_H
#define CORRAL_CLI_H

#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>

#include "../../lib/client/client.h"
#include "../../lib/util/err.h"

#define CRL_EXIT_FAIL 1
#define CRL_EXIT_USAGE 2

/* Command entry points: argv[0] is the command's name. */
int crl_cmd_run(int argc, char **argv);
int crl_cmd_create(int argc, char **argv);
int crl_cmd_ls(int argc, char **argv);
int crl_cmd_inspect(int argc, char **argv);
int crl_cmd_exec(int argc, char **argv);
int crl_cmd_sh(int argc, char **argv);
int crl_cmd_ps(int argc, char **argv);
int crl_cmd_attach(int argc, char **argv);
int crl_cmd_kill(int argc, char **argv);
int crl_cmd_cp(int argc, char **argv);
int crl_cmd_rm(int argc, char **argv);
int crl_cmd_host(int argc, char **argv);
int crl_cmd_hosts(int argc, char **argv);
int crl_cmd_images(int argc, char **argv); /* corral image ls */
/* A command of commands (corral image, traj, volume): argv[1] names one
 * of subs[], which runs with argv[0] "GROUP SUB" (so its usage messages
 * point at its --help); `names` lists them for the usage message. */
struct crl_cli_sub {
    const char *name;
    int (*fn)(int argc, char **argv);
};
int crl_cli_dispatch(int argc, char **argv, const char *group, const struct crl_cli_sub *subs,
                     size_t n, const char *names, const char *help);

int crl_cmd_image(int argc, char **argv);
int crl_cmd_volume(int argc, char **argv);
/* What `corral image build-debian` makes: an ordinary image, or (build-vm)
 * one with systemd and the guest kernel's modules for the vm backend. */
enum crl_debian_flavour { CRL_DEBIAN_CONTAINER, CRL_DEBIAN_VM };
int crl_cmd_image_build_debian(int argc, char **argv, enum crl_debian_flavour flavour);
int crl_cmd_bench(int argc, char **argv); /* runs corral-bench */
int crl_cmd_call(int argc, char **argv);
int crl_cmd_functions(int argc, char **argv);
int crl_cmd_traj(int argc, char **argv);
int crl_cmd_traj_replay(int argc, char **argv); /* corral traj replay */
int crl_cmd_snapshot(int argc, char **argv);
int crl_cmd_fork(int argc, char **argv);
int crl_cmd_pause(int argc, char **argv);
int crl_cmd_resume(int argc, char **argv);
int crl_cmd_timeout(int argc, char **argv);
int crl_cmd_net(int argc, char **argv);
int crl_cmd_forward(int argc, char **argv);
int crl_cmd_services(int argc, char **argv);
int crl_cmd_setup(int argc, char **argv); /* runs scripts/microvm-guest.sh */

/* ---- reporting ---- */

/* Print "corral: <msg>" to stderr; returns CRL_EXIT_FAIL. */
int crl_cli_fail(const struct crl_err *err);
int crl_cli_failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "corral CMD: <msg>" and a pointer to --help; returns CRL_EXIT_USAGE. */
int crl_cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for what getopt_long() returned ('?' or ':'). */
int crl_cli_bad_option(const char *cmd, char **argv, int c);
/* Print `text` (a command's help) to stdout; returns 0. */
int crl_cli_help(const char *text);

/* Open the client from CORRAL_URL and CORRAL_TOKEN, printing any error.
 * Returns 0 or CRL_EXIT_FAIL. */
int crl_cli_connect(struct crl_client **c);

/* A read-only command: parse --json and --help and `nargs` (0 or 1)
 * positional arguments, naming the missing one `what` (*arg gets it).
 * Returns -1 to go on, or the status to exit with. */
int crl_cli_read_flags(int argc, char **argv, const char *help, int nargs, const char *what,
                       bool *as_json, const char **arg);
/* GET path and print the answer: as JSON, or through show(). */
int crl_cli_show(const char *path, bool as_json, void (*show)(json_t *answer));
/* The options of a command that takes none but --help: -1 once they are
 * read (optind at its first argument), else the status to exit with. */
int crl_cli_no_flags(int argc, char **argv, const char *help);
/* DELETE <prefix>/<name> for each name, printing each once it is done; a
 * failure is reported and the others still go.  0, or the status of the
 * last failure. */
int crl_cli_delete_each(const char *prefix, char *const *names, int n);

/* Pretty-print JSON to stdout, with a newline. */
void crl_cli_print_json(json_t *j);
/* Human forms: "3.2 MiB"; the age of an RFC 3339 time ("42s", "5m", "3h",
 * "2d"; "-" if it does not parse). */
const char *crl_cli_bytes(double bytes, char *buf, size_t cap);
const char *crl_cli_age(const char *rfc3339, char *buf, size_t cap);
/* A string field of an object, or `dflt` when missing or not a string. */
const char *crl_cli_str(json_t *obj, const char *key, const char *dflt);

/* ---- trajectories ---- */

struct crl_buf;
/* What a step record asked, in a few words for a table row (a command line,
 * "ss-1: cmd", a path...), appended to b; control characters as spaces. */
void crl_cli_traj_what(json_t *step, struct crl_buf *b);
/* The one trajectory id a command takes (argv[optind]): -1 with *id set,
 * else the status to exit with (missing, extra, or not an id). */
int crl_cli_traj_one_id(int argc, char **argv, const char **id);
/* A step's checkpoint as its first 12 hex digits, or "-" when it has none. */
const char *crl_cli_traj_ckpt(json_t *step, char *buf, size_t cap);

/* ---- flags ---- */

/* Strict numbers: the whole string, in range; else a usage error message
 * naming the flag in *err (CRL_E_INVALID). */
int crl_cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out,
                      struct crl_err *err);
int crl_cli_parse_double(const char *flag, const char *s, double lo, double hi, double *out,
                         struct crl_err *err);
/* "K=V" into obj[K] = V; K may not be empty. */
int crl_cli_parse_kv(const char *flag, const char *s, json_t *obj, struct crl_err *err);

/* The spec flags (--backend --image --cpus --memory-mb --pids --disk-mb
 * --ttl --idle-ttl --on-ttl --label --env --cwd --trajectory), as getopt_long() entries whose
 * values are CRL_CLI_SPEC_FIRST and up; CRL_CLI_SPEC_OPTIONS goes inside a
 * command's `struct option` table. */
enum {
    CRL_CLI_SPEC_FIRST = 0x100,
    CRL_CLI_OPT_BACKEND = CRL_CLI_SPEC_FIRST,
    CRL_CLI_OPT_IMAGE,
    CRL_CLI_OPT_CPUS,
    CRL_CLI_OPT_MEMORY,
    CRL_CLI_OPT_PIDS,
    CRL_CLI_OPT_DISK,
    CRL_CLI_OPT_TTL,
    CRL_CLI_OPT_IDLE_TTL,
    CRL_CLI_OPT_ON_TTL,
    CRL_CLI_OPT_LABEL,
    CRL_CLI_OPT_ENV,
    CRL_CLI_OPT_CWD,
    CRL_CLI_OPT_TRAJECTORY,
    CRL_CLI_OPT_VOLUME,
    CRL_CLI_SPEC_LAST = CRL_CLI_OPT_VOLUME,
    CRL_CLI_OPT_OTHER /* first value free for a command's own long options */
};
/* clang-format off */
#define CRL_CLI_SPEC_OPTIONS                                                                       \
    {"backend", required_argument, 0, CRL_CLI_OPT_BACKEND},                                        \
    {"image", required_argument, 0, CRL_CLI_OPT_IMAGE},                                            \
    {"cpus", required_argument, 0, CRL_CLI_OPT_CPUS},                                              \
    {"memory-mb", required_argument, 0, CRL_CLI_OPT_MEMORY},                                       \
    {"pids", required_argument, 0, CRL_CLI_OPT_PIDS},                                              \
    {"disk-mb", required_argument, 0, CRL_CLI_OPT_DISK},                                           \
    {"ttl", required_argument, 0, CRL_CLI_OPT_TTL},                                                \
    {"idle-ttl", required_argument, 0, CRL_CLI_OPT_IDLE_TTL},                                      \
    {"on-ttl", required_argument, 0, CRL_CLI_OPT_ON_TTL},                                          \
    {"label", required_argument, 0, CRL_CLI_OPT_LABEL},                                            \
    {"env", required_argument, 0, CRL_CLI_OPT_ENV},                                                \
    {"cwd", required_argument, 0, CRL_CLI_OPT_CWD},                                                \
    {"trajectory", required_argument, 0, CRL_CLI_OPT_TRAJECTORY},                                  \
    {"volume", required_argument, 0, CRL_CLI_OPT_VOLUME}
/* clang-format on */
#define CRL_CLI_SPEC_HELP                                                                \
    "spec options:\n"                                                                    \
    "  --backend NAME      isolation backend (default container)\n"                      \
    "  --image NAME        image (default busybox; see 'corral images')\n"               \
    "  --cpus X            CPU quota, 0.01-1024 (default 1)\n"                           \
    "  --memory-mb N       memory limit in MiB, writable layer included (default 512)\n" \
    "  --pids N            process limit (default 512)\n"                                \
    "  --disk-mb N         writable layer size in MiB (default 1024)\n"                  \
    "  --ttl S             destroy S seconds after creation; 0: never (default 3600)\n"  \
    "  --idle-ttl S        destroy after S seconds without use; 0: never (default 0)\n"  \
    "  --on-ttl WHAT       what its ttl or idle ttl does: destroy (default) or pause\n"  \
    "                      (the next call resumes it)\n"                                 \
    "  --label K=V         a label (repeatable)\n"                                       \
    "  --env K=V           environment of every process (repeatable)\n"                  \
    "  --cwd DIR           default working directory\n"                                  \
    "  --trajectory ID     record every call as a step of trajectory ID; an existing\n"  \
    "                      one is fast-forwarded through first (docs/api.md)\n"          \
    "  --volume NAME:PATH[:ro]  mount volume NAME at PATH, read-only with :ro\n"         \
    "                      (repeatable; see 'corral volume')\n"

/* Apply spec flag `opt` (CRL_CLI_SPEC_FIRST..LAST) with `arg` to `spec`. */
int crl_cli_spec_flag(json_t *spec, int opt, const char *arg, struct crl_err *err);
/* Validate the spec with the same parser corrald uses (crl_spec_from_json);
 * messages name the flag. */
int crl_cli_spec_check(json_t *spec, struct crl_err *err);

/* ---- running commands ---- */

/* Options of a command run by exec or run. */
struct crl_cli_exec {
    double timeout_s; /* < 0: corrald's default */
    json_t *env;      /* object, may be NULL */
    const char *cwd;
    const char *user;
    bool forward_stdin;
};

/* Build the exec request for argv[0..argc) (as argv, not a shell string;
 * with argc 0, no cmd: the image's entrypoint and cmd),
 * with max_output_bytes at the API's maximum.  With forward_stdin, stdin is
 * read to its end; a request that would then be larger than corrald's
 * default body limit (16 MiB, as JSON) is refused with CRL_E_TOO_LARGE. */
int crl_cli_exec_request(const struct crl_cli_exec *o, int argc, char **argv, json_t **out,
                         struct crl_err *err);
/* Report a failed exec request (a body too large for corrald names -i). */
int crl_cli_exec_fail(const struct crl_cli_exec *o, struct crl_err *err);
/* Output callback writing to our stdout/stderr as bytes arrive.  A signal
 * (crl_cli_interrupted set) stops a blocked write; a reader that is gone
 * (EPIPE) sets crl_cli_interrupted to SIGPIPE.  Both fail the transfer. */
int crl_cli_write_output(void *ctx, enum crl_client_fd which, const char *data, size_t len,
                         struct crl_err *err);
/* The shell-style exit status of a result; notes on stderr what the status
 * alone does not say (timeout, OOM, truncated output).  Truncated output
 * makes a status of 0 into CRL_EXIT_FAIL. */
int crl_cli_result_status(json_t *result, struct crl_err *err);

/* ---- terminals (terminal.c) ---- */

/* Our window's size as a request's "tty" object (24x80 without one). */
json_t *crl_cli_tty_size(void);
/* Attach to process `pid` of sandbox `id` (its output from byte `offset`,
 * NULL: all that is kept) until it ends or we are signalled; `raw`: our
 * terminal goes raw and its size follows ours.  Returns its exit status
 * (0 when we detached from a process that runs on). */
int crl_cli_attach(struct crl_client *cl, const char *id, int pid, bool raw, const char *offset);
/* Start `req` (an exec request, borrowed and changed) as a background
 * process with a terminal of our size and our TERM, and attach to it. */
int crl_cli_run_terminal(struct crl_client *cl, const char *id, json_t *req);

/* SIGINT/SIGTERM/SIGHUP set crl_cli_interrupted (no SA_RESTART) instead of
 * killing us, SIGPIPE is ignored, and `c` (may be NULL) stops its request
 * when crl_cli_interrupted is set.  A command exits 128+crl_cli_interrupted
 * once it has cleaned up. */
extern volatile sig_atomic_t crl_cli_interrupted;
void crl_cli_catch_signals(struct crl_client *c);

#endif
