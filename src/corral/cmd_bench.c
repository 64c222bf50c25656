/* corral bench: sandbox cycles (create, exec /bin/true, destroy) and exec
 * round trips through the API, against `crun run` of a copy of the same rootfs and a
 * bare posix_spawn of the same binary, measured on this machine in one run.
 * It prints figures and ratios and never judges an absolute time. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "bench_peer.h"
#include "cli.h"

#define DEFAULT_ITERATIONS 200
#define MAX_CONC 2
#define DAEMON_READY_S 30.0
#define DAEMON_STOP_S 30.0

static const char help[] =
    "usage: corral bench [OPTIONS]\n"
    "\n"
    "Measure, on this machine and in one run:\n"
    "  1. sandbox cycles through the API: create (64 MiB), exec /bin/true,\n"
    "     destroy, one at a time and two in parallel: p50, p99, cycles/s;\n"
    "  2. exec round trips of /bin/true in one live sandbox: p50, p99;\n"
    "  3. the peers: `crun run` of a writable copy of the busybox rootfs, one at a time and\n"
    "     two in parallel, and posix_spawn+wait of the same /bin/true;\n"
    "  4. the ratios: our cycles/s over crun's at concurrency 2, and exec p50\n"
    "     over posix_spawn p50.\n"
    "Prints a table and a JSON line.  Uses corrald at $CORRAL_URL unless\n"
    "--start-daemon; crun runs need root (as corrald does).\n"
    "\n"
    "  --start-daemon      run a private corrald (next to this corral, fresh state\n"
    "                      in a temporary directory) for the bench, stop it after\n"
    "  --iterations N      measured operations per figure (default 200)\n"
    "  --json              print only the JSON line\n";

struct stats {
    double p50, p99, mean, rate;
    size_t n;
};

/* ---- the private daemon ---- */

struct daemon {
    pid_t pid;
    char dir[64];
    char url[128];
    char images_from[PATH_MAX];
};

static int daemon_log_tail(const struct daemon *d, char *buf, size_t cap)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/corrald.log", d->dir);
    cleanup_close int fd = crl_openat(AT_FDCWD, path, O_RDONLY, 0);
    buf[0] = 0;
    if (fd < 0)
        return -1;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)cap - 1 ? end - (off_t)cap + 1 : 0;
    ssize_t n = pread(fd, buf, cap - 1, from);
    buf[n > 0 ? n : 0] = 0;
    return 0;
}

static void daemon_stop(struct daemon *d)
{
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        int status;
        unsigned long long deadline = crl_now_ns() + (unsigned long long)(DAEMON_STOP_S * 1e9);
        while (waitpid(d->pid, &status, WNOHANG) == 0) {
            if (crl_now_ns() > deadline) {
                fprintf(stderr, "corral: bench: corrald did not stop in %.0f s; killing it\n",
                        DAEMON_STOP_S);
                kill(d->pid, SIGKILL);
                waitpid(d->pid, &status, 0);
                break;
            }
            usleep(20000);
        }
        d->pid = 0;
    }
    if (d->dir[0] && crl_rm_rf_at(AT_FDCWD, d->dir) < 0)
        fprintf(stderr, "corral: bench: could not remove %s: %s\n", d->dir, strerror(errno));
    d->dir[0] = 0;
}

static int daemon_start(struct daemon *d, struct crl_err *err)
{
    char self[PATH_MAX], corrald[PATH_MAX + 16], state[128], sock[128], log[128], cgparent[64];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0)
        return crl_err_sys(err, errno, "readlink /proc/self/exe");
    self[n] = 0;
    const char *bindir = dirname(self);
    snprintf(corrald, sizeof(corrald), "%s/corrald", bindir);
    if (access(corrald, X_OK) < 0)
        return crl_err_sys(err, errno, "no corrald next to corral: %s", corrald);
    snprintf(d->images_from, sizeof(d->images_from), "%s/images", bindir);
    struct stat st;
    if (stat(d->images_from, &st) < 0 || !S_ISDIR(st.st_mode))
        d->images_from[0] = 0;
    snprintf(d->dir, sizeof(d->dir), "/tmp/corral-bench.XXXXXX");
    if (!mkdtemp(d->dir)) {
        d->dir[0] = 0;
        return crl_err_sys(err, errno, "creating a temporary directory");
    }
    /* mkdtemp makes it 0700; sandbox ids must traverse it to their layers. */
    if (chmod(d->dir, 0711) < 0)
        return crl_err_sys(err, errno, "chmod %s", d->dir);
    snprintf(state, sizeof(state), "%s/state", d->dir);
    snprintf(sock, sizeof(sock), "%s/corrald.sock", d->dir);
    snprintf(log, sizeof(log), "%s/corrald.log", d->dir);
    /* Its own cgroup parent, so it never touches another corrald's. */
    snprintf(cgparent, sizeof(cgparent), "corral-bench-%d", (int)getpid());
    snprintf(d->url, sizeof(d->url), "unix://%s", sock);
    char *argv[16];
    int a = 0;
    argv[a++] = corrald;
    argv[a++] = "--state";
    argv[a++] = state;
    argv[a++] = "--socket";
    argv[a++] = sock;
    argv[a++] = "--cgroup-parent";
    argv[a++] = cgparent;
    argv[a++] = "--log-level";
    argv[a++] = "warn";
    if (d->images_from[0]) {
        argv[a++] = "--images-from";
        argv[a++] = d->images_from;
    }
    argv[a] = NULL;
    int logfd = crl_openat(AT_FDCWD, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (logfd < 0)
        return crl_err_sys(err, errno, "%s", log);
    fflush(NULL);
    d->pid = fork();
    if (d->pid < 0) {
        close(logfd);
        return crl_err_sys(err, errno, "fork");
    }
    if (d->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the bench */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(logfd, STDOUT_FILENO);
        dup2(logfd, STDERR_FILENO);
        execv(corrald, argv);
        _exit(127);
    }
    close(logfd);

    cleanup_client struct crl_client *c = NULL;
    if (crl_client_open(d->url, "", &c, err) < 0)
        return -1;
    unsigned long long deadline = crl_now_ns() + (unsigned long long)(DAEMON_READY_S * 1e9);
    for (;;) {
        struct crl_err e = CRL_ERR_INIT;
        int status;
        if (crl_client_request(c, "GET", "/healthz", NULL, NULL, NULL, &e) == 0)
            return 0;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            char tail[300];
            d->pid = 0;
            daemon_log_tail(d, tail, sizeof(tail));
            return crl_err_set(err, CRL_E_UNAVAILABLE, "corrald exited at start: %s", tail);
        }
        if (crl_now_ns() > deadline || crl_cli_interrupted)
            return crl_err_set(err, CRL_E_UNAVAILABLE, "corrald was not ready in %.0f s",
                               DAEMON_READY_S);
        usleep(20000);
    }
}

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentiles; rate is operations per second of wall time. */
static struct stats stats_of(const struct crl_bench_samples *s)
{
    struct stats st = {0};
    if (s->n == 0)
        return st;
    qsort(s->ms, s->n, sizeof(double), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->ms[i];
    size_t i50 = (size_t)ceil(0.50 * (double)s->n), i99 = (size_t)ceil(0.99 * (double)s->n);
    st.p50 = s->ms[i50 ? i50 - 1 : 0];
    st.p99 = s->ms[i99 ? i99 - 1 : 0];
    st.mean = sum / (double)s->n;
    st.n = s->n;
    st.rate = s->wall_s > 0 ? (double)s->n / s->wall_s : 0;
    return st;
}

/* ---- corral cycles, one client per thread ---- */

struct worker {
    const char *url;
    size_t n;
    json_t *spec;
    double *cycle, *create, *exec, *destroy; /* n each */
    int rc;
    struct crl_err err;
};

static json_t *true_request(void)
{
    return json_pack("{s:[s]}", "cmd", "/bin/true");
}

static int check_result(json_t *res, struct crl_err *err)
{
    if (crl_client_exit_status(res) != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "/bin/true in a sandbox ended with status %d (%s)",
                           crl_client_exit_status(res), crl_cli_str(res, "reason", "?"));
    return 0;
}

static int one_cycle(struct crl_client *c, struct worker *w, size_t i, json_t *req)
{
    json_auto_t *sb = NULL;
    json_auto_t *res = NULL;
    unsigned long long t0 = crl_now_ns();
    if (crl_client_create(c, w->spec, &sb, &w->err) < 0)
        return crl_err_prefix(&w->err, "create");
    unsigned long long t1 = crl_now_ns();
    const char *id = crl_cli_str(sb, "id", "");
    int rc = crl_client_exec(c, id, req, &res, &w->err);
    if (rc < 0)
        crl_err_prefix(&w->err, "exec in %s", id);
    else
        rc = check_result(res, &w->err);
    unsigned long long t2 = crl_now_ns();
    struct crl_err derr = CRL_ERR_INIT;
    if (crl_client_destroy(c, id, NULL, &derr) < 0 && rc == 0) {
        w->err = derr;
        return crl_err_prefix(&w->err, "destroy %s", id);
    }
    unsigned long long t3 = crl_now_ns();
    if (rc < 0)
        return -1;
    if (w->cycle) {
        w->cycle[i] = (double)(t3 - t0) / 1e6;
        w->create[i] = (double)(t1 - t0) / 1e6;
        w->exec[i] = (double)(t2 - t1) / 1e6;
        w->destroy[i] = (double)(t3 - t2) / 1e6;
    }
    return 0;
}

static void *cycle_worker(void *p)
{
    struct worker *w = p;
    cleanup_client struct crl_client *c = NULL;
    json_auto_t *req = true_request();
    w->rc = crl_client_open(w->url, NULL, &c, &w->err);
    for (size_t i = 0; i < w->n && w->rc == 0; i++) {
        if (crl_cli_interrupted)
            w->rc = crl_err_set(&w->err, CRL_E_UNAVAILABLE, "interrupted");
        else
            w->rc = one_cycle(c, w, i, req);
    }
    return NULL;
}

struct cycles {
    struct crl_bench_samples cycle, create, exec, destroy;
};

static void cycles_free(struct cycles *cy)
{
    crl_bench_samples_free(&cy->cycle);
    crl_bench_samples_free(&cy->create);
    crl_bench_samples_free(&cy->exec);
    crl_bench_samples_free(&cy->destroy);
}

/* `n` cycles shared by `conc` threads; with `cy` NULL, a warm-up. */
static int run_cycles(const char *url, json_t *spec, int conc, size_t n, struct cycles *cy,
                      struct crl_err *err)
{
    struct worker w[MAX_CONC];
    pthread_t t[MAX_CONC];
    if (cy) {
        struct crl_bench_samples *all[] = {&cy->cycle, &cy->create, &cy->exec, &cy->destroy};
        for (size_t k = 0; k < CRL_ARRAY_SIZE(all); k++) {
            all[k]->ms = calloc(n ? n : 1, sizeof(double));
            all[k]->n = n;
            if (!all[k]->ms)
                return crl_err_sys(err, ENOMEM, "allocating samples");
        }
    }
    size_t off = 0;
    for (int i = 0; i < conc; i++) {
        size_t share = n / (size_t)conc + ((size_t)i < n % (size_t)conc ? 1 : 0);
        w[i] = (struct worker){.url = url, .n = share, .spec = spec};
        if (cy) {
            w[i].cycle = cy->cycle.ms + off;
            w[i].create = cy->create.ms + off;
            w[i].exec = cy->exec.ms + off;
            w[i].destroy = cy->destroy.ms + off;
        }
        off += share;
    }
    unsigned long long t0 = crl_now_ns();
    int started = 0, rc = 0;
    for (; started < conc; started++) {
        int e = pthread_create(&t[started], NULL, cycle_worker, &w[started]);
        if (e != 0) {
            rc = crl_err_sys(err, e, "pthread_create");
            break;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    double wall = (double)(crl_now_ns() - t0) / 1e9;
    for (int i = 0; i < started && rc == 0; i++)
        if (w[i].rc < 0) {
            *err = w[i].err;
            rc = -1;
        }
    if (cy)
        cy->cycle.wall_s = cy->create.wall_s = cy->exec.wall_s = cy->destroy.wall_s = wall;
    return rc;
}

/* Exec round trips in one live sandbox. */
static int run_execs(const char *url, json_t *spec, size_t warm, size_t n,
                     struct crl_bench_samples *out, struct crl_err *err)
{
    cleanup_client struct crl_client *c = NULL;
    json_auto_t *sb = NULL;
    json_auto_t *req = true_request();
    out->ms = calloc(n ? n : 1, sizeof(double));
    out->n = 0;
    if (!out->ms)
        return crl_err_sys(err, ENOMEM, "allocating samples");
    if (crl_client_open(url, NULL, &c, err) < 0 || crl_client_create(c, spec, &sb, err) < 0)
        return -1;
    const char *id = crl_cli_str(sb, "id", "");
    int rc = 0;
    unsigned long long start = crl_now_ns();
    for (size_t i = 0; i < warm + n && rc == 0; i++) {
        json_auto_t *res = NULL;
        if (i == warm)
            start = crl_now_ns();
        unsigned long long t0 = crl_now_ns();
        rc = crl_client_exec(c, id, req, &res, err);
        unsigned long long t1 = crl_now_ns();
        if (rc == 0)
            rc = check_result(res, err);
        if (rc == 0 && crl_cli_interrupted)
            rc = crl_err_set(err, CRL_E_UNAVAILABLE, "interrupted");
        if (rc == 0 && i >= warm)
            out->ms[out->n++] = (double)(t1 - t0) / 1e6;
    }
    out->wall_s = (double)(crl_now_ns() - start) / 1e9;
    struct crl_err derr = CRL_ERR_INIT;
    if (crl_client_destroy(c, id, NULL, &derr) < 0 && rc == 0) {
        *err = derr;
        rc = -1;
    }
    return rc;
}

/* ---- the report ---- */

static json_t *stats_json(const struct stats *s, bool with_rate)
{
    json_t *j = json_pack("{s:f, s:f, s:f, s:I}", "p50_ms", s->p50, "p99_ms", s->p99, "mean_ms",
                          s->mean, "n", (json_int_t)s->n);
    if (with_rate)
        json_object_set_new(j, "rate_per_s", json_real(s->rate));
    return j;
}

static void row(const char *what, const struct stats *s, bool with_rate)
{
    if (with_rate)
        printf("  %-40s %8.2f %8.2f %10.1f\n", what, s->p50, s->p99, s->rate);
    else
        printf("  %-40s %8.2f %8.2f %10s\n", what, s->p50, s->p99, "");
}

static void loadavg(char *buf, size_t cap)
{
    buf[0] = 0;
    if (crl_read_file_at(AT_FDCWD, "/proc/loadavg", buf, cap) > 0) {
        char *p = buf;
        for (int k = 0; k < 3 && p; k++)
            p = strchr(p + 1, ' ');
        if (p)
            *p = 0;
    }
}

/* The busybox rootfs corrald's sandboxes use: its state dir's, else the
 * --images-from copy. */
static int find_rootfs(struct crl_client *c, const struct daemon *d, char *out, size_t cap,
                       char *host_id, size_t hcap, struct crl_err *err)
{
    json_auto_t *h = NULL;
    if (crl_client_request(c, "GET", "/v1/host", NULL, &h, NULL, err) < 0)
        return -1;
    snprintf(host_id, hcap, "%s", crl_cli_str(h, "host_id", "?"));
    const char *state = crl_cli_str(h, "state_dir", NULL);
    struct stat st;
    if (state) {
        snprintf(out, cap, "%s/images/busybox/rootfs", state);
        if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
            return 0;
    }
    if (d && d->images_from[0]) {
        snprintf(out, cap, "%s/busybox/rootfs", d->images_from);
        if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
            return 0;
    }
    return crl_err_set(err, CRL_E_NOT_FOUND, "cannot find the busybox rootfs (under %s/images)",
                       state ? state : "corrald's state dir");
}

struct results {
    struct cycles c1, c2;
    struct crl_bench_samples exec, crun1, crun2, spawn;
    bool crun_ok;
    char crun_err[480];
};

static void results_free(struct results *r)
{
    cycles_free(&r->c1);
    cycles_free(&r->c2);
    crl_bench_samples_free(&r->exec);
    crl_bench_samples_free(&r->crun1);
    crl_bench_samples_free(&r->crun2);
    crl_bench_samples_free(&r->spawn);
}

static int measure(const char *url, const struct daemon *d, size_t n, bool quiet, struct results *r,
                   char *host_id, size_t hcap, struct crl_err *err)
{
    size_t warm = n / 10 > 5 ? n / 10 : 5;
    char rootfs[PATH_MAX];
    json_auto_t *spec = json_pack("{s:{s:i}, s:{s:s}}", "resources", "memory_mb", 64, "labels",
                                  "corral-bench", "1");
    {
        cleanup_client struct crl_client *c = NULL;
        if (crl_client_open(url, NULL, &c, err) < 0 ||
            find_rootfs(c, d, rootfs, sizeof(rootfs), host_id, hcap, err) < 0)
            return -1;
    }
#define STEP(...)                                          \
    do {                                                   \
        if (!quiet) {                                      \
            fprintf(stderr, "corral bench: " __VA_ARGS__); \
            fputc('\n', stderr);                           \
        }                                                  \
    } while (0)
    STEP("warming up (%zu cycles)", warm);
    if (run_cycles(url, spec, 1, warm, NULL, err) < 0)
        return -1;
    STEP("corral cycles, 1 at a time (%zu)", n);
    if (run_cycles(url, spec, 1, n, &r->c1, err) < 0)
        return -1;
    STEP("corral cycles, 2 in parallel (%zu)", n);
    if (run_cycles(url, spec, 2, n, &r->c2, err) < 0)
        return -1;
    STEP("corral exec round trips (%zu)", n);
    if (run_execs(url, spec, warm, n, &r->exec, err) < 0)
        return -1;
    STEP("crun run, 1 at a time and 2 in parallel (%zu each)", n);
    char *bundle = NULL;
    struct crl_err cerr = CRL_ERR_INIT;
    r->crun_ok = crl_bench_crun_bundle(rootfs, &bundle, &cerr) == 0 &&
                 crl_bench_crun(bundle, warm, n, &r->crun1, &r->crun2, &cerr) == 0;
    crl_bench_crun_bundle_remove(bundle);
    if (!r->crun_ok) {
        snprintf(r->crun_err, sizeof(r->crun_err), "%s", cerr.msg);
        fprintf(stderr, "corral: bench: the crun peer failed: %s\n", cerr.msg);
    }
    if (crl_cli_interrupted)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "interrupted");
    STEP("posix_spawn of %s/bin/true (%zu)", rootfs, n);
    char truebin[PATH_MAX + 16];
    snprintf(truebin, sizeof(truebin), "%s/bin/true", rootfs);
    return crl_bench_spawn(truebin, warm, n, &r->spawn, err);
#undef STEP
}

static void report(const struct results *r, size_t n, const char *host_id, const char *load0,
                   const char *load1, bool json_only)
{
    struct stats c1 = stats_of(&r->c1.cycle), c2 = stats_of(&r->c2.cycle);
    struct stats c1c = stats_of(&r->c1.create), c1e = stats_of(&r->c1.exec),
                 c1d = stats_of(&r->c1.destroy);
    struct stats ex = stats_of(&r->exec), sp = stats_of(&r->spawn);
    struct stats k1 = {0}, k2 = {0};
    if (r->crun_ok) {
        k1 = stats_of(&r->crun1);
        k2 = stats_of(&r->crun2);
    }
    double ratio = r->crun_ok && k2.rate > 0 ? c2.rate / k2.rate : NAN;
    double exec_x = sp.p50 > 0 ? ex.p50 / sp.p50 : NAN;
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    struct utsname u;
    uname(&u);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    if (!json_only) {
        printf("corral bench  %s  host %s (%s %s, %ld CPUs)  load %s -> %s  %zu iterations\n\n",
               date, host_id, u.sysname, u.release, cpus, load0, load1, n);
        printf("  %-40s %8s %8s %10s\n", "", "p50 ms", "p99 ms", "per s");
        row("corral cycle, 1 at a time", &c1, true);
        row("  create", &c1c, false);
        row("  exec /bin/true", &c1e, false);
        row("  destroy", &c1d, false);
        row("corral cycle, 2 in parallel", &c2, true);
        row("corral exec /bin/true (live sandbox)", &ex, true);
        if (r->crun_ok) {
            row("crun run /bin/true, 1 at a time", &k1, true);
            row("crun run /bin/true, 2 in parallel", &k2, true);
        } else {
            printf("  %-40s %s\n", "crun run", "failed (see above)");
        }
        row("host posix_spawn /bin/true", &sp, true);
        printf("\n");
        if (r->crun_ok)
            printf("  cycles/s at concurrency 2: corral %.1f / crun %.1f = %.2fx (target >= 3x)\n",
                   c2.rate, k2.rate, ratio);
        printf("  exec p50: corral %.2f ms vs posix_spawn %.2f ms = %.1fx (+%.2f ms through "
               "the API)\n\n",
               ex.p50, sp.p50, exec_x, ex.p50 - sp.p50);
    }
    json_auto_t *j =
        json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:I}", "bench", "corral", "date", date,
                  "host_id", host_id, "kernel", u.release, "cpus", (json_int_t)cpus, "load_before",
                  load0, "load_after", load1, "iterations", (json_int_t)n);
    json_object_set_new(j, "corral_cycle_c1", stats_json(&c1, true));
    json_object_set_new(j, "corral_create_c1", stats_json(&c1c, false));
    json_object_set_new(j, "corral_exec_in_cycle_c1", stats_json(&c1e, false));
    json_object_set_new(j, "corral_destroy_c1", stats_json(&c1d, false));
    json_object_set_new(j, "corral_cycle_c2", stats_json(&c2, true));
    json_object_set_new(j, "corral_exec", stats_json(&ex, true));
    json_object_set_new(j, "crun_cycle_c1", r->crun_ok ? stats_json(&k1, true) : json_null());
    json_object_set_new(j, "crun_cycle_c2", r->crun_ok ? stats_json(&k2, true) : json_null());
    if (!r->crun_ok)
        json_object_set_new(j, "crun_error", json_string(r->crun_err));
    json_object_set_new(j, "host_spawn", stats_json(&sp, true));
    json_object_set_new(j, "ratio_cycles_c2_vs_crun",
                        isnan(ratio) ? json_null() : json_real(ratio));
    json_object_set_new(j, "ratio_exec_p50_vs_spawn",
                        isnan(exec_x) ? json_null() : json_real(exec_x));
    char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (line)
        printf("%s\n", line);
    free(line);
}

int crl_cmd_bench(int argc, char **argv)
{
    enum { OPT_START = CRL_CLI_OPT_OTHER, OPT_ITER, OPT_JSON };
    static const struct option opts[] = {{"start-daemon", no_argument, 0, OPT_START},
                                         {"iterations", required_argument, 0, OPT_ITER},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    bool start = false, json_only = false;
    long long iterations = DEFAULT_ITERATIONS;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_START: start = true; break;
        case OPT_ITER:
            if (crl_cli_parse_int("--iterations", optarg, 10, 1000000, &iterations, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            break;
        case OPT_JSON: json_only = true; break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    if (geteuid() != 0)
        return crl_cli_failf("bench: needs root, for crun (and for corrald with --start-daemon)");

    crl_cli_catch_signals(NULL);
    struct daemon d = {0};
    const char *url = NULL;
    if (start) {
        if (daemon_start(&d, &err) < 0) {
            daemon_stop(&d);
            crl_err_prefix(&err, "bench: --start-daemon");
            return crl_cli_fail(&err);
        }
        url = d.url;
    }
    char load0[64], load1[64], host_id[32];
    struct results r = {0};
    loadavg(load0, sizeof(load0));
    int rc = measure(url, start ? &d : NULL, (size_t)iterations, json_only, &r, host_id,
                     sizeof(host_id), &err);
    loadavg(load1, sizeof(load1));
    if (start) {
        char tail[300];
        if (rc < 0 && daemon_log_tail(&d, tail, sizeof(tail)) == 0 && tail[0])
            fprintf(stderr, "corral: bench: corrald's log ends with:\n%s\n", tail);
        daemon_stop(&d);
    }
    if (rc == 0)
        report(&r, (size_t)iterations, host_id, load0, load1, json_only);
    results_free(&r);
    if (rc < 0) {
        crl_err_prefix(&err, "bench");
        return crl_cli_fail(&err);
    }
    return 0;
}
