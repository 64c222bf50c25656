/* lib/os/cgroup against this machine's real hierarchies: cgroup v1
 * controllers at /sys/fs/cgroup/<ctl> and an empty cgroup v2 tree at
 * /sys/fs/cgroup/unified (no controllers, allow_missing_controllers).
 *
 * Everything lives under a parent of our own ("corral-unittest-<pid>"), never
 * corrald's "corral".  Worker processes join cgroups the way the spawner
 * makes them: by writing "0" to the descriptors crl_cgroup_attach_fds gives.
 * Each case is a subreaper so daemonised grandchildren come back to it to be
 * reaped.  At the end nothing of ours may remain under /sys/fs/cgroup. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>

#include "../../lib/os/cgroup.h"
#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

#define CG "/sys/fs/cgroup"
#define MIB (1024ull * 1024)

static char parent[64];     /* most cases */
static char parent_rec[64]; /* the reconcile cases: they remove everything under it */
static const char *const v1_hier[] = {"memory", "pids", "freezer", "cpu", "cpuacct"};
static bool have_v2;

/* What workers and the test share: counters, pids, flags. */
struct shared {
    volatile uint64_t counter;
    volatile int touched;
    volatile pid_t pids[4];
};
static struct shared *sh;

/* ---- helpers ---- */

static bool is_fs(const char *path, long magic)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

static bool readf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool readf(char *buf, size_t cap, const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    buf[0] = 0;
    return crl_read_file_at(AT_FDCWD, path, buf, cap) >= 0;
}

static long long numf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static long long numf(const char *fmt, ...)
{
    char path[512], buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    if (crl_read_file_at(AT_FDCWD, path, buf, sizeof(buf)) < 0)
        return -1;
    return strtoll(buf, NULL, 10);
}

static bool existsf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool existsf(const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    struct stat st;
    return stat(path, &st) == 0;
}

/* The cgroup path of `pid` in hierarchy `ctl` (v1) or in the v2 tree ("" ctl). */
static bool proc_cgroup(pid_t pid, const char *ctl, char *out, size_t cap)
{
    char buf[4096], want[64];
    if (!readf(buf, sizeof(buf), "/proc/%d/cgroup", (int)pid))
        return false;
    snprintf(want, sizeof(want), ":%s:", ctl);
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        char *p = strstr(line, want);
        if (p && (*ctl || strncmp(line, "0::", 3) == 0)) {
            snprintf(out, cap, "%s", p + strlen(want));
            return true;
        }
        line = nl ? nl + 1 : NULL;
    }
    return false;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait for `pid` to end; returns its wait status, or -1 after timeout_ms.
 * A grandchild becomes ours (subreaper) only once its parent is gone, so
 * "not a child" is retried too. */
static int reap(pid_t pid, int timeout_ms)
{
    for (int i = 0; i < timeout_ms; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return st;
        sleep_ms(1);
    }
    return -1;
}

/* Reap every child until none is left or timeout_ms passed. */
static void reap_all(int timeout_ms)
{
    for (int i = 0; i < timeout_ms; i++) {
        pid_t r = waitpid(-1, NULL, WNOHANG);
        if (r < 0 && errno == ECHILD)
            return;
        if (r <= 0)
            sleep_ms(1);
    }
}

static bool killed(int status)
{
    return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

/* Is `pid` (our child) still running? */
static bool alive(pid_t pid)
{
    int st;
    return waitpid(pid, &st, WNOHANG) == 0;
}

/* Fork a worker that joins `leaf` of cg, then runs fn.  Returns once the
 * worker is in its cgroups. */
static pid_t spawn_in(struct crl_cgroup *cg, const char *leaf, void (*fn)(void))
{
    int fds[CRL_CGROUP_MAX_FDS], n = 0;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_cgroup_attach_fds(cg, leaf, fds, &n, &e) < 0) {
        diag("attach_fds(%s): %s", leaf, e.msg);
        return -1;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        bail_out("pipe2");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        for (int i = 0; i < n; i++)
            if (write(fds[i], "0", 1) != 1)
                _exit(100 + i);
        if (write(p[1], "j", 1) != 1)
            _exit(99);
        close(p[1]);
        fn();
        _exit(0);
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
    close(p[1]);
    char c;
    ssize_t r = read(p[0], &c, 1);
    close(p[0]);
    if (r != 1) {
        int st = reap(pid, 1000);
        diag("worker did not join %s (exit %d)", leaf,
             st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return -1;
    }
    return pid;
}

static void w_pause(void)
{
    for (;;)
        pause();
}

static void w_count(void)
{
    for (;;)
        sh->counter++;
}

static void burn_cpu_ms(int ms)
{
    struct timespec t;
    for (;;) {
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        if (t.tv_sec * 1000 + t.tv_nsec / 1000000 >= ms)
            return;
    }
}

static void touch_mib(size_t mib)
{
    size_t len = mib * MIB;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        _exit(98);
    for (size_t i = 0; i < len; i += 4096)
        m[i] = 1;
}

static void w_touch32(void)
{
    touch_mib(32);
    sh->touched = 1;
    w_pause();
}

static void w_touch64(void)
{
    touch_mib(64);
    sh->touched = 1;
    w_pause();
}

static void w_tenant(void)
{
    burn_cpu_ms(200);
    touch_mib(24);
}

/* A daemonising exec: A forks B, B calls setsid() and forks C; all pause. */
static void w_tree(void)
{
    sh->pids[0] = getpid();
    pid_t b = fork();
    if (b == 0) {
        setsid();
        pid_t c = fork();
        if (c == 0) {
            sh->pids[2] = getpid();
            w_pause();
        }
        sh->pids[1] = getpid();
        w_pause();
    }
    w_pause();
}

static bool wait_for(volatile int *flag, int timeout_ms)
{
    for (int i = 0; i < timeout_ms && !*flag; i++)
        sleep_ms(1);
    return *flag != 0;
}

static struct crl_cgroup_mgr *mgr_v1(const char *par)
{
    struct crl_cgroup_config cfg = {CRL_CGROUP_V1, CG, par, false};
    struct crl_cgroup_mgr *m = NULL;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_cgroup_mgr_open(&cfg, &m, &e) < 0) {
        diag("v1 manager: %s", e.msg);
        return NULL;
    }
    return m;
}

static struct crl_cgroup_mgr *mgr_v2(const char *par)
{
    struct crl_cgroup_config cfg = {CRL_CGROUP_V2, CG "/unified", par, true};
    struct crl_cgroup_mgr *m = NULL;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_cgroup_mgr_open(&cfg, &m, &e) < 0) {
        diag("v2 manager: %s", e.msg);
        return NULL;
    }
    return m;
}

static struct crl_cgroup *create(struct crl_cgroup_mgr *m, const char *name, uint64_t mem_mib,
                                 unsigned pids, double cpus)
{
    struct crl_cgroup_limits l = {mem_mib * MIB, pids, cpus};
    struct crl_cgroup *cg = NULL;
    struct crl_err e = CRL_ERR_INIT;
    if (!ok(crl_cgroup_create(m, name, &l, &cg, &e) == 0, "create cgroup %s", name)) {
        diag("%s", e.msg);
        return NULL;
    }
    return cg;
}

static bool release(struct crl_cgroup *cg, bool remove)
{
    struct crl_err e = CRL_ERR_INIT;
    if (crl_cgroup_release(cg, remove, &e) < 0) {
        diag("release: %s", e.msg);
        return false;
    }
    return true;
}

static void case_setup(void)
{
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    memset((void *)sh, 0, sizeof(*sh));
}

/* ---- v1 ---- */

static void test_v1_open(void)
{
    struct crl_cgroup_mgr *m = mgr_v1(parent);
    if (!ok(m != NULL, "open a v1 manager on %s with parent %s", CG, parent))
        return;
    is_int(crl_cgroup_mgr_version(m), CRL_CGROUP_V1, "it is v1");
    like(crl_cgroup_mgr_describe(m), "^v1: memory,pids,freezer", "describe lists the controllers");
    for (size_t i = 0; i < 5; i++)
        ok(existsf(CG "/%s/%s", v1_hier[i], parent), "the parent exists in %s", v1_hier[i]);
    is_int(numf(CG "/memory/%s/memory.use_hierarchy", parent), 1,
           "hierarchical memory accounting is on in the parent");
    crl_cgroup_mgr_free(m);

    struct crl_cgroup_config cfg = {CRL_CGROUP_AUTO, CG, parent, false};
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_cgroup_mgr_open(&cfg, &m, &e) == 0 && crl_cgroup_mgr_version(m) == CRL_CGROUP_V1,
       "AUTO picks v1 on this hybrid host (tmpfs at %s, v1 memory)", CG);
    if (m)
        crl_cgroup_mgr_free(m);

    char tmp[] = "/tmp/corral-test-cgroup-XXXXXX";
    if (!mkdtemp(tmp))
        bail_out("mkdtemp");
    cfg = (struct crl_cgroup_config){CRL_CGROUP_V1, tmp, parent, false};
    e = (struct crl_err)CRL_ERR_INIT;
    m = NULL;
    ok(crl_cgroup_mgr_open(&cfg, &m, &e) < 0 && e.code == CRL_E_UNAVAILABLE,
       "v1 on a tree without controllers is refused as unavailable");
    like(e.msg, "cgroup v1 controller 'memory' is not mounted", "naming the missing controller");
    cfg.version = CRL_CGROUP_AUTO;
    ok(crl_cgroup_mgr_open(&cfg, &m, &e) < 0 && e.code == CRL_E_UNAVAILABLE,
       "AUTO on a plain directory is refused");
    rmdir(tmp);
}

static void test_v1_create_limits(void)
{
    case_setup();
    struct crl_cgroup_mgr *m = mgr_v1(parent);
    if (!m)
        return;
    struct crl_cgroup *cg = create(m, "lim", 64, 32, 0.5);
    if (!cg)
        return;
    is_str(crl_cgroup_name(cg), "lim", "crl_cgroup_name");
    for (size_t i = 0; i < 5; i++)
        ok(existsf(CG "/%s/%s/lim", v1_hier[i], parent), "the cgroup exists in %s", v1_hier[i]);
    is_int(numf(CG "/memory/%s/lim/memory.limit_in_bytes", parent), 64 * MIB,
           "memory.limit_in_bytes");
    if (existsf(CG "/memory/%s/lim/memory.memsw.limit_in_bytes", parent))
        is_int(numf(CG "/memory/%s/lim/memory.memsw.limit_in_bytes", parent), 64 * MIB,
               "memory.memsw.limit_in_bytes: no swap beyond the limit");
    else
        skip(1, "no swap accounting (memory.memsw.*)");
    is_int(numf(CG "/pids/%s/lim/pids.max", parent), 32, "pids.max");
    is_int(numf(CG "/cpu/%s/lim/cpu.cfs_period_us", parent), 100000, "cpu.cfs_period_us");
    is_int(numf(CG "/cpu/%s/lim/cpu.cfs_quota_us", parent), 50000,
           "cpu.cfs_quota_us is cpus x period");
    char buf[64];
    readf(buf, sizeof(buf), CG "/freezer/%s/lim/freezer.state", parent);
    like(buf, "^THAWED", "a new cgroup is thawed");
    ok(release(cg, false), "release, keeping it for reuse");
    ok(existsf(CG "/memory/%s/lim", parent), "a released cgroup is kept");

    /* Reuse with a larger, then a smaller memory limit: memsw must be lifted first. */
    cg = create(m, "lim", 256, 64, 2);
    if (cg) {
        is_int(numf(CG "/memory/%s/lim/memory.limit_in_bytes", parent), 256 * MIB,
               "reuse raises memory.limit_in_bytes");
        if (existsf(CG "/memory/%s/lim/memory.memsw.limit_in_bytes", parent))
            is_int(numf(CG "/memory/%s/lim/memory.memsw.limit_in_bytes", parent), 256 * MIB,
                   "and memsw with it");
        else
            skip(1, "no swap accounting");
        is_int(numf(CG "/pids/%s/lim/pids.max", parent), 64, "reuse sets pids.max");
        is_int(numf(CG "/cpu/%s/lim/cpu.cfs_quota_us", parent), 200000, "reuse sets the cpu quota");
        release(cg, false);
    }
    cg = create(m, "lim", 16, 8, 0.01);
    if (cg) {
        is_int(numf(CG "/memory/%s/lim/memory.limit_in_bytes", parent), 16 * MIB,
               "reuse lowers memory.limit_in_bytes");
        is_int(numf(CG "/cpu/%s/lim/cpu.cfs_quota_us", parent), 1000, "cpus 0.01 is a 1 ms quota");
        ok(release(cg, true), "release and remove");
    }
    bool gone = true;
    for (size_t i = 0; i < 5; i++)
        gone = gone && !existsf(CG "/%s/%s/lim", v1_hier[i], parent);
    ok(gone, "release(remove) leaves no directory in any hierarchy");
    crl_cgroup_mgr_free(m);
}

static void test_v1_attach_count(void)
{
    case_setup();
    struct crl_cgroup_mgr *m = mgr_v1(parent);
    if (!m)
        return;
    struct crl_cgroup *cg = create(m, "att", 128, 64, 1);
    if (!cg)
        return;
    int fds[CRL_CGROUP_MAX_FDS], n = 0;
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_cgroup_attach_fds(cg, "e1", fds, &n, &e) == 0, "attach_fds for leaf e1");
    ok(n >= 3 && n <= CRL_CGROUP_MAX_FDS, "one fd per hierarchy (%d)", n);
    bool cloexec = true;
    for (int i = 0; i < n; i++) {
        cloexec = cloexec && (fcntl(fds[i], F_GETFD) & FD_CLOEXEC);
        close(fds[i]);
    }
    ok(cloexec, "the fds are O_CLOEXEC");
    ok(existsf(CG "/freezer/%s/att/e1", parent), "the leaf is made in the freezer hierarchy");
    ok(!existsf(CG "/memory/%s/att/e1", parent), "and only there (limits stay on the sandbox)");

    pid_t a = spawn_in(cg, ".", w_pause);
    pid_t b = spawn_in(cg, "e1", w_pause);
    if (!ok(a > 0 && b > 0, "two workers joined, in '.' and in 'e1'"))
        goto out;
    char path[256], want[256];
    bool all = true;
    for (size_t i = 0; i < 5; i++) {
        snprintf(want, sizeof(want), "/%s/att", parent);
        all = all && proc_cgroup(a, v1_hier[i], path, sizeof(path)) && strcmp(path, want) == 0;
    }
    ok(all, "the '.' worker is in the sandbox cgroup of every hierarchy");
    snprintf(want, sizeof(want), "/%s/att/e1", parent);
    ok(proc_cgroup(b, "freezer", path, sizeof(path)) && strcmp(path, want) == 0,
       "the e1 worker is in freezer:%s", want);
    snprintf(want, sizeof(want), "/%s/att", parent);
    ok(proc_cgroup(b, "memory", path, sizeof(path)) && strcmp(path, want) == 0,
       "and in memory:%s (limits apply to it)", want);
    is_int(crl_cgroup_count(cg, "."), 1, "count('.') is the sandbox cgroup's own process");
    is_int(crl_cgroup_count(cg, "e1"), 1, "count('e1') is 1");
    is_int(crl_cgroup_count(cg, NULL), 2, "count(NULL) is the whole sandbox: 2");
    is_int(crl_cgroup_count(cg, "nope"), 0, "count of a missing leaf is 0");
    is_int(crl_cgroup_remove_leaf(cg, "e1"), -1, "remove_leaf on a populated leaf fails");
    ok(errno == EBUSY, "with EBUSY");

    is_int(crl_cgroup_kill_all(cg, &e), 2, "kill_all signals both workers");
    ok(killed(reap(a, 5000)) && killed(reap(b, 5000)), "both die of SIGKILL");
    is_int(crl_cgroup_count(cg, NULL), 0, "the sandbox is empty");
    is_int(crl_cgroup_kill_all(cg, &e), 0, "kill_all on an empty sandbox signals nothing");
    is_int(crl_cgroup_remove_leaf(cg, "e1"), 0, "remove_leaf on the emptied leaf");
    ok(!existsf(CG "/freezer/%s/att/e1", parent), "the leaf is gone");
    is_int(crl_cgroup_remove_leaf(cg, "e1"), 0, "removing a missing leaf is not an error");
out:
    release(cg, true);
    crl_cgroup_mgr_free(m);
}

/* A keeper's round trip (lib/backend/function/keeper.c): into a sandbox's
 * cgroup through crl_cgroup_join_dirs, then back to ours through
 * crl_cgroup_mgr_own_dirs, each by writing itself into cgroup.procs. */
static void test_v1_join_and_own_dirs(void)
{
    case_setup();
    struct crl_cgroup_mgr *m = mgr_v1(parent);
    if (!m)
        return;
    struct crl_cgroup *cg = create(m, "own", 128, 64, 1);
    if (!cg)
        return;
    int join[CRL_CGROUP_MAX_FDS], own[CRL_CGROUP_MAX_FDS];
    struct crl_err e = CRL_ERR_INIT;
    int nj = crl_cgroup_join_dirs(cg, join, &e);
    int no = crl_cgroup_mgr_own_dirs(m, own, &e);
    ok(nj >= 3 && no == nj, "as many of our own dirs as join dirs (%d, %d): %s", nj, no, e.msg);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        bail_out("pipe2");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char c;
        for (int i = 0; i < nj; i++)
            if (crl_write_file_at(join[i], "cgroup.procs", "0") < 0)
                _exit(10 + i);
        if (read(p[0], &c, 1) != 1) /* the parent looks */
            _exit(20);
        for (int i = 0; i < no; i++)
            if (crl_write_file_at(own[i], "cgroup.procs", "0") < 0)
                _exit(30 + i);
        if (read(p[0], &c, 1) != 1) /* and looks again */
            _exit(40);
        _exit(0);
    }
    close(p[0]);
    char path[256], want[256], mine[256];
    snprintf(want, sizeof(want), "/%s/own", parent);
    bool in = false, back = true;
    for (int t = 0; t < 500 && !in; t++) { /* it joins one hierarchy after another */
        in = true;
        for (size_t i = 0; in && i < 5; i++)
            in = proc_cgroup(pid, v1_hier[i], path, sizeof(path)) && strcmp(path, want) == 0;
        if (!in)
            usleep(2000);
    }
    ok(in, "joined through the join dirs: in %s in every hierarchy", want);
    if (write(p[1], "l", 1) != 1)
        bail_out("write");
    for (int t = 0; t < 500; t++) {
        back = true;
        for (size_t i = 0; back && i < 5; i++)
            back = proc_cgroup(pid, v1_hier[i], path, sizeof(path)) &&
                   proc_cgroup(getpid(), v1_hier[i], mine, sizeof(mine)) && strcmp(path, mine) == 0;
        if (back)
            break;
        usleep(2000);
    }
    ok(back, "and back where we are, through our own dirs, in every hierarchy");
    if (write(p[1], "l", 1) != 1)
        bail_out("write");
    close(p[1]);
    int status = -1;
    waitpid(pid, &status, 0);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the worker's writes all worked (%d)",
       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    close_fds(join, nj); /* opened for us */
    release(cg, true);
    crl_cgroup_mgr_free(m);
}

static void test_v1_kill_leaf(void)
{
    case_setup();
    struct crl_cgroup_mgr *m = mgr_v1(parent);
    if (!m)
        return;
    struct crl_cgroup *cg = create(m, "kill", 128, 64, 1);
    if (!cg)
        return;
    pid_t spare = spawn_in(cg, "e1", w_pause);
    pid_t a = spawn_in(cg, "e1", w_tree);
    pid_t other = spawn_in(cg, "e2", w_pause);
    pid_t init = spawn_in(cg, ".", w_pause);
    for (int i = 0; i < 2000 && !(sh->pids[1] && sh->pids[2]); i++)
        sleep_ms(1);
    pid_t b = sh->pids[1], c = sh->pids[2];
    if (!ok(spare > 0 && a > 0 && other > 0 && init > 0 && b > 0 && c > 0,
            "workers: a spare and a daemonising tree in e1, one in e2, one in '.'"))
        goto out;
    ok(getsid(c) == b && getsid(a) != b, "the grandchild left the session (setsid)");
    is_int(crl_cgroup_count(cg, "e1"), 4, "e1 holds the spare and the tree of 3");
    struct crl_err e = CRL_ERR_INIT;
    is_int(crl_cgroup_kill_leaf(cg, "e1", spare, &e), 3,
           "kill_leaf(e1, spare) signals the 3 of the tree");
    ok(killed(reap(a, 5000)), "the exec's process died of SIGKILL");
    /* b and c come back to us (subreaper) once their parents are gone. */
    ok(killed(reap(b, 5000)), "its child died");
    ok(killed(reap(c, 5000)), "the setsid'd grandchild died");
    ok(alive(spare), "the spare process lives");
    ok(alive(other), "a process in another leaf lives");
    ok(alive(init), "the sandbox's own process lives");
    is_int(crl_cgroup_count(cg, "e1"), 1, "e1 now holds only the spare");
    is_int(crl_cgroup_kill_leaf(cg, "e1", 0, &e), 1, "kill_leaf(e1) without a spare kills it too");
    ok(killed(reap(spare, 5000)), "the spare died");
    ok(alive(other) && alive(init), "the others still live");
    char buf[64];
    readf(buf, sizeof(buf), CG "/freezer/%s/kill/freezer.state", parent);
    like(buf, "^THAWED", "the sandbox is thawed after a kill");
    is_int(crl_cgroup_kill_leaf(cg, "missing", 0, &e), 0, "killing a missing leaf is a no-op");
    is_int(crl_cgroup_kill_leaf(cg, ".", 0, &e), 2, "kill_leaf('.') kills the whole sandbox");
    ok(killed(reap(other, 5000)) && killed(reap(init, 5000)), "both remaining workers died");
out:
    crl_cgroup_kill_all(cg, NULL);
    reap_all(5000);
    release(cg, true);
    crl_cgroup_mgr_free(m);
}

/* tidy never waits: a busy leaf is EBUSY at once, an empty one goes, and
 * with remove the sandbox's cgroup goes from every hierarchy. */
static void test_v1_tidy(void)
{
    case_setup();
    struct crl_cgroup_mgr *m = mgr_v1(parent);
    if (!m)
        return;
    struct crl_cgroup *cg = create(m, "tidy", 128, 64, 1);
    if (!cg)
        return;
    pid_t w = spawn_in(cg, "e1", w_pause);
    if (!ok(w > 0, "a worker in e1"))
        goto out;
    errno = 0;
    is_int(crl_cgroup_tidy(cg, false), -1, "tidy with a populated leaf fails");
    ok(errno == EBUSY, "with EBUSY");
    ok(existsf(CG "/freezer/%s/tidy/e1", parent), "the leaf stays");
    struct crl_err e = CRL_ERR_INIT;
    crl_cgroup_kill_all(cg, &e);
    ok(killed(reap(w, 5000)), "the worker died");
    is_int(crl_cgroup_tidy(cg, false), 0, "tidy of the emptied sandbox");
    ok(!existsf(CG "/freezer/%s/tidy/e1", parent), "the leaf is gone");
    ok(existsf(CG "/memory/%s/tidy", parent), "the sandbox's cgroup stays without remove");
    is_int(crl_cgroup_tidy(cg, true), 0, "tidy with remove");
    ok(!existsf(CG "/memory/%s/tidy", parent) && !existsf(CG "/freezer/%s/tidy", parent),
       "the sandbox's cgroup is gone from every hierarchy");
out:
    crl_cgroup_kill_all(cg, NULL);
    reap_all(5000);
    release(cg, true);
    crl_cgroup_mgr_free(m);
}

static void test_v1_freeze(void)
{
    case_setup();
    struct crl_cgroup_mgr *m = mgr_v1(parent);
    if (!m)
        return;
    struct crl_cgroup *cg = create(m, "frz", 128, 64, 1);
    if (!cg)
        return;
    pid_t w = spawn_in(cg, "e1", w_count);
    if (!ok(w > 0, "a counting worker in e1"))
        goto out;
    for (int i = 0; i < 2000 && sh->counter == 0; i++)
        sleep_ms(1);
    struct crl_err e = CRL_ERR_INIT;
    is_int(crl_cgroup_freeze(cg, true, &e), 0, "freeze");
    char buf[64];
    readf(buf, sizeof(buf), CG "/freezer/%s/frz/freezer.state", parent);
    like(buf, "^FROZEN", "freezer.state is FROZEN when freeze returns");
    uint64_t c1 = sh->counter;
    sleep_ms(150);
    uint64_t c2 = sh->counter;
    ok(c1 > 0 && c1 == c2, "a frozen worker (in a leaf) does not advance (%llu -> %llu)",
       (unsigned long long)c1, (unsigned long long)c2);
    ok(alive(w), "and is alive");
    is_int(crl_cgroup_freeze(cg, false, &e), 0, "thaw");
    sleep_ms(100);
    ok(sh->counter > c2, "the thawed worker counts again");
    crl_cgroup_freeze(cg, true, &e);
    is_int(crl_cgroup_kill_all(cg, &e), 1, "kill_all on a frozen sandbox");
    ok(killed(reap(w, 5000)), "kills its worker");
    release(cg, false);
    /* A reused cgroup starts thawed even if its last tenant left it frozen. */
    cg = create(m, "frz", 128, 64, 1);
    if (cg) {
        crl_cgroup_freeze(cg, true, &e);
        release(cg, false);
        cg = create(m, "frz", 128, 64, 1);
    }
    if (cg) {
        readf(buf, sizeof(buf), CG "/freezer/%s/frz/freezer.state", parent);
        like(buf, "^THAWED", "a cgroup released frozen is thawed on reuse");
    }
out:
    if (cg) {
        crl_cgroup_kill_all(cg, NULL);
        reap_all(5000);
        release(cg, true);
    }
    crl_cgroup_mgr_free(m);
}

static void test_v1_stats(void)
{
    case_setup();
    struct crl_cgroup_mgr *m = mgr_v1(parent);
    if (!m)
        return;
    struct crl_cgroup *cg = create(m, "st", 256, 64, 1);
    if (!cg)
        return;
    struct crl_cgroup_stats s0, s1;
    crl_cgroup_stats(cg, &s0);
    ok(s0.memory_bytes < 4 * MIB && s0.pids == 0 && s0.oom_kills == 0,
       "a new cgroup: little memory (%llu), no pids, no OOM kills",
       (unsigned long long)s0.memory_bytes);
    pid_t w = spawn_in(cg, "e1", w_touch32);
    if (!ok(w > 0 && wait_for(&sh->touched, 5000), "a worker in e1 touched 32 MiB"))
        goto out;
    crl_cgroup_stats(cg, &s1);
    ok(s1.memory_bytes >= s0.memory_bytes + 30 * MIB,
       "memory_bytes grew by the 32 MiB a leaf process touched (%llu -> %llu)",
       (unsigned long long)s0.memory_bytes, (unsigned long long)s1.memory_bytes);
    ok(s1.memory_peak_bytes >= s1.memory_bytes, "memory_peak_bytes >= memory_bytes");
    is_int(s1.pids, 1, "pids is 1");
    crl_cgroup_kill_all(cg, NULL);
    reap(w, 5000);

    pid_t t = spawn_in(cg, "e2", w_tenant);
    int st = reap(t, 10000);
    ok(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
       "a worker burned 200 ms of CPU and exited");
    crl_cgroup_stats(cg, &s1);
    ok(s1.cpu_ns >= 150000000ull && s1.cpu_ns < 10000000000ull, "cpu_ns counts it (%llu ns)",
       (unsigned long long)s1.cpu_ns);
    ok(s1.memory_peak_bytes >= 30 * MIB, "memory_peak_bytes remembers the 32 MiB (%llu)",
       (unsigned long long)s1.memory_peak_bytes);
    is_int(s1.pids, 0, "pids is 0 once it exited");
out:
    crl_cgroup_kill_all(cg, NULL);
    reap_all(5000);
    release(cg, true);
    crl_cgroup_mgr_free(m);
}

static void test_v1_oom_and_reuse(void)
{
    case_setup();
    struct crl_cgroup_mgr *m = mgr_v1(parent);
    if (!m)
        return;
    struct crl_cgroup *cg = create(m, "oom", 16, 64, 1);
    if (!cg)
        return;
    pid_t w = spawn_in(cg, "e1", w_touch64);
    int st = reap(w, 20000);
    ok(killed(st), "a worker touching 64 MiB under a 16 MiB limit is killed");
    ok(!sh->touched, "before it got all of it");
    struct crl_cgroup_stats s;
    crl_cgroup_stats(cg, &s);
    ok(s.oom_kills >= 1, "oom_kills counts the OOM kill (%llu)", (unsigned long long)s.oom_kills);
    ok(s.memory_peak_bytes >= 15 * MIB, "the peak reached the limit (%llu)",
       (unsigned long long)s.memory_peak_bytes);

    /* A second tenant to leave CPU time and a peak behind, then reuse. */
    release(cg, false);
    cg = create(m, "oom", 256, 64, 1);
    if (!cg)
        goto out;
    pid_t t = spawn_in(cg, "e1", w_tenant);
    reap(t, 10000);
    crl_cgroup_stats(cg, &s);
    ok(s.cpu_ns >= 150000000ull && s.memory_peak_bytes >= 20 * MIB,
       "the tenant left %llu ns of CPU and a %llu byte peak", (unsigned long long)s.cpu_ns,
       (unsigned long long)s.memory_peak_bytes);
    release(cg, false);
    cg = create(m, "oom", 256, 64, 1);
    if (!cg)
        goto out;
    crl_cgroup_stats(cg, &s);
    ok(s.cpu_ns < 20000000ull, "a reused cgroup starts at 0 CPU (%llu ns)",
       (unsigned long long)s.cpu_ns);
    ok(s.memory_peak_bytes < 8 * MIB, "and with its peak reset (%llu)",
       (unsigned long long)s.memory_peak_bytes);
    ok(s.memory_bytes < 8 * MIB, "and the last tenant's charges gone (%llu)",
       (unsigned long long)s.memory_bytes);
    is_int(s.oom_kills, 0, "and no OOM kills of an earlier tenant");
out:
    if (cg)
        release(cg, true);
    crl_cgroup_mgr_free(m);
}

/* Leftovers of a corrald that died: cgroups made by hand, with processes. */
static pid_t fork_into(const char *const *procs_files, size_t n)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        bail_out("pipe2");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        for (size_t i = 0; i < n; i++)
            if (crl_write_file_at(AT_FDCWD, procs_files[i], "0") < 0)
                _exit(100);
        if (write(p[1], "j", 1) != 1)
            _exit(99);
        w_pause();
    }
    close(p[1]);
    char c;
    ssize_t r = read(p[0], &c, 1);
    close(p[0]);
    return r == 1 ? pid : -1;
}

struct leaf_seen {
    char name[16];
    pid_t pid;
    size_t n;
};

static void leaf_cb(const char *leaf, const pid_t *pids, size_t n, void *ctx)
{
    struct leaf_seen *seen = ctx;
    snprintf(seen->name, sizeof(seen->name), "%s", leaf);
    seen->n = n;
    seen->pid = n ? pids[0] : 0;
}

static void test_v1_reconcile(void)
{
    case_setup();
    char dir[512];
    char procs[5][512];
    const char *pp[5];
    for (size_t i = 0; i < 5; i++) {
        snprintf(dir, sizeof(dir), CG "/%s/%s", v1_hier[i], parent_rec);
        mkdir(dir, 0755);
        snprintf(dir, sizeof(dir), CG "/%s/%s/old1", v1_hier[i], parent_rec);
        mkdir(dir, 0755);
        snprintf(dir, sizeof(dir), CG "/%s/%s/old2", v1_hier[i], parent_rec);
        mkdir(dir, 0755);
        snprintf(procs[i], sizeof(procs[i]), CG "/%s/%s/old1/cgroup.procs", v1_hier[i], parent_rec);
        pp[i] = procs[i];
    }
    snprintf(dir, sizeof(dir), CG "/freezer/%s/old1/e7", parent_rec);
    mkdir(dir, 0755);
    pid_t a = fork_into(pp, 5);
    snprintf(procs[2], sizeof(procs[2]), CG "/freezer/%s/old1/e7/cgroup.procs", parent_rec);
    pid_t b = fork_into(pp, 5);
    if (!ok(a > 0 && b > 0, "leftover processes in old1 and its leaf e7"))
        return;
    struct crl_cgroup_mgr *m = mgr_v1(parent_rec);
    if (!m)
        return;
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_cgroup_mgr_reconcile(m, NULL, 0, &e);
    ok(r > 0, "reconcile removes the leftovers (%d)", r);
    if (r < 0)
        diag("%s", e.msg);
    ok(killed(reap(a, 5000)) && killed(reap(b, 5000)), "and kills their processes");
    bool gone = true;
    for (size_t i = 0; i < 5; i++)
        gone = gone && !existsf(CG "/%s/%s/old1", v1_hier[i], parent_rec) &&
               !existsf(CG "/%s/%s/old2", v1_hier[i], parent_rec);
    ok(gone, "no leftover cgroup remains in any hierarchy");
    is_int(crl_cgroup_mgr_reconcile(m, NULL, 0, &e), 0, "a second reconcile finds nothing");
    is_int(crl_cgroup_mgr_remove_parent(m, &e), 0, "remove the parent");
    gone = true;
    for (size_t i = 0; i < 5; i++)
        gone = gone && !existsf(CG "/%s/%s", v1_hier[i], parent_rec);
    ok(gone, "the parent is gone from every hierarchy");
    crl_cgroup_mgr_free(m);
}

/* ---- v2, on the controller-less tree ---- */

static bool wait_file_has(const char *path, const char *text, int timeout_ms)
{
    char buf[512];
    for (int i = 0; i <= timeout_ms; i++) {
        if (crl_read_file_at(AT_FDCWD, path, buf, sizeof(buf)) >= 0 && strstr(buf, text))
            return true;
        sleep_ms(1);
    }
    return false;
}

static void test_v2(void)
{
    if (!have_v2) {
        skip(1, CG "/unified is not a cgroup2 mount");
        return;
    }
    case_setup();
    struct crl_cgroup_mgr *m = mgr_v2(parent);
    if (!ok(m != NULL, "open a v2 manager on %s/unified (allow_missing_controllers)", CG))
        return;
    is_int(crl_cgroup_mgr_version(m), CRL_CGROUP_V2, "it is v2");
    is_str(crl_cgroup_mgr_describe(m), "v2:", "with no controllers");
    struct crl_cgroup *cg = create(m, "sb", 64, 32, 1);
    if (!cg)
        goto out_mgr;
    ok(existsf(CG "/unified/%s/sb", parent), "the cgroup is a directory under the parent");
    int fds[CRL_CGROUP_MAX_FDS], n = 0;
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_cgroup_attach_fds(cg, ".", fds, &n, &e) == 0 && n == 1, "v2 attach gives one fd");
    for (int i = 0; i < n; i++)
        close(fds[i]);
    ok(existsf(CG "/unified/%s/sb/init", parent),
       "init/ is made: processes live in leaves below the controllers");
    pid_t init = spawn_in(cg, ".", w_pause);
    pid_t spare = spawn_in(cg, "e1", w_pause);
    pid_t victim = spawn_in(cg, "e1", w_pause);
    pid_t tree = spawn_in(cg, "e2", w_tree);
    for (int i = 0; i < 2000 && !(sh->pids[1] && sh->pids[2]); i++)
        sleep_ms(1);
    if (!ok(init > 0 && spare > 0 && victim > 0 && tree > 0 && sh->pids[2] > 0,
            "workers in init, e1 (2) and e2 (a daemonising tree)"))
        goto out;
    char path[256], want[256];
    snprintf(want, sizeof(want), "/%s/sb/init", parent);
    ok(proc_cgroup(init, "", path, sizeof(path)) && strcmp(path, want) == 0, "init worker is in %s",
       want);
    is_int(crl_cgroup_count(cg, "."), 1, "count(init)");
    is_int(crl_cgroup_count(cg, "e1"), 2, "count(e1)");
    is_int(crl_cgroup_count(cg, "e2"), 3, "count(e2): the whole tree");

    ok(crl_cgroup_kill_leaf(cg, "e1", spare, &e) == 1, "kill_leaf(e1, spare) signals one");
    ok(killed(reap(victim, 5000)), "the victim died");
    ok(alive(spare), "the spare lives");
    snprintf(path, sizeof(path), CG "/unified/%s/sb/init/e1/cgroup.events", parent);
    ok(wait_file_has(path, "frozen 0", 0), "the leaf is not left frozen after a kill with a spare");
    ok(crl_cgroup_kill_leaf(cg, "e2", 0, &e) >= 1, "kill_leaf(e2) (cgroup.kill)");
    ok(killed(reap(tree, 5000)) && killed(reap(sh->pids[1], 5000)) &&
           killed(reap(sh->pids[2], 5000)),
       "the whole e2 tree died, setsid'd grandchild included");
    ok(alive(init) && alive(spare), "init and the spare live");

    /* freeze via cgroup.freeze */
    memset((void *)sh, 0, sizeof(*sh));
    pid_t w = spawn_in(cg, "e3", w_count);
    for (int i = 0; i < 2000 && sh->counter == 0; i++)
        sleep_ms(1);
    is_int(crl_cgroup_freeze(cg, true, &e), 0, "freeze");
    snprintf(path, sizeof(path), CG "/unified/%s/sb/cgroup.events", parent);
    ok(wait_file_has(path, "frozen 1", 2000), "cgroup.events reports frozen");
    uint64_t c1 = sh->counter;
    sleep_ms(150);
    ok(c1 > 0 && sh->counter == c1, "a frozen worker does not advance");
    is_int(crl_cgroup_freeze(cg, false, &e), 0, "thaw");
    ok(wait_file_has(path, "frozen 0", 2000), "cgroup.events reports thawed");
    sleep_ms(50);
    ok(sh->counter > c1, "the worker counts again");
    struct crl_cgroup_stats s;
    sleep_ms(100);
    crl_cgroup_stats(cg, &s);
    ok(s.cpu_ns > 50000000ull, "cpu_ns comes from cpu.stat even without the cpu controller (%llu)",
       (unsigned long long)s.cpu_ns);

    ok(crl_cgroup_kill_all(cg, &e) >= 1, "kill_all (cgroup.kill on the sandbox)");
    ok(killed(reap(w, 5000)) && killed(reap(init, 5000)) && killed(reap(spare, 5000)),
       "every worker died");
    is_int(crl_cgroup_count(cg, ".") + crl_cgroup_count(cg, "e1") + crl_cgroup_count(cg, "e3"), 0,
           "the leaves are empty");

    /* reuse: a cgroup released frozen starts thawed */
    crl_cgroup_freeze(cg, true, &e);
    ok(release(cg, false), "release for reuse");
    ok(existsf(CG "/unified/%s/sb/init", parent) && !existsf(CG "/unified/%s/sb/init/e1", parent),
       "release removed the exec leaves and kept init/ for reuse");
    cg = create(m, "sb", 64, 32, 1);
    if (cg) {
        char buf[16];
        readf(buf, sizeof(buf), CG "/unified/%s/sb/cgroup.freeze", parent);
        is_int(strtol(buf, NULL, 10), 0, "a reused cgroup is thawed");
    }
out:
    if (cg) {
        crl_cgroup_kill_all(cg, NULL);
        reap_all(5000);
        ok(release(cg, true), "release and remove");
        ok(!existsf(CG "/unified/%s/sb", parent), "the cgroup is gone");
    }
out_mgr:
    crl_cgroup_mgr_free(m);
}

static void test_v2_reconcile(void)
{
    if (!have_v2) {
        skip(1, CG "/unified is not a cgroup2 mount");
        return;
    }
    case_setup();
    char dir[512], procs[512];
    snprintf(dir, sizeof(dir), CG "/unified/%s", parent_rec);
    mkdir(dir, 0755);
    snprintf(dir, sizeof(dir), CG "/unified/%s/old", parent_rec);
    mkdir(dir, 0755);
    snprintf(dir, sizeof(dir), CG "/unified/%s/old/e1", parent_rec);
    mkdir(dir, 0755);
    snprintf(procs, sizeof(procs), CG "/unified/%s/old/e1/cgroup.procs", parent_rec);
    const char *pp[1] = {procs};
    pid_t a = fork_into(pp, 1);
    if (!ok(a > 0, "a leftover process in a v2 leaf"))
        return;
    struct crl_cgroup_mgr *m = mgr_v2(parent_rec);
    if (!m)
        return;
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_cgroup_mgr_reconcile(m, NULL, 0, &e) == 1, "reconcile removes the one leftover cgroup");
    ok(killed(reap(a, 5000)), "and kills its process");
    ok(!existsf(CG "/unified/%s/old", parent_rec), "the leftover is gone");
    is_int(crl_cgroup_mgr_remove_parent(m, &e), 0, "remove the parent");
    ok(!existsf(CG "/unified/%s", parent_rec), "the parent is gone");
    crl_cgroup_mgr_free(m);

    /* A manager refused for lack of controllers should leave nothing behind. */
    struct crl_cgroup_config cfg = {CRL_CGROUP_V2, CG "/unified", parent_rec, false};
    m = NULL;
    e = (struct crl_err)CRL_ERR_INIT;
    ok(crl_cgroup_mgr_open(&cfg, &m, &e) < 0 && e.code == CRL_E_UNAVAILABLE,
       "v2 without memory and pids controllers is refused unless allowed");
    like(e.msg, "does not offer the memory and pids controllers", "saying which are missing");
    bool left = existsf(CG "/unified/%s", parent_rec);
    ok(!left, "a refused open leaves no parent directory behind");
    if (left) {
        snprintf(dir, sizeof(dir), CG "/unified/%s", parent_rec);
        rmdir(dir);
    }
}

/* ---- the run ---- */

/* Remove whatever a failed case left: kill, then rmdir bottom up. */
static void cleanup_parent(const char *par)
{
    struct crl_cgroup_mgr *m = mgr_v1(par);
    struct crl_err e = CRL_ERR_INIT;
    if (m) {
        crl_cgroup_mgr_reconcile(m, NULL, 0, &e);
        crl_cgroup_mgr_remove_parent(m, &e);
        crl_cgroup_mgr_free(m);
    }
    if (have_v2 && (m = mgr_v2(par))) {
        crl_cgroup_mgr_reconcile(m, NULL, 0, &e);
        crl_cgroup_mgr_remove_parent(m, &e);
        crl_cgroup_mgr_free(m);
    }
}

static bool nothing_left(const char *par)
{
    static const char *const all[] = {"memory", "pids",  "freezer", "cpu",     "cpuacct",
                                      "cpuset", "blkio", "devices", "unified", "systemd"};
    bool clean = true;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (existsf(CG "/%s/%s", all[i], par)) {
            diag("left behind: " CG "/%s/%s", all[i], par);
            clean = false;
        }
    return clean;
}

/* A restarted corrald keeps the cgroups of the sandboxes it adopts: the
 * reconcile spares them, their limits and processes, and an adopted one
 * shows its PID 1, its leaves and its frozen state. */
static void test_v1_reconcile_keeps(void)
{
    case_setup();
    struct crl_cgroup_mgr *m = mgr_v1(parent_rec);
    if (!m)
        return;
    struct crl_err e = CRL_ERR_INIT;
    struct crl_cgroup_limits l = {.memory_bytes = 64u << 20, .pids = 50, .cpus = 0.5};
    struct crl_cgroup *s3 = NULL, *s4 = NULL;
    if (!ok(crl_cgroup_create(m, "s3", &l, &s3, &e) == 0 &&
                crl_cgroup_create(m, "s4", &l, &s4, &e) == 0,
            "create s3 and s4")) {
        diag("%s", e.msg);
        return;
    }
    char procs[5][512], leaf[512];
    const char *pp[5], *p4[5];
    char procs4[5][512];
    for (size_t i = 0; i < 5; i++) {
        snprintf(procs[i], sizeof(procs[i]), CG "/%s/%s/s3/cgroup.procs", v1_hier[i], parent_rec);
        snprintf(procs4[i], sizeof(procs4[i]), CG "/%s/%s/s4/cgroup.procs", v1_hier[i], parent_rec);
        pp[i] = procs[i];
        p4[i] = procs4[i];
    }
    pid_t a = fork_into(pp, 5);
    snprintf(leaf, sizeof(leaf), CG "/freezer/%s/s3/e5", parent_rec);
    mkdir(leaf, 0755);
    snprintf(procs[2], sizeof(procs[2]), CG "/freezer/%s/s3/e5/cgroup.procs", parent_rec);
    pid_t b = fork_into(pp, 5);
    pid_t c = fork_into(p4, 5);
    uint64_t cpu_base, oom_base;
    crl_cgroup_bases(s3, &cpu_base, &oom_base);
    free(s3); /* what a corrald that died held: nothing on disk */
    free(s4);
    const char *keep[] = {"s3"};
    int r = crl_cgroup_mgr_reconcile(m, keep, 1, &e);
    is_int(r, 1, "the reconcile removes s4 alone");
    ok(killed(reap(c, 5000)), "and kills s4's process");
    ok(alive(a) && alive(b), "s3's processes live on");
    ok(existsf(CG "/memory/%s/s3", parent_rec) && !existsf(CG "/memory/%s/s4", parent_rec),
       "s3 is kept, s4 is gone");
    char buf[64] = "";
    char lim[512];
    snprintf(lim, sizeof(lim), CG "/memory/%s/s3/memory.limit_in_bytes", parent_rec);
    crl_read_file_at(AT_FDCWD, lim, buf, sizeof(buf));
    is_int(strtoll(buf, NULL, 10), 64 << 20, "its memory limit is as it was");

    struct crl_cgroup *cg = NULL;
    ok(crl_cgroup_adopt(m, "s9", 0, 0, &cg, &e) < 0, "a cgroup that is not there is not adopted");
    if (!ok(crl_cgroup_adopt(m, "s3", cpu_base, oom_base, &cg, &e) == 0, "adopt s3")) {
        diag("%s", e.msg);
        return;
    }
    ok(crl_cgroup_has_pid(cg, a) && !crl_cgroup_has_pid(cg, b) && !crl_cgroup_has_pid(cg, c),
       "its PID 1's cgroup holds a, not the leaf's b, nor s4's c");
    struct leaf_seen seen = {.n = 99};
    crl_cgroup_leaves(cg, leaf_cb, &seen);
    ok(strcmp(seen.name, "e5") == 0 && seen.n == 1 && seen.pid == b,
       "its one leaf e5 holds b (%s, %zu)", seen.name, seen.n);
    ok(!crl_cgroup_frozen(cg), "not frozen");
    ok(crl_cgroup_freeze(cg, true, &e) == 0 && crl_cgroup_frozen(cg), "frozen once frozen");
    crl_cgroup_freeze(cg, false, &e);
    crl_cgroup_kill_all(cg, &e);
    ok(killed(reap(a, 5000)) && killed(reap(b, 5000)), "killed through the adopted cgroup");
    crl_cgroup_release(cg, false, NULL);
    ok(crl_cgroup_mgr_reconcile(m, NULL, 0, &e) >= 1, "a reconcile keeping nothing removes s3");
    is_int(crl_cgroup_mgr_remove_parent(m, &e), 0, "remove the parent");
    crl_cgroup_mgr_free(m);
}

int main(void)
{
    if (geteuid() != 0)
        skip_all("cgroup tests need root");
    static const char *const need[] = {"memory", "pids", "freezer"};
    for (size_t i = 0; i < 3; i++) {
        char p[128], why[160];
        snprintf(p, sizeof(p), CG "/%s", need[i]);
        if (!is_fs(p, CGROUP_SUPER_MAGIC)) {
            snprintf(why, sizeof(why), "no cgroup v1 %s hierarchy at %s", need[i], p);
            skip_all(why);
        }
    }
    have_v2 = is_fs(CG "/unified", CGROUP2_SUPER_MAGIC);
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        bail_out("mmap");
    snprintf(parent, sizeof(parent), "corral-unittest-%d", (int)getpid());
    snprintf(parent_rec, sizeof(parent_rec), "corral-unittest-%d-rec", (int)getpid());

    TAP_RUN(test_v1_open, 30);
    TAP_RUN(test_v1_create_limits, 30);
    TAP_RUN(test_v1_attach_count, 30);
    TAP_RUN(test_v1_join_and_own_dirs, 30);
    TAP_RUN(test_v1_kill_leaf, 30);
    TAP_RUN(test_v1_tidy, 10);
    TAP_RUN(test_v1_freeze, 30);
    TAP_RUN(test_v1_stats, 30);
    TAP_RUN(test_v1_oom_and_reuse, 60);
    TAP_RUN(test_v1_reconcile, 30);
    TAP_RUN(test_v1_reconcile_keeps, 30);
    TAP_RUN(test_v2, 30);
    TAP_RUN(test_v2_reconcile, 30);

    cleanup_parent(parent);
    cleanup_parent(parent_rec);
    ok(nothing_left(parent) && nothing_left(parent_rec), "nothing of this test remains under " CG);
    return done_testing();
}
