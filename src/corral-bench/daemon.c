#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../corral/cli.h"

#define DAEMON_READY_S 30.0
#define DAEMON_STOP_S 30.0

/* ---- the private daemon ---- */

int crl_bench_daemon_log_tail(const struct crl_bench_daemon *d, char *buf, size_t cap)
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

void crl_bench_daemon_stop(struct crl_bench_daemon *d)
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

int crl_bench_daemon_start(struct crl_bench_daemon *d, struct crl_err *err)
{
    char self[PATH_MAX], corrald[PATH_MAX + 16], state[128], sock[128], log[128], cgparent[96];
    const char *bindir = d->bindir;
    if (!bindir) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n < 0)
            return crl_err_sys(err, errno, "readlink /proc/self/exe");
        self[n] = 0;
        bindir = dirname(self);
    }
    snprintf(corrald, sizeof(corrald), "%s/corrald", bindir);
    if (access(corrald, X_OK) < 0)
        return crl_err_sys(err, errno, "no corrald in %s", bindir);
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
    snprintf(cgparent, sizeof(cgparent), "corral-bench-%d%s%s", (int)getpid(), d->tag ? "-" : "",
             d->tag ? d->tag : "");
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
            crl_bench_daemon_log_tail(d, tail, sizeof(tail));
            return crl_err_set(err, CRL_E_UNAVAILABLE, "corrald exited at start: %s", tail);
        }
        if (crl_now_ns() > deadline || crl_cli_interrupted)
            return crl_err_set(err, CRL_E_UNAVAILABLE, "corrald was not ready in %.0f s",
                               DAEMON_READY_S);
        usleep(20000);
    }
}

/* ---- an image's layer, for the peers ---- */

int crl_bench_layer_mount(struct crl_client *c, const char *image, char *out, size_t cap,
                          long long *layer_bytes, struct crl_err *err)
{
    json_auto_t *img = NULL;
    char path[320];
    snprintf(path, sizeof(path), "/v1/images/%s", image);
    if (crl_client_request(c, "GET", path, NULL, &img, NULL, err) < 0)
        return crl_err_prefix(err, "image %s", image);
    json_t *layers = json_object_get(img, "layers");
    const char *store = crl_cli_str(img, "store", NULL);
    const char *digest = crl_cli_str(json_array_get(layers, 0), "digest", NULL);
    if (!store || !digest || json_array_size(layers) != 1 || strlen(digest) != 71)
        return crl_err_set(err, CRL_E_INTERNAL, "the %s image is not one layer in a store", image);
    if (layer_bytes)
        *layer_bytes = json_integer_value(json_object_get(json_array_get(layers, 0), "size"));
    char layer[PATH_MAX];
    snprintf(layer, sizeof(layer), "%s/layers/%s.erofs", store, digest + 7);
    snprintf(out, cap, "/tmp/corral-bench-rootfs.XXXXXX");
    if (!mkdtemp(out))
        return crl_err_sys(err, errno, "mkdtemp");
    /* Kernels from 6.12 mount an EROFS file directly, with no loop device. */
    if (mount(layer, out, "erofs", MS_RDONLY | MS_NODEV | MS_NOSUID, NULL) < 0) {
        int e = errno;
        rmdir(out);
        out[0] = 0;
        return crl_err_sys(err, e, "mount %s", layer);
    }
    return 0;
}

void crl_bench_layer_release(const char *dir)
{
    if (dir[0] && umount2(dir, MNT_DETACH) == 0)
        rmdir(dir);
}

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct crl_bench_stats crl_bench_stats_of(const struct crl_bench_samples *s)
{
    struct crl_bench_stats st = {0};
    if (s->n == 0)
        return st;
    qsort(s->ms, s->n, sizeof(double), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->ms[i];
    size_t i50 = (size_t)ceil(0.50 * (double)s->n), i99 = (size_t)ceil(0.99 * (double)s->n);
    st.p50 = s->ms[i50 ? i50 - 1 : 0];
    st.p99 = s->ms[i99 ? i99 - 1 : 0];
    st.min = s->ms[0];
    st.max = s->ms[s->n - 1];
    st.mean = sum / (double)s->n;
    st.n = s->n;
    st.rate = s->wall_s > 0 ? (double)s->n / s->wall_s : 0;
    return st;
}

json_t *crl_bench_stats_json(const struct crl_bench_stats *s, bool with_rate)
{
    json_t *j = json_pack("{s:f, s:f, s:f, s:I}", "p50_ms", s->p50, "p99_ms", s->p99, "mean_ms",
                          s->mean, "n", (json_int_t)s->n);
    if (with_rate)
        json_object_set_new(j, "rate_per_s", json_real(s->rate));
    return j;
}

void crl_bench_loadavg(char *buf, size_t cap)
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

int crl_bench_begin(bool start, struct crl_bench_daemon *d, const char **url, const char *what)
{
    struct crl_err err = CRL_ERR_INIT;
    *url = NULL;
    if (!start)
        return 0;
    if (crl_bench_daemon_start(d, &err) < 0) {
        crl_bench_daemon_stop(d);
        crl_err_prefix(&err, "%s: --start-daemon", what);
        return crl_cli_fail(&err);
    }
    *url = d->url;
    return 0;
}

void crl_bench_end(bool start, struct crl_bench_daemon *d, int rc, const char *what)
{
    if (!start)
        return;
    char tail[300];
    if (rc < 0 && crl_bench_daemon_log_tail(d, tail, sizeof(tail)) == 0 && tail[0])
        fprintf(stderr, "corral: %s: corrald's log ends with:\n%s\n", what, tail);
    crl_bench_daemon_stop(d);
}

int crl_bench_samples_append(struct crl_bench_samples *dst, const struct crl_bench_samples *src,
                             struct crl_err *err)
{
    double *ms = realloc(dst->ms, (dst->n + src->n + 1) * sizeof(double));
    if (!ms)
        return crl_err_sys(err, ENOMEM, "samples");
    memcpy(ms + dst->n, src->ms, src->n * sizeof(double));
    dst->ms = ms;
    dst->n += src->n;
    dst->wall_s += src->wall_s;
    return 0;
}

void crl_bench_machine(struct crl_bench_machine *m)
{
    time_t now = time(NULL);
    strftime(m->date, sizeof(m->date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    uname(&m->u);
    m->cpus = sysconf(_SC_NPROCESSORS_ONLN);
}

int crl_bench_check_interrupted(struct crl_err *err)
{
    if (crl_cli_interrupted)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "interrupted");
    return 0;
}

double crl_bench_ms_since(unsigned long long t0)
{
    return (double)(crl_now_ns() - t0) / 1e6;
}
