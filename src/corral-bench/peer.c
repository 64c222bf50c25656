#include "peer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"

extern char **environ;

void crl_bench_samples_free(struct crl_bench_samples *s)
{
    free(s->ms);
    s->ms = NULL;
    s->n = 0;
}

int crl_bench_samples_alloc(struct crl_bench_samples *s, size_t n, struct crl_err *err)
{
    s->ms = calloc(n ? n : 1, sizeof(double));
    s->n = 0;
    s->wall_s = 0;
    if (!s->ms)
        return crl_err_sys(err, ENOMEM, "allocating samples");
    return 0;
}

/* Spawn argv with stdout to /dev/null and stderr to `errfd`, wait, and
 * return its wait status (or -1 with errno). */
static int spawn_wait(const char *file, char *const argv[], int errfd, bool search)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    if (errfd >= 0)
        posix_spawn_file_actions_adddup2(&fa, errfd, STDERR_FILENO);
    pid_t pid;
    int rc = search ? posix_spawnp(&pid, file, &fa, NULL, argv, environ)
                    : posix_spawn(&pid, file, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return status;
}

/* The first line of what a failed run wrote to `fd`. */
static void first_line(int fd, char *buf, size_t cap)
{
    buf[0] = 0;
    ssize_t n = pread(fd, buf, cap - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    buf[strcspn(buf, "\n")] = 0;
}

/* ---- the crun bundle ---- */

int crl_bench_crun_bundle(const char *rootfs, char **dir, struct crl_err *err)
{
    cleanup_free char *d = strdup("/tmp/corral-bench-crun.XXXXXX");
    if (!d || !mkdtemp(d))
        return crl_err_sys(err, errno, "creating a bundle directory");
    char config[4096];
    snprintf(config, sizeof(config), "%s/config.json", d);
    char *const argv[] = {"crun", "spec", "--bundle", d, NULL};
    FILE *errf = tmpfile();
    int status = spawn_wait("crun", argv, errf ? fileno(errf) : -1, true);
    if (status != 0) {
        char msg[256] = "";
        if (errf)
            first_line(fileno(errf), msg, sizeof(msg));
        if (errf)
            fclose(errf);
        crl_bench_crun_bundle_remove(steal_pointer(&d));
        if (status < 0)
            return crl_err_sys(err, errno, "running crun");
        return crl_err_set(err, CRL_E_INTERNAL, "crun spec failed: %s", msg);
    }
    if (errf)
        fclose(errf);
    json_error_t je;
    json_t *cfg = json_load_file(config, 0, &je);
    json_t *process = json_object_get(cfg, "process");
    json_t *root = json_object_get(cfg, "root");
    if (!cfg || !json_is_object(process) || !json_is_object(root)) {
        json_decref(cfg);
        crl_bench_crun_bundle_remove(steal_pointer(&d));
        return crl_err_set(err, CRL_E_INTERNAL, "crun spec wrote an unexpected %s", config);
    }
    json_object_set_new(process, "args", json_pack("[s]", "/bin/true"));
    json_object_set_new(process, "terminal", json_false());
    /* A writable copy of its own, as each sandbox has a writable root:
     * crun must not write into the image corrald serves. */
    char copy[4200];
    snprintf(copy, sizeof(copy), "%s/rootfs", d);
    char *const cp[] = {"cp", "-a", (char *)rootfs, copy, NULL};
    if (spawn_wait("/bin/cp", cp, -1, false) != 0) {
        json_decref(cfg);
        crl_bench_crun_bundle_remove(steal_pointer(&d));
        return crl_err_set(err, CRL_E_INTERNAL, "copying %s for crun failed", rootfs);
    }
    json_object_set_new(root, "path", json_string(copy));
    json_object_set_new(root, "readonly", json_false());
    int rc = json_dump_file(cfg, config, JSON_INDENT(2));
    json_decref(cfg);
    if (rc < 0) {
        crl_bench_crun_bundle_remove(steal_pointer(&d));
        return crl_err_set(err, CRL_E_INTERNAL, "writing %s", config);
    }
    *dir = steal_pointer(&d);
    return 0;
}

void crl_bench_crun_bundle_remove(char *dir)
{
    if (!dir)
        return;
    crl_rm_rf_at(AT_FDCWD, dir);
    free(dir);
}

/* ---- crun runs, in a child with its own mount namespace ---- */

/* What the child and its workers report, one record per write(2): small
 * enough (< PIPE_BUF) that records from several writers never interleave. */
enum { REC_SAMPLE, REC_WALL, REC_ERROR };
struct rec {
    int32_t phase;
    int32_t kind;
    double value;
    char msg[240];
};

static void send_rec(int fd, int phase, int kind, double value, const char *msg)
{
    struct rec r = {.phase = phase, .kind = kind, .value = value};
    if (msg)
        snprintf(r.msg, sizeof(r.msg), "%s", msg);
    crl_write_full(fd, &r, sizeof(r));
}

/* One worker: `n` sequential `crun run`s, each timed to completion. */
static int crun_worker(const char *bundle, const char *state, int phase, int worker, size_t n,
                       int out)
{
    char errpath[4200];
    snprintf(errpath, sizeof(errpath), "%s/crun-%d.err", state, worker);
    cleanup_close int errfd = crl_openat(AT_FDCWD, errpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
    for (size_t i = 0; i < n; i++) {
        char id[96];
        snprintf(id, sizeof(id), "crlbench-%d-%d-%d-%zu", (int)getpid(), phase, worker, i);
        char *const argv[] = {"crun",         "--root", (char *)state, "run", "--bundle",
                              (char *)bundle, id,       NULL};
        if (errfd >= 0 && ftruncate(errfd, 0) < 0)
            return 1;
        unsigned long long t0 = crl_now_ns();
        int status = spawn_wait("crun", argv, errfd, true);
        unsigned long long t1 = crl_now_ns();
        if (status != 0) {
            char line[200] = "", msg[240];
            if (errfd >= 0)
                first_line(errfd, line, sizeof(line));
            if (status < 0)
                snprintf(msg, sizeof(msg), "running crun: %s", strerror(errno));
            else
                snprintf(msg, sizeof(msg), "crun run exited with status %d: %s",
                         WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), line);
            send_rec(out, phase, REC_ERROR, 0, msg);
            return 1;
        }
        send_rec(out, phase, REC_SAMPLE, (double)(t1 - t0) / 1e6, NULL);
    }
    return 0;
}

static int crun_phase(const char *bundle, const char *state, int phase, int conc, size_t n, int out)
{
    pid_t pids[2];
    unsigned long long t0 = crl_now_ns();
    for (int w = 0; w < conc; w++) {
        size_t share = n / (size_t)conc + ((size_t)w < n % (size_t)conc ? 1 : 0);
        pids[w] = fork();
        if (pids[w] < 0) {
            send_rec(out, phase, REC_ERROR, 0, "fork failed");
            return -1;
        }
        if (pids[w] == 0)
            _exit(crun_worker(bundle, state, phase, w, share, out));
    }
    int failed = 0;
    for (int w = 0; w < conc; w++) {
        int status;
        while (waitpid(pids[w], &status, 0) < 0 && errno == EINTR)
            ;
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    send_rec(out, phase, REC_WALL, (double)(crl_now_ns() - t0) / 1e9, NULL);
    return failed ? -1 : 0;
}

static void crun_child(const char *bundle, size_t warm, size_t n, int out)
{
    char state[4200];
    char msg[240];
    snprintf(state, sizeof(state), "%s/run", bundle);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* crun 1.8 rejects a hybrid v1+v2 layout ("cgroups in hybrid mode not
     * supported"): hide the empty v2 mount in a namespace of our own. */
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
        snprintf(msg, sizeof(msg), "a private mount namespace for crun: %s", strerror(errno));
        send_rec(out, 0, REC_ERROR, 0, msg);
        _exit(1);
    }
    if (umount2("/sys/fs/cgroup/unified", MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT) {
        snprintf(msg, sizeof(msg), "umount /sys/fs/cgroup/unified: %s", strerror(errno));
        send_rec(out, 0, REC_ERROR, 0, msg);
        _exit(1);
    }
    if (crun_phase(bundle, state, 0, 1, warm, out) < 0 ||
        crun_phase(bundle, state, 1, 1, n, out) < 0 || crun_phase(bundle, state, 2, 2, n, out) < 0)
        _exit(1);
    _exit(0);
}

int crl_bench_crun(const char *bundle, size_t warm, size_t n, struct crl_bench_samples *c1,
                   struct crl_bench_samples *c2, struct crl_err *err)
{
    int p[2];
    if (crl_bench_samples_alloc(c1, n, err) < 0 || crl_bench_samples_alloc(c2, n, err) < 0)
        return -1;
    if (pipe2(p, O_CLOEXEC) < 0)
        return crl_err_sys(err, errno, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return crl_err_sys(err, errno, "fork");
    }
    if (pid == 0) {
        close(p[0]);
        crun_child(bundle, warm, n, p[1]);
    }
    close(p[1]);
    int rc = 0;
    struct rec r;
    ssize_t got;
    while ((got = crl_read_full(p[0], &r, sizeof(r))) == (ssize_t)sizeof(r)) {
        struct crl_bench_samples *s = r.phase == 1 ? c1 : r.phase == 2 ? c2 : NULL;
        if (r.kind == REC_ERROR && rc == 0)
            rc = crl_err_set(err, CRL_E_INTERNAL, "%s", r.msg);
        else if (r.kind == REC_SAMPLE && s && s->n < n)
            s->ms[s->n++] = r.value;
        else if (r.kind == REC_WALL && s)
            s->wall_s = r.value;
    }
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
        rc = crl_err_set(err, CRL_E_INTERNAL, "the crun child failed (status %d)", status);
    if (rc == 0 && (c1->n != n || c2->n != n))
        rc = crl_err_set(err, CRL_E_INTERNAL, "the crun child reported %zu and %zu of %zu runs",
                         c1->n, c2->n, n);
    return rc;
}

/* ---- the host floor: posix_spawn + wait ---- */

int crl_bench_spawn(const char *path, size_t warm, size_t n, struct crl_bench_samples *out,
                    struct crl_err *err)
{
    char *const argv[] = {"true", NULL};
    if (crl_bench_samples_alloc(out, n, err) < 0)
        return -1;
    unsigned long long start = crl_now_ns();
    for (size_t i = 0; i < warm + n; i++) {
        unsigned long long t0 = crl_now_ns();
        int status = spawn_wait(path, argv, -1, false);
        unsigned long long t1 = crl_now_ns();
        if (status < 0)
            return crl_err_sys(err, errno, "posix_spawn %s", path);
        if (status != 0)
            return crl_err_set(err, CRL_E_INTERNAL, "%s exited with status %d", path, status);
        if (i == warm)
            start = t0;
        if (i >= warm)
            out->ms[out->n++] = (double)(t1 - t0) / 1e6;
    }
    out->wall_s = (double)(crl_now_ns() - start) / 1e9;
    return 0;
}

/* ---- fork and exec, output read from a pipe; a bare fork ---- */

/* fork + execv with stdout to a pipe, read to its end into *buf (grown as
 * needed, *cap its size; NUL-terminated, *len bytes), then waitpid.  The
 * wait status, or -1 with errno. */
static int run_piped(const char *path, char *const argv[], char **buf, size_t *cap, size_t *len)
{
    int p[2];
    *len = 0;
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(p[1], STDOUT_FILENO) < 0)
            _exit(126);
        execv(path, argv);
        _exit(127);
    }
    close(p[1]);
    int e = 0;
    for (;;) {
        if (*cap - *len < 2) {
            size_t ncap = *cap ? *cap * 2 : 4096;
            char *nb = realloc(*buf, ncap);
            if (!nb) {
                e = ENOMEM;
                break;
            }
            *buf = nb;
            *cap = ncap;
        }
        ssize_t got = read(p[0], *buf + *len, *cap - *len - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            e = errno;
        if (got <= 0)
            break;
        *len += (size_t)got;
    }
    if (*buf)
        (*buf)[*len] = 0;
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (e) {
        errno = e;
        return -1;
    }
    return status;
}

int crl_bench_capture(const char *path, char *const argv[], int *status, char **out,
                      struct crl_err *err)
{
    char *buf = NULL;
    size_t cap = 0, len = 0;
    *status = run_piped(path, argv, &buf, &cap, &len);
    if (*status < 0) {
        int e = errno;
        free(buf);
        return crl_err_sys(err, e, "running %s", path);
    }
    if (out)
        *out = buf;
    else
        free(buf);
    return 0;
}

int crl_bench_fork_exec(const char *path, char *const argv[], const char *expect, size_t warm,
                        size_t n, struct crl_bench_samples *out, struct crl_err *err)
{
    cleanup_free char *buf = NULL;
    size_t cap = 0, len = 0;
    if (crl_bench_samples_alloc(out, n, err) < 0)
        return -1;
    unsigned long long start = crl_now_ns();
    for (size_t i = 0; i < warm + n; i++) {
        unsigned long long t0 = crl_now_ns();
        int status = run_piped(path, argv, &buf, &cap, &len);
        unsigned long long t1 = crl_now_ns();
        if (status < 0)
            return crl_err_sys(err, errno, "running %s", path);
        if (status != 0)
            return crl_err_set(err, CRL_E_INTERNAL, "%s exited with wait status %d", path, status);
        if (expect && (len != strlen(expect) || memcmp(buf, expect, len) != 0))
            return crl_err_set(err, CRL_E_INTERNAL, "%s printed '%.*s', not '%s'", path,
                               (int)(len > 64 ? 64 : len), buf ? buf : "", expect);
        if (i == warm)
            start = t0;
        if (i >= warm)
            out->ms[out->n++] = (double)(t1 - t0) / 1e6;
    }
    out->wall_s = (double)(crl_now_ns() - start) / 1e9;
    return 0;
}

int crl_bench_fork_exit(size_t warm, size_t n, struct crl_bench_samples *out, struct crl_err *err)
{
    if (crl_bench_samples_alloc(out, n, err) < 0)
        return -1;
    fflush(NULL);
    unsigned long long start = crl_now_ns();
    for (size_t i = 0; i < warm + n; i++) {
        unsigned long long t0 = crl_now_ns();
        pid_t pid = fork();
        if (pid < 0)
            return crl_err_sys(err, errno, "fork");
        if (pid == 0)
            _exit(0);
        int status;
        while (waitpid(pid, &status, 0) < 0)
            if (errno != EINTR)
                return crl_err_sys(err, errno, "waitpid");
        unsigned long long t1 = crl_now_ns();
        if (i == warm)
            start = t0;
        if (i >= warm)
            out->ms[out->n++] = (double)(t1 - t0) / 1e6;
    }
    out->wall_s = (double)(crl_now_ns() - start) / 1e9;
    return 0;
}
