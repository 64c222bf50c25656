/* The peers `corral bench` measures Corral against, on the same machine in
 * the same run: `crun run` of the same busybox rootfs (create, run
 * /bin/true, delete), and a bare posix_spawn+wait of the same /bin/true on
 * the host, the floor under any exec. */
#ifndef CORRAL_BENCH_PEER_H
#define CORRAL_BENCH_PEER_H

#include <stddef.h>

#include "../../lib/util/err.h"

/* Latencies of one measured phase, in milliseconds, and its wall time. */
struct crl_bench_samples {
    double *ms;
    size_t n;
    double wall_s;
};

void crl_bench_samples_free(struct crl_bench_samples *s);

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

#endif
