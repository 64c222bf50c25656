#include "peer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
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
#include "../corral/cli.h"

extern char **environ;

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

int crl_bench_run_cmd(char *const argv[], struct crl_err *err)
{
    FILE *errf = tmpfile();
    int status = spawn_wait(argv[0], argv, errf ? fileno(errf) : -1, true);
    int e = errno;
    char msg[256] = "";
    if (errf) {
        first_line(fileno(errf), msg, sizeof(msg));
        fclose(errf);
    }
    if (status < 0)
        return crl_err_sys(err, e, "running %s", argv[0]);
    if (status != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "%s %s failed (wait status %d): %s", argv[0],
                           argv[1] ? argv[1] : "", status, msg);
    return 0;
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

/* ---- the crun bundle ---- */

int crl_bench_crun_bundle(const char *rootfs, char **dir, struct crl_err *err)
{
    cleanup_free char *d = strdup("/tmp/corral-bench-crun.XXXXXX");
    if (!d || !mkdtemp(d))
        return crl_err_sys(err, errno, "creating a bundle directory");
    char config[4096];
    snprintf(config, sizeof(config), "%s/config.json", d);
    char *const argv[] = {"crun", "spec", "--bundle", d, NULL};
    if (crl_bench_run_cmd(argv, err) < 0) {
        crl_bench_crun_bundle_remove(steal_pointer(&d));
        return -1;
    }
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
    if (crl_bench_run_cmd(cp, err) < 0) {
        json_decref(cfg);
        crl_bench_crun_bundle_remove(steal_pointer(&d));
        return crl_err_prefix(err, "copying %s for crun", rootfs);
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

/* posix_spawn + wait of a /bin/true, which must exit 0. */
static int spawn_true(void *path, size_t i, struct crl_err *err)
{
    char *const argv[] = {"true", NULL};
    int status = spawn_wait(path, argv, -1, false);
    if (status < 0)
        return crl_err_sys(err, errno, "posix_spawn %s", (char *)path);
    if (status != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "%s exited with status %d", (char *)path, status);
    return 0;
}

int crl_bench_spawn(const char *path, size_t warm, size_t n, struct crl_bench_samples *out,
                    struct crl_err *err)
{
    return crl_bench_timed(warm, n, spawn_true, (void *)path, out, err);
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

/* One fork_exec run: its output, kept from run to run, and what it must be. */
struct piped {
    const char *path;
    char *const *argv;
    const char *expect;
    char *buf;
    size_t cap, len;
};

static int run_piped_once(void *ctx, size_t i, struct crl_err *err)
{
    struct piped *p = ctx;
    int status = run_piped(p->path, p->argv, &p->buf, &p->cap, &p->len);
    if (status < 0)
        return crl_err_sys(err, errno, "running %s", p->path);
    if (status != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "%s exited with wait status %d", p->path, status);
    if (p->expect && (p->len != strlen(p->expect) || memcmp(p->buf, p->expect, p->len) != 0))
        return crl_err_set(err, CRL_E_INTERNAL, "%s printed '%.*s', not '%s'", p->path,
                           (int)(p->len > 64 ? 64 : p->len), p->buf ? p->buf : "", p->expect);
    return 0;
}

int crl_bench_fork_exec(const char *path, char *const argv[], const char *expect, size_t warm,
                        size_t n, struct crl_bench_samples *out, struct crl_err *err)
{
    struct piped p = {.path = path, .argv = argv, .expect = expect};
    int rc = crl_bench_timed(warm, n, run_piped_once, &p, out, err);
    free(p.buf);
    return rc;
}

static int fork_exit_once(void *ctx, size_t i, struct crl_err *err)
{
    pid_t pid = fork();
    if (pid < 0)
        return crl_err_sys(err, errno, "fork");
    if (pid == 0)
        _exit(0);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return crl_err_sys(err, errno, "waitpid");
    return 0;
}

int crl_bench_fork_exit(size_t warm, size_t n, struct crl_bench_samples *out, struct crl_err *err)
{
    fflush(NULL);
    return crl_bench_timed(warm, n, fork_exit_once, NULL, out, err);
}

/* ---- a process's memory ---- */

long crl_bench_rss_kb(pid_t pid)
{
    char path[64], buf[4096];
    if (pid > 0)
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/self/status");
    if (crl_read_file_at(AT_FDCWD, path, buf, sizeof(buf)) <= 0)
        return -1;
    const char *p = strstr(buf, "\nVmRSS:");
    return p ? strtol(p + 7, NULL, 10) : -1;
}
