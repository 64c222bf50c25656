/* What the `corral bench` commands share: a private corrald to measure
 * (--start-daemon), an image's layer mounted for the peers, and the
 * statistics and the machine's load they report. */
#ifndef CORRAL_BENCH_DAEMON_H
#define CORRAL_BENCH_DAEMON_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/utsname.h>

#include "../../lib/client/client.h"
#include "../../lib/util/err.h"
#include "peer.h"

/* A corrald run for one bench: from `bindir` (default: the directory of
 * this `corral`), with a fresh state directory under
 * /tmp/corral-bench.XXXXXX, its own cgroup parent (corral-bench-<pid>, and
 * -<tag> if set, so it never touches another corrald's), and
 * `--images-from <bindir>/images` when that directory exists. */
struct crl_bench_daemon {
    const char *bindir;
    const char *tag;
    pid_t pid;
    char dir[64];
    char url[128];
    char images_from[PATH_MAX];
};

/* Start it and wait until /healthz answers (30 s at most).  On failure, call
 * crl_bench_daemon_stop() all the same: it removes what was made. */
int crl_bench_daemon_start(struct crl_bench_daemon *d, struct crl_err *err);
/* SIGTERM, wait (SIGKILL after 30 s), remove its directory.  Idempotent. */
void crl_bench_daemon_stop(struct crl_bench_daemon *d);

/* A bench's daemon, if `start`: run it and point *url at it (else *url is
 * NULL: the corrald at $CORRAL_URL).  0, or the exit status to return
 * after saying why (`what` names the bench). */
int crl_bench_begin(bool start, struct crl_bench_daemon *d, const char **url, const char *what);
/* Stop it, if started, with the end of its log when the bench failed. */
void crl_bench_end(bool start, struct crl_bench_daemon *d, int rc, const char *what);
/* The last `cap`-1 bytes of its log, for an error message. */
int crl_bench_daemon_log_tail(const struct crl_bench_daemon *d, char *buf, size_t cap);

/* Mount the one EROFS layer of `image` (its store and layers[0] from
 * GET /v1/images/{image}) read-only, nodev, nosuid at a new directory
 * /tmp/corral-bench-rootfs.XXXXXX, written to out.  *layer_bytes (may be
 * NULL) gets the layer's stored size.  An image of several layers is
 * refused.  Undo with crl_bench_layer_release(). */
int crl_bench_layer_mount(struct crl_client *c, const char *image, char *out, size_t cap,
                          long long *layer_bytes, struct crl_err *err);
void crl_bench_layer_release(const char *dir);

/* Append src's samples to dst's (and its wall time), for a figure
 * measured in several rounds. */
int crl_bench_samples_append(struct crl_bench_samples *dst, const struct crl_bench_samples *src,
                             struct crl_err *err);

/* Nearest-rank percentiles of a phase; rate is operations per second of its
 * wall time. */
struct crl_bench_stats {
    double p50, p99, mean, min, max, rate;
    size_t n;
};
/* Sorts s->ms in place. */
struct crl_bench_stats crl_bench_stats_of(const struct crl_bench_samples *s);
/* {"p50_ms", "p99_ms", "mean_ms", "n"} and "rate_per_s" if with_rate. */
json_t *crl_bench_stats_json(const struct crl_bench_stats *s, bool with_rate);

/* The three load averages of /proc/loadavg, "0.42 0.30 0.25". */
void crl_bench_loadavg(char *buf, size_t cap);

/* When and where a bench ran, for its report: the UTC time
 * (2026-11-30T17:00:40Z), uname(2) and the CPUs online. */
struct crl_bench_machine {
    char date[32];
    struct utsname u;
    long cpus;
};
void crl_bench_machine(struct crl_bench_machine *m);

/* CRL_E_UNAVAILABLE "interrupted" once a signal asked the bench to stop
 * (crl_cli_interrupted); 0 otherwise. */
int crl_bench_check_interrupted(struct crl_err *err);
/* Milliseconds since t0 (crl_now_ns()). */
double crl_bench_ms_since(unsigned long long t0);

#endif
