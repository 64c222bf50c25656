/* A private corrald for one bench (--start-daemon), and a second one from
 * an earlier build for functions' --baseline. */
#ifndef CORRAL_BENCH_DAEMON_H
#define CORRAL_BENCH_DAEMON_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "../../lib/util/err.h"

/* A corrald run for one bench: from `bindir` (default: the directory of
 * this program, where corral and corrald are), with a fresh state directory
 * under /tmp/corral-bench.XXXXXX, its own cgroup parent (corral-bench-<pid>,
 * and -<tag> if set, so it never touches another corrald's), and
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
/* The last `cap`-1 bytes of its log, for an error message. */
int crl_bench_daemon_log_tail(const struct crl_bench_daemon *d, char *buf, size_t cap);

#endif
