/* The peers the benches measure Corral against, on the same machine in
 * the same run: `crun run` of the same busybox rootfs (create, run
 * /bin/true, delete), a bare posix_spawn+wait of the same /bin/true on the
 * host, the floor under any exec; fork and exec of a program with its
 * output read from a pipe, and a bare fork+exit+wait; and what they need:
 * an image's layer mounted, a command run to its end. */
#ifndef CORRAL_BENCH_PEER_H
#define CORRAL_BENCH_PEER_H

#include <stddef.h>
#include <sys/types.h>

#include "../../lib/client/client.h"
#include "../../lib/util/err.h"
#include "samples.h"

/* Run argv (argv[0] searched in PATH) to its end, stdout to /dev/null; a
 * failure names the command and the first line it wrote to stderr. */
int crl_bench_run_cmd(char *const argv[], struct crl_err *err);

/* Mount the one EROFS layer of `image` (its store and layers[0] from
 * GET /v1/images/{image}) read-only, nodev, nosuid at a new directory
 * /tmp/corral-bench-rootfs.XXXXXX, written to out.  *layer_bytes (may be
 * NULL) gets the layer's stored size.  An image of several layers is
 * refused.  Undo with crl_bench_layer_release(). */
int crl_bench_layer_mount(struct crl_client *c, const char *image, char *out, size_t cap,
                          long long *layer_bytes, struct crl_err *err);
void crl_bench_layer_release(const char *dir);

/* A temporary OCI bundle for `rootfs`: `crun spec`'s config with
 * process.args ["/bin/true"], no terminal, a writable root, and crun's
 * default namespaces.  *dir (malloc'd) is the bundle; remove it with
 * crl_bench_crun_bundle_remove(). */
int crl_bench_crun_bundle(const char *rootfs, char **dir, struct crl_err *err);
void crl_bench_crun_bundle_remove(char *dir);

/* `crun run` of the bundle to completion, `warm` times unmeasured, then
 * `n` times at concurrency 1 into *c1 and `n` times shared by two
 * processes into *c2.  crun 1.8 refuses this host's hybrid cgroup layout,
 * so the runs happen in a child with a private mount namespace in which
 * /sys/fs/cgroup/unified is unmounted. */
int crl_bench_crun(const char *bundle, size_t warm, size_t n, struct crl_bench_samples *c1,
                   struct crl_bench_samples *c2, struct crl_err *err);

/* posix_spawn + waitpid of `path` (argv[0] "true"), `warm` times, then `n`
 * measured times. */
int crl_bench_spawn(const char *path, size_t warm, size_t n, struct crl_bench_samples *out,
                    struct crl_err *err);

/* fork + execv(path, argv) with stdout to a pipe read to its end (stdin
 * /dev/null, stderr inherited) + waitpid: *status gets the wait status and
 * *out (malloc'd, NUL-terminated, may be NULL) what it printed. */
int crl_bench_capture(const char *path, char *const argv[], int *status, char **out,
                      struct crl_err *err);

/* crl_bench_capture() of path/argv timed from the fork to the reaped exit,
 * `warm` times, then `n` measured times; every run must exit 0 and, if
 * `expect` is not NULL, print exactly it. */
int crl_bench_fork_exec(const char *path, char *const argv[], const char *expect, size_t warm,
                        size_t n, struct crl_bench_samples *out, struct crl_err *err);

/* The cheapest process there is: fork of this process, _exit(0) in the
 * child, waitpid, `warm` then `n` measured times. */
int crl_bench_fork_exit(size_t warm, size_t n, struct crl_bench_samples *out, struct crl_err *err);

/* VmRSS of /proc/<pid>/status in kB (pid 0: this process), -1 if unknown. */
long crl_bench_rss_kb(pid_t pid);

#endif
