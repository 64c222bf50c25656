#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"

#define V1_MAX 5
/* The v1 controllers we use.  memory, pids and freezer are required. */
static const char *const v1_controllers[V1_MAX] = {"memory", "pids", "freezer", "cpu", "cpuacct"};
enum { H_MEMORY, H_PIDS, H_FREEZER, H_CPU, H_CPUACCT };

struct crl_cgroup_mgr {
    enum crl_cgroup_version version;
    int nh;
    int parent_fd[V1_MAX]; /* v1: <root>/<ctl>/<parent> per hierarchy (-1: absent); v2: [0] */
    char parent_path[V1_MAX][512];
    bool created[V1_MAX]; /* we made the parent dir: remove it if opening fails */
    bool v2_memory, v2_pids, v2_cpu;
    char desc[160];
    char root[512];     /* where the hierarchies are mounted */
    int own_fd[V1_MAX]; /* the cgroup we run in, per hierarchy (crl_cgroup_mgr_own_dirs) */
    bool own_open;
};

/* A sandbox's cgroup holds no descriptor of its directories: corrald runs
 * thousands of sandboxes against its RLIMIT_NOFILE, and an openat below the
 * hierarchy's parent costs microseconds (cg_open()).  The one exception is
 * v2's memory.peak, whose reset is per open file. */
struct crl_cgroup {
    struct crl_cgroup_mgr *m;
    char name[64];
    uint64_t cpu_base_ns;
    uint64_t oom_base;
    int peak_fd; /* v2: memory.peak, reset for this fd */
};

static int write_at(int dirfd, const char *file, const char *value, struct crl_err *err)
{
    if (crl_write_file_at(dirfd, file, value) < 0)
        return crl_err_sys(err, errno, "writing '%s' to %s", value, file);
    return 0;
}

static uint64_t read_u64_at(int dirfd, const char *file)
{
    char buf[64];
    if (crl_read_file_at(dirfd, file, buf, sizeof(buf)) < 0)
        return 0;
    return strtoull(buf, NULL, 10);
}

/* "key value" lines (memory.events, cpu.stat, memory.oom_control). */
static uint64_t read_keyed_at(int dirfd, const char *file, const char *key)
{
    char buf[4096];
    if (crl_read_file_at(dirfd, file, buf, sizeof(buf)) < 0)
        return 0;
    size_t kl = strlen(key);
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ')
            return strtoull(line + kl + 1, NULL, 10);
        line = nl ? nl + 1 : NULL;
    }
    return 0;
}

static bool is_fs(const char *path, long magic)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

/* ---- the manager ---- */

static int open_parent(struct crl_cgroup_mgr *m, int i, const char *path, struct crl_err *err)
{
    if (mkdir(path, 0755) == 0)
        m->created[i] = true;
    else if (errno != EEXIST)
        return crl_err_sys(err, errno, "mkdir %s", path);
    m->parent_fd[i] = crl_openat(AT_FDCWD, path, O_RDONLY | O_DIRECTORY, 0);
    if (m->parent_fd[i] < 0)
        return crl_err_sys(err, errno, "open %s", path);
    snprintf(m->parent_path[i], sizeof(m->parent_path[i]), "%s", path);
    return 0;
}

static int open_v1(struct crl_cgroup_mgr *m, const char *root, const char *parent,
                   struct crl_err *err)
{
    char seen[V1_MAX][512];
    int nseen = 0;
    size_t off = (size_t)snprintf(m->desc, sizeof(m->desc), "v1:");
    for (int i = 0; i < V1_MAX; i++) {
        char mnt[512], real[512];
        snprintf(mnt, sizeof(mnt), "%s/%s", root, v1_controllers[i]);
        if (!realpath(mnt, real) || !is_fs(real, CGROUP_SUPER_MAGIC)) {
            if (i <= H_FREEZER)
                return crl_err_set(err, CRL_E_UNAVAILABLE,
                                   "cgroup v1 controller '%s' is not mounted at %s",
                                   v1_controllers[i], mnt);
            continue;
        }
        /* cpu and cpuacct are often one hierarchy ("cpu,cpuacct"). */
        bool dup = false;
        for (int k = 0; k < nseen && !dup; k++)
            dup = strcmp(seen[k], real) == 0;
        if (dup)
            continue;
        snprintf(seen[nseen++], sizeof(seen[0]), "%s", real);
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", real, parent);
        if (open_parent(m, i, path, err) < 0)
            return -1;
        off += (size_t)snprintf(m->desc + off, sizeof(m->desc) - off, "%s%s", off > 3 ? "," : " ",
                                v1_controllers[i]);
    }
    m->nh = V1_MAX;
    /* Hierarchical memory accounting, so leaves count against the sandbox. */
    crl_write_file_at(m->parent_fd[H_MEMORY], "memory.use_hierarchy", "1");
    return 0;
}

static int enable_v2_controllers(struct crl_cgroup_mgr *m, const char *root, const char *parent,
                                 bool allow_missing, struct crl_err *err)
{
    char avail[256] = "";
    cleanup_close int rootfd = crl_openat(AT_FDCWD, root, O_RDONLY | O_DIRECTORY, 0);
    if (rootfd < 0)
        return crl_err_sys(err, errno, "open %s", root);
    crl_read_file_at(rootfd, "cgroup.controllers", avail, sizeof(avail));
    static const char *const want[] = {"memory", "pids", "cpu"};
    bool *have[] = {&m->v2_memory, &m->v2_pids, &m->v2_cpu};
    size_t off = (size_t)snprintf(m->desc, sizeof(m->desc), "v2:");
    for (size_t i = 0; i < CRL_ARRAY_SIZE(want); i++) {
        /* word match in the space-separated list */
        const char *p = avail;
        size_t wl = strlen(want[i]);
        while ((p = strstr(p, want[i])) &&
               !((p == avail || p[-1] == ' ') && (p[wl] == 0 || p[wl] == ' ' || p[wl] == '\n')))
            p += wl;
        if (!p)
            continue;
        char ctl[32];
        snprintf(ctl, sizeof(ctl), "+%s", want[i]);
        if (crl_write_file_at(rootfd, "cgroup.subtree_control", ctl) < 0 && errno != EBUSY)
            continue;
        if (crl_write_file_at(m->parent_fd[0], "cgroup.subtree_control", ctl) < 0)
            continue;
        *have[i] = true;
        off += (size_t)snprintf(m->desc + off, sizeof(m->desc) - off, " %s", want[i]);
    }
    (void)parent;
    if ((!m->v2_memory || !m->v2_pids) && !allow_missing)
        return crl_err_set(err, CRL_E_UNAVAILABLE,
                           "cgroup v2 at %s does not offer the memory and pids controllers "
                           "(available: '%s'); sandboxes could not be limited",
                           root, avail);
    return 0;
}

int crl_cgroup_mgr_open(const struct crl_cgroup_config *cfg, struct crl_cgroup_mgr **out,
                        struct crl_err *err)
{
    const char *root = cfg->mount_root ? cfg->mount_root : "/sys/fs/cgroup";
    const char *parent = cfg->parent ? cfg->parent : "corral";
    struct crl_cgroup_mgr *m = calloc(1, sizeof(*m));
    if (!m)
        return crl_err_sys(err, ENOMEM, "cgroup manager");
    for (int i = 0; i < V1_MAX; i++)
        m->parent_fd[i] = m->own_fd[i] = -1;
    snprintf(m->root, sizeof(m->root), "%s", root);
    enum crl_cgroup_version v = cfg->version;
    if (v == CRL_CGROUP_AUTO) {
        char mem[512];
        snprintf(mem, sizeof(mem), "%s/memory", root);
        if (is_fs(root, CGROUP2_SUPER_MAGIC))
            v = CRL_CGROUP_V2;
        else if (is_fs(mem, CGROUP_SUPER_MAGIC))
            v = CRL_CGROUP_V1; /* hybrid hosts: controllers live in v1 */
        else {
            free(m);
            return crl_err_set(err, CRL_E_UNAVAILABLE,
                               "no usable cgroup hierarchy at %s (neither cgroup2 nor a v1 "
                               "memory controller)",
                               root);
        }
    }
    m->version = v;
    int r;
    if (v == CRL_CGROUP_V1) {
        r = open_v1(m, root, parent, err);
    } else {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", root, parent);
        m->nh = 1;
        r = open_parent(m, 0, path, err);
        if (r == 0)
            r = enable_v2_controllers(m, root, parent, cfg->allow_missing_controllers, err);
    }
    if (r < 0) {
        for (int i = 0; i < V1_MAX; i++)
            if (m->created[i])
                rmdir(m->parent_path[i]);
        crl_cgroup_mgr_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

void crl_cgroup_mgr_free(struct crl_cgroup_mgr *m)
{
    if (!m)
        return;
    for (int i = 0; i < V1_MAX; i++) {
        if (m->parent_fd[i] >= 0)
            close(m->parent_fd[i]);
        if (m->own_fd[i] >= 0)
            close(m->own_fd[i]);
    }
    free(m);
}

/* The line of /proc/self/cgroup for hierarchy h (v1: the one whose
 * controllers include h's; v2: "0::"), its path into path. */
static int own_path(const char *procs, int h, bool v2, char *path, size_t cap)
{
    for (const char *line = procs; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c2) {
            bool match = false;
            if (v2)
                match = c2 == c1 + 1 && strncmp(line, "0:", 2) == 0;
            else
                for (const char *t = c1 + 1; t < c2 && !match;) {
                    size_t tl = strcspn(t, ",:");
                    match =
                        tl == strlen(v1_controllers[h]) && strncmp(t, v1_controllers[h], tl) == 0;
                    t += tl + 1;
                }
            if (match) {
                int n = snprintf(path, cap, "%.*s", (int)(len - (size_t)(c2 + 1 - line)), c2 + 1);
                return n > 0 && (size_t)n < cap ? 0 : -1;
            }
        }
        line += len + (nl ? 1 : 0);
    }
    return -1;
}

/* The v1 hierarchies a process joins after the one it is killed and
 * frozen in (the freezer), in order: those there and not shared with a
 * twin.  Their number (none on v2). */
static int v1_others(const struct crl_cgroup_mgr *m, int *hs)
{
    static const int others[] = {H_MEMORY, H_PIDS, H_CPU, H_CPUACCT};
    int n = 0;
    if (m->version == CRL_CGROUP_V1)
        for (size_t i = 0; i < CRL_ARRAY_SIZE(others); i++)
            if (m->parent_fd[others[i]] >= 0) /* absent, or shared with its twin */
                hs[n++] = others[i];
    return n;
}

int crl_cgroup_mgr_own_dirs(struct crl_cgroup_mgr *m, int *fds, struct crl_err *err)
{
    if (!m->own_open) {
        char procs[4096], rel[1024], path[2048];
        if (crl_read_file_at(AT_FDCWD, "/proc/self/cgroup", procs, sizeof(procs)) < 0)
            return crl_err_sys(err, errno, "reading /proc/self/cgroup");
        for (int h = 0; h < m->nh; h++) {
            if (m->parent_fd[h] < 0 || m->own_fd[h] >= 0) /* (opened by a try that failed later) */
                continue;
            bool v2 = m->version == CRL_CGROUP_V2;
            if (own_path(procs, h, v2, rel, sizeof(rel)) < 0)
                return crl_err_set(err, CRL_E_INTERNAL,
                                   "no cgroup of ours for %s in /proc/self/cgroup",
                                   v2 ? "cgroup2" : v1_controllers[h]);
            snprintf(path, sizeof(path), "%s%s%s%s", m->root, v2 ? "" : "/",
                     v2 ? "" : v1_controllers[h], rel);
            if ((m->own_fd[h] = crl_openat(AT_FDCWD, path, O_RDONLY | O_DIRECTORY, 0)) < 0)
                return crl_err_sys(err, errno, "open %s", path);
        }
        m->own_open = true;
    }
    /* in crl_cgroup_join_dirs' order: the one a process is killed and
     * frozen in first */
    int hs[CRL_CGROUP_MAX_FDS], n_others = v1_others(m, hs), n = 0;
    fds[n++] = m->own_fd[m->version == CRL_CGROUP_V2 ? 0 : H_FREEZER];
    for (int i = 0; i < n_others; i++)
        fds[n++] = m->own_fd[hs[i]];
    return n;
}

enum crl_cgroup_version crl_cgroup_mgr_version(const struct crl_cgroup_mgr *m)
{
    return m->version;
}

const char *crl_cgroup_mgr_describe(const struct crl_cgroup_mgr *m)
{
    return m->desc;
}

/* ---- killing and removing trees ---- */

/* The pids one kill_tree() has signalled: an open-addressing set, so a
 * sweep can tell a process forked meanwhile from one already dying. */
struct pidset {
    pid_t *v;
    size_t cap, n;
};

static bool pidset_add(struct pidset *s, pid_t pid)
{
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        pid_t *v = calloc(cap, sizeof(pid_t));
        if (!v)
            return true; /* out of memory: treat as new, kill again */
        for (size_t i = 0; i < s->cap; i++)
            if (s->v[i])
                for (size_t k = (size_t)s->v[i] * 2654435761u % cap;; k = (k + 1) % cap)
                    if (!v[k]) {
                        v[k] = s->v[i];
                        break;
                    }
        free(s->v);
        s->v = v;
        s->cap = cap;
    }
    for (size_t k = (size_t)pid * 2654435761u % s->cap;; k = (k + 1) % s->cap) {
        if (s->v[k] == pid)
            return false;
        if (!s->v[k]) {
            s->v[k] = pid;
            s->n++;
            return true;
        }
    }
}

/* Send `sig` to every process listed in cgfd's cgroup.procs but `spare` and
 * those in `seen`.  The whole file is read (a large cgroup lists thousands) and
 * only complete lines are acted on: a number cut short would be some other
 * process.  Returns how many new ones were signalled. */
static int kill_procs_at(int cgfd, int sig, pid_t spare, struct pidset *seen)
{
    cleanup_close int fd = crl_openat(cgfd, "cgroup.procs", O_RDONLY, 0);
    if (fd < 0)
        return 0;
    char buf[16384];
    size_t have = 0;
    int count = 0;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        char *line = buf, *nl;
        while ((nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
            *nl = 0;
            char *end;
            long pid = strtol(line, &end, 10);
            if (end != line && *end == 0 && pid > 0 && pid != spare &&
                pidset_add(seen, (pid_t)pid) && kill((pid_t)pid, sig) == 0)
                count++;
            line = nl + 1;
        }
        have -= (size_t)(line - buf);
        memmove(buf, line, have);
        if (have == sizeof(buf))
            have = 0; /* no pid is that long */
    }
    return count;
}

/* Call fn(parent_fd, name, ctx) for each child cgroup (subdirectory) of
 * the cgroup at fd, until one returns nonzero, which is returned; -1 if the
 * directory cannot be read. */
typedef int (*child_fn)(int parent_fd, const char *name, void *ctx);

static int each_child(int fd, child_fn fn, void *ctx)
{
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        return -1;
    }
    rewinddir(d); /* the dup shares its offset with fd */
    struct dirent *de;
    int r = 0;
    while (!r && (de = readdir(d)))
        if (de->d_type == DT_DIR && de->d_name[0] != '.')
            r = fn(fd, de->d_name, ctx);
    closedir(d);
    return r;
}

/* Call fn(child_fd, ctx) on the child `name` of parent_fd, opened. */
static int with_child(int parent_fd, const char *name, int (*fn)(int fd, void *ctx), void *ctx)
{
    cleanup_close int fd = crl_openat(parent_fd, name, O_RDONLY | O_DIRECTORY, 0);
    return fd < 0 ? 0 : fn(fd, ctx);
}

struct kill_ctx {
    int sig;
    pid_t spare;
    int count;
    struct pidset seen;
};

static int kill_tree_procs_fn(int fd, void *ctx);

static int kill_child(int parent_fd, const char *name, void *ctx)
{
    return with_child(parent_fd, name, kill_tree_procs_fn, ctx);
}

static int kill_tree_procs_fn(int fd, void *ctx)
{
    struct kill_ctx *k = ctx;
    k->count += kill_procs_at(fd, k->sig, k->spare, &k->seen);
    each_child(fd, kill_child, k);
    return 0;
}

/* Kill every process in fd's cgroup and all below it, once each. */
static int kill_tree_procs(int cgfd, pid_t spare)
{
    struct kill_ctx k = {.sig = SIGKILL, .spare = spare};
    kill_tree_procs_fn(cgfd, &k);
    free(k.seen.v);
    return k.count;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* v1 freezer: freeze or thaw a tree, waiting for FROZEN. */
static int v1_freeze_at(int dirfd, const char *state)
{
    if (crl_write_file_at(dirfd, "freezer.state", state) < 0)
        return -1;
    if (strcmp(state, "FROZEN") != 0)
        return 0;
    for (int i = 0; i < 2000; i++) {
        char buf[32];
        if (crl_read_file_at(dirfd, "freezer.state", buf, sizeof(buf)) < 0)
            return -1;
        if (strncmp(buf, "FROZEN", 6) == 0)
            return 0;
        sleep_ms(1);
    }
    errno = ETIMEDOUT;
    return -1;
}

/* Kill a cgroup's tree.  v2's cgroup.kill does it atomically when nothing
 * is spared; otherwise sweep: kill every listed process, again, until a
 * sweep finds none.  A process forked between a read and its parent's kill
 * is caught by the next sweep, and a killed process forks no more, so the
 * sweeps converge (a freezer would too, but v1's makes the caller wait
 * milliseconds on the event loop, longer for a tree a sandbox keeps busy). */
static int kill_tree(struct crl_cgroup_mgr *m, int fd, pid_t spare)
{
    if (m->version == CRL_CGROUP_V2 && !spare && crl_write_file_at(fd, "cgroup.kill", "1") == 0)
        return 1;
    struct kill_ctx k = {.sig = SIGKILL, .spare = spare};
    for (int sweep = 0; sweep < 64; sweep++) {
        int before = k.count;
        kill_tree_procs_fn(fd, &k);
        if (k.count == before)
            break;
    }
    free(k.seen.v);
    /* A frozen task dies of SIGKILL only once thawed (v1; v2 kills it
     * anyway).  Not a freezer hierarchy: the write fails, harmlessly. */
    if (m->version == CRL_CGROUP_V1)
        crl_write_file_at(fd, "freezer.state", "THAWED");
    return k.count;
}

static int remove_child(int parent_fd, const char *name, void *ctx);

struct remove_ctx {
    bool wait;
    int err; /* the first failure's errno, 0 if none */
};

/* rmdir a cgroup and everything below it, bottom up.  A cgroup whose last
 * process has just died stays busy for a moment: with `wait`, retry for up
 * to a second (start-up and shutdown); without, fail with EBUSY at once
 * (the event loop, which retries on a timer). */
static int remove_tree(int parent_fd, const char *name, bool wait)
{
    cleanup_close int fd = crl_openat(parent_fd, name, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    struct remove_ctx below = {.wait = wait};
    each_child(fd, remove_child, &below);
    for (int i = 0; i < (wait ? 500 : 1); i++) {
        if (unlinkat(parent_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
            errno = below.err;
            return below.err ? -1 : 0;
        }
        if (errno != EBUSY)
            return -1;
        if (wait)
            sleep_ms(2);
    }
    return -1;
}

/* each_child callback: remove the child's tree, remember failure, go on. */
static int remove_child(int parent_fd, const char *name, void *ctx)
{
    struct remove_ctx *r = ctx;
    if (remove_tree(parent_fd, name, r->wait) < 0 && !r->err)
        r->err = errno;
    return 0;
}

struct reconcile_ctx {
    struct crl_cgroup_mgr *m;
    bool killer; /* the hierarchy that kills atomically: the freezer, or v2 */
    int removed, failed;
    const char *const *keep; /* names left alone: adopted sandboxes' */
    size_t n_keep;
};

static bool kept(const struct reconcile_ctx *rc, const char *name)
{
    for (size_t i = 0; i < rc->n_keep; i++)
        if (strcmp(rc->keep[i], name) == 0)
            return true;
    return false;
}

static int reconcile_kill(int fd, void *ctx)
{
    struct reconcile_ctx *rc = ctx;
    /* Other v1 hierarchies may still hold a process someone moved there alone. */
    if (rc->killer)
        kill_tree(rc->m, fd, 0);
    else
        kill_tree_procs(fd, 0);
    return 0;
}

static int reconcile_kill_child(int parent_fd, const char *name, void *ctx)
{
    return kept(ctx, name) ? 0 : with_child(parent_fd, name, reconcile_kill, ctx);
}

static int reconcile_remove_child(int parent_fd, const char *name, void *ctx)
{
    struct reconcile_ctx *rc = ctx;
    if (kept(rc, name))
        return 0;
    if (remove_tree(parent_fd, name, true) < 0)
        rc->failed++;
    else if (rc->killer) /* count each sandbox cgroup once */
        rc->removed++;
    return 0;
}

int crl_cgroup_mgr_reconcile(struct crl_cgroup_mgr *m, const char *const *keep, size_t n_keep,
                             struct crl_err *err)
{
    struct reconcile_ctx rc = {.m = m, .keep = keep, .n_keep = n_keep};
    int killer = m->version == CRL_CGROUP_V2 ? 0 : H_FREEZER;
    /* Kill first everywhere (the freezer or cgroup.kill stops forks), then remove. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < m->nh; i++) {
            if (m->parent_fd[i] < 0)
                continue;
            rc.killer = i == killer;
            each_child(m->parent_fd[i], pass == 0 ? reconcile_kill_child : reconcile_remove_child,
                       &rc);
        }
    if (rc.failed)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%d leftover cgroup(s) under %s could not be removed", rc.failed,
                           m->parent_path[0]);
    return rc.removed;
}

int crl_cgroup_mgr_remove_parent(struct crl_cgroup_mgr *m, struct crl_err *err)
{
    for (int i = 0; i < m->nh; i++) {
        if (m->parent_fd[i] < 0)
            continue;
        if (rmdir(m->parent_path[i]) < 0 && errno != ENOENT)
            return crl_err_sys(err, errno, "rmdir %s", m->parent_path[i]);
    }
    return 0;
}

/* ---- a sandbox's cgroup ---- */

/* The hierarchy whose parent holds controller h's files: cpuacct is cpu's
 * where the two are one hierarchy. */
static int hier(const struct crl_cgroup_mgr *m, int h)
{
    return m->version == CRL_CGROUP_V1 && h == H_CPUACCT && m->parent_fd[H_CPUACCT] < 0 ? H_CPU : h;
}

/* The sandbox's cgroup directory in hierarchy h (v2: 0), or `sub` below it,
 * opened for the caller.  -1 with errno (ENOENT for a hierarchy this host
 * lacks). */
static int cg_open(const struct crl_cgroup *cg, int h, const char *sub)
{
    const struct crl_cgroup_mgr *m = cg->m;
    h = hier(m, h);
    if (m->parent_fd[h] < 0) {
        errno = ENOENT;
        return -1;
    }
    char path[160];
    snprintf(path, sizeof(path), "%s%s%s", cg->name, sub ? "/" : "", sub ? sub : "");
    return crl_openat(m->parent_fd[h], path, O_RDONLY | O_DIRECTORY, 0);
}

/* The directory init lives in, below which exec leaves go (the sandbox's
 * cgroup in the freezer hierarchy on v1, its init/ on v2), or with `leaf`
 * that leaf, opened for the caller. */
static int leaf_open(const struct crl_cgroup *cg, const char *leaf)
{
    bool v1 = cg->m->version == CRL_CGROUP_V1;
    char sub[128];
    snprintf(sub, sizeof(sub), "%s%s%s", v1 ? "" : "init", !v1 && leaf ? "/" : "",
             leaf ? leaf : "");
    return cg_open(cg, v1 ? H_FREEZER : 0, sub[0] ? sub : NULL);
}

static int set_limits(struct crl_cgroup *cg, const struct crl_cgroup_limits *l, struct crl_err *err)
{
    struct crl_cgroup_mgr *m = cg->m;
    char v[64];
    if (m->version == CRL_CGROUP_V1) {
        cleanup_close int mem = cg_open(cg, H_MEMORY, NULL), pids = cg_open(cg, H_PIDS, NULL),
                          cpu = cg_open(cg, H_CPU, NULL);
        if (mem < 0 || pids < 0)
            return crl_err_sys(err, errno, "open the memory and pids cgroups");
        snprintf(v, sizeof(v), "%" PRIu64, l->memory_bytes);
        /* memsw may never be below the memory limit: lift it, set, lower it.
         * memsw exists where swap accounting does; no swap beyond the limit. */
        bool memsw = crl_write_file_at(mem, "memory.memsw.limit_in_bytes", "-1") == 0;
        if (write_at(mem, "memory.limit_in_bytes", v, err) < 0)
            return -1;
        if (memsw && write_at(mem, "memory.memsw.limit_in_bytes", v, err) < 0)
            return -1;
        snprintf(v, sizeof(v), "%u", l->pids);
        if (write_at(pids, "pids.max", v, err) < 0)
            return -1;
        if (cpu >= 0) {
            snprintf(v, sizeof(v), "%ld", (long)(l->cpus * 100000));
            if (write_at(cpu, "cpu.cfs_period_us", "100000", err) < 0 ||
                write_at(cpu, "cpu.cfs_quota_us", v, err) < 0)
                return -1;
        }
        return 0;
    }
    cleanup_close int fd = cg_open(cg, 0, NULL);
    if (fd < 0)
        return crl_err_sys(err, errno, "open the cgroup");
    if (m->v2_memory) {
        snprintf(v, sizeof(v), "%" PRIu64, l->memory_bytes);
        if (write_at(fd, "memory.max", v, err) < 0)
            return -1;
        crl_write_file_at(fd, "memory.swap.max", "0");
    }
    if (m->v2_pids) {
        snprintf(v, sizeof(v), "%u", l->pids);
        if (write_at(fd, "pids.max", v, err) < 0)
            return -1;
    }
    if (m->v2_cpu) {
        snprintf(v, sizeof(v), "%ld 100000", (long)(l->cpus * 100000));
        if (write_at(fd, "cpu.max", v, err) < 0)
            return -1;
    }
    return 0;
}

/* From the directory of the cpu accounting (v1: cpuacct; v2: the cgroup). */
static uint64_t read_cpu_ns_at(const struct crl_cgroup_mgr *m, int fd)
{
    if (fd < 0)
        return 0;
    return m->version == CRL_CGROUP_V1 ? read_u64_at(fd, "cpuacct.usage")
                                       : read_keyed_at(fd, "cpu.stat", "usage_usec") * 1000;
}

/* From the directory of the memory controller (v1: memory; v2: the cgroup). */
static uint64_t read_oom_kills_at(const struct crl_cgroup_mgr *m, int fd)
{
    return read_keyed_at(fd, m->version == CRL_CGROUP_V1 ? "memory.oom_control" : "memory.events",
                         "oom_kill");
}

static uint64_t read_cpu_ns(struct crl_cgroup *cg)
{
    cleanup_close int fd = cg_open(cg, cg->m->version == CRL_CGROUP_V1 ? H_CPUACCT : 0, NULL);
    return read_cpu_ns_at(cg->m, fd);
}

static uint64_t read_oom_kills(struct crl_cgroup *cg)
{
    cleanup_close int fd = cg_open(cg, cg->m->version == CRL_CGROUP_V1 ? H_MEMORY : 0, NULL);
    return read_oom_kills_at(cg->m, fd);
}

int crl_cgroup_create(struct crl_cgroup_mgr *m, const char *name,
                      const struct crl_cgroup_limits *limits, struct crl_cgroup **out,
                      struct crl_err *err)
{
    struct crl_cgroup *cg = calloc(1, sizeof(*cg));
    if (!cg)
        return crl_err_sys(err, ENOMEM, "cgroup");
    cg->m = m;
    cg->peak_fd = -1;
    snprintf(cg->name, sizeof(cg->name), "%s", name);
    bool reused = false;
    for (int i = 0; i < m->nh; i++) {
        if (m->parent_fd[i] < 0)
            continue;
        if (mkdirat(m->parent_fd[i], name, 0755) < 0) {
            if (errno != EEXIST) {
                crl_err_sys(err, errno, "mkdir %s/%s", m->parent_path[i], name);
                goto fail;
            }
            reused = true;
        }
    }
    if (m->version == CRL_CGROUP_V1) {
        cleanup_close int mem = cg_open(cg, H_MEMORY, NULL), acct = cg_open(cg, H_CPUACCT, NULL),
                          frz = cg_open(cg, H_FREEZER, NULL);
        if (reused) {
            /* The last tenant's peaks go.  Its page-cache charges (image
             * files it read first) stay: force_empty would evict those pages
             * from the host's cache and the next sandbox would read them from
             * disk again (measured: 2% of a create-exec-destroy cycle's CPU). */
            crl_write_file_at(mem, "memory.max_usage_in_bytes", "0");
            if (acct >= 0)
                crl_write_file_at(acct, "cpuacct.usage", "0");
        }
        if (v1_freeze_at(frz, "THAWED") < 0 && errno != ENOENT) {
            crl_err_sys(err, errno, "thaw %s", name);
            goto fail;
        }
    } else {
        cleanup_close int fd = cg_open(cg, 0, NULL);
        if (fd < 0) {
            crl_err_sys(err, errno, "open %s/%s", m->parent_path[0], name);
            goto fail;
        }
        if (reused)
            crl_write_file_at(fd, "cgroup.freeze", "0");
        /* Controllers for the leaves below. */
        char ctl[64] = "";
        size_t off = 0;
        if (m->v2_memory)
            off += (size_t)snprintf(ctl + off, sizeof(ctl) - off, "+memory ");
        if (m->v2_pids)
            off += (size_t)snprintf(ctl + off, sizeof(ctl) - off, "+pids ");
        if (m->v2_cpu)
            off += (size_t)snprintf(ctl + off, sizeof(ctl) - off, "+cpu ");
        if (off && crl_write_file_at(fd, "cgroup.subtree_control", ctl) < 0) {
            crl_err_sys(err, errno, "enabling controllers in %s", name);
            goto fail;
        }
        /* With controllers on, processes may only live in leaves ("no
         * internal processes"): the sandbox's init lives in init/, with its
         * cgroup namespace rooted there, and exec leaves go below it. */
        if (mkdirat(fd, "init", 0755) < 0 && errno != EEXIST) {
            crl_err_sys(err, errno, "mkdir %s/init", name);
            goto fail;
        }
        if (m->v2_memory) {
            cg->peak_fd = crl_openat(fd, "memory.peak", O_RDWR, 0);
            /* Since 6.12 a write resets the peak as seen through this fd. */
            if (cg->peak_fd >= 0 && write(cg->peak_fd, "reset", 5) < 0 && reused) {
                close(cg->peak_fd);
                cg->peak_fd = -1;
            }
        }
    }
    if (set_limits(cg, limits, err) < 0)
        goto fail;
    cg->cpu_base_ns = m->version == CRL_CGROUP_V2 ? read_cpu_ns(cg) : 0;
    cg->oom_base = read_oom_kills(cg);
    *out = cg;
    return 0;
fail:
    crl_err_prefix(err, "cgroup %s", name);
    crl_cgroup_release(cg, !reused, NULL);
    return -1;
}

const char *crl_cgroup_name(const struct crl_cgroup *cg)
{
    return cg->name;
}

int crl_cgroup_adopt(struct crl_cgroup_mgr *m, const char *name, uint64_t cpu_base_ns,
                     uint64_t oom_base, struct crl_cgroup **out, struct crl_err *err)
{
    struct crl_cgroup *cg = calloc(1, sizeof(*cg));
    if (!cg)
        return crl_err_sys(err, ENOMEM, "cgroup");
    cg->m = m;
    cg->peak_fd = -1;
    cg->cpu_base_ns = cpu_base_ns;
    cg->oom_base = oom_base;
    snprintf(cg->name, sizeof(cg->name), "%s", name);
    for (int i = 0; i < m->nh; i++) {
        if (m->parent_fd[i] < 0)
            continue;
        struct stat st;
        if (fstatat(m->parent_fd[i], name, &st, 0) < 0 || !S_ISDIR(st.st_mode)) {
            crl_err_sys(err, errno ? errno : ENOTDIR, "cgroup %s/%s", m->parent_path[i], name);
            free(cg);
            return -1;
        }
    }
    /* v2's peak as seen through a new fd is the cgroup's whole life's:
     * no reset, the sandbox's peak is its own. */
    if (m->version == CRL_CGROUP_V2 && m->v2_memory) {
        cleanup_close int fd = cg_open(cg, 0, NULL);
        cg->peak_fd = fd < 0 ? -1 : crl_openat(fd, "memory.peak", O_RDWR, 0);
    }
    *out = cg;
    return 0;
}

void crl_cgroup_bases(const struct crl_cgroup *cg, uint64_t *cpu_base_ns, uint64_t *oom_base)
{
    *cpu_base_ns = cg->cpu_base_ns;
    *oom_base = cg->oom_base;
}

/* The pids in a cgroup.procs, complete lines only, at most cap. */
static size_t read_procs_at(int dirfd, const char *file, pid_t *out, size_t cap)
{
    char buf[65536];
    ssize_t n = crl_read_file_at(dirfd, file, buf, sizeof(buf) - 1);
    size_t k = 0;
    if (n <= 0)
        return 0;
    buf[n] = 0;
    for (char *line = buf, *nl; k < cap && (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = 0;
        char *end;
        long pid = strtol(line, &end, 10);
        if (end != line && *end == 0 && pid > 0)
            out[k++] = (pid_t)pid;
    }
    return k;
}

bool crl_cgroup_has_pid(struct crl_cgroup *cg, pid_t pid)
{
    pid_t pids[256];
    cleanup_close int fd = leaf_open(cg, NULL);
    size_t n = fd < 0 ? 0 : read_procs_at(fd, "cgroup.procs", pids, 256);
    for (size_t i = 0; i < n; i++)
        if (pids[i] == pid)
            return true;
    return false;
}

bool crl_cgroup_frozen(struct crl_cgroup *cg)
{
    bool v1 = cg->m->version == CRL_CGROUP_V1;
    cleanup_close int fd = cg_open(cg, v1 ? H_FREEZER : 0, NULL);
    char buf[32] = "";
    if (fd < 0 ||
        crl_read_file_at(fd, v1 ? "freezer.state" : "cgroup.freeze", buf, sizeof(buf) - 1) < 0)
        return false;
    return v1 ? strncmp(buf, "FROZEN", 6) == 0 || strncmp(buf, "FREEZING", 8) == 0 : buf[0] == '1';
}

struct leaves_ctx {
    crl_cgroup_leaf_fn fn;
    void *ctx;
    pid_t pids[4096];
};

static int leaves_child(int parent_fd, const char *name, void *ctx)
{
    struct leaves_ctx *l = ctx;
    char file[300];
    snprintf(file, sizeof(file), "%s/cgroup.procs", name);
    size_t n = read_procs_at(parent_fd, file, l->pids, CRL_ARRAY_SIZE(l->pids));
    l->fn(name, l->pids, n, l->ctx);
    return 0;
}

int crl_cgroup_leaves(struct crl_cgroup *cg, crl_cgroup_leaf_fn fn, void *ctx)
{
    cleanup_close int fd = leaf_open(cg, NULL);
    struct leaves_ctx *l = malloc(sizeof(*l));
    if (fd < 0 || !l) {
        free(l);
        return -1;
    }
    l->fn = fn;
    l->ctx = ctx;
    int r = each_child(fd, leaves_child, l);
    free(l);
    return r;
}

int crl_cgroup_leaf_procs(struct crl_cgroup *cg, const char *leaf, struct crl_err *err)
{
    cleanup_close int lp = leaf_open(cg, NULL);
    if (lp < 0)
        return crl_err_sys(err, errno, "open cgroup %s", cg->name);
    if (mkdirat(lp, leaf, 0755) < 0 && errno != EEXIST)
        return crl_err_sys(err, errno, "mkdir cgroup %s/%s", cg->name, leaf);
    char path[128];
    snprintf(path, sizeof(path), "%s/cgroup.procs", leaf);
    int fd = crl_openat(lp, path, O_WRONLY, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "open cgroup %s/%s", cg->name, path);
    return fd;
}

int crl_cgroup_attach_fds(struct crl_cgroup *cg, const char *leaf, int *fds, int *nfds,
                          struct crl_err *err)
{
    int n = 0;
    if ((fds[n] = crl_cgroup_leaf_procs(cg, leaf, err)) < 0)
        return -1;
    n++;
    char path[128];
    int hs[CRL_CGROUP_MAX_FDS], n_others = v1_others(cg->m, hs);
    for (int i = 0; i < n_others; i++) {
        snprintf(path, sizeof(path), "%s/cgroup.procs", cg->name);
        if ((fds[n] = crl_openat(cg->m->parent_fd[hier(cg->m, hs[i])], path, O_WRONLY, 0)) < 0) {
            int e = errno;
            for (int k = 0; k < n; k++)
                close(fds[k]);
            return crl_err_sys(err, e, "open %s cgroup %s", v1_controllers[hs[i]], cg->name);
        }
        n++;
    }
    *nfds = n;
    return 0;
}

int crl_cgroup_join_dirs(struct crl_cgroup *cg, int *fds, struct crl_err *err)
{
    int hs[CRL_CGROUP_MAX_FDS], n_others = v1_others(cg->m, hs), n = 0;
    if ((fds[n++] = leaf_open(cg, NULL)) < 0)
        goto fail;
    for (int i = 0; i < n_others; i++)
        if ((fds[n++] = cg_open(cg, hs[i], NULL)) < 0)
            goto fail;
    return n;
fail:;
    int e = errno;
    for (int i = 0; i < n - 1; i++)
        close(fds[i]);
    return crl_err_sys(err, e, "open cgroup %s", cg->name);
}

int crl_cgroup_leaf_dir(struct crl_cgroup *cg, const char *leaf, struct crl_err *err)
{
    if (cg->m->version == CRL_CGROUP_V1)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "cgroup v1 has no CLONE_INTO_CGROUP");
    cleanup_close int lp = leaf_open(cg, NULL);
    if (lp < 0)
        return crl_err_sys(err, errno, "open cgroup %s", cg->name);
    if (mkdirat(lp, leaf, 0755) < 0 && errno != EEXIST)
        return crl_err_sys(err, errno, "mkdir cgroup %s/%s", cg->name, leaf);
    int fd = crl_openat(lp, leaf, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "open cgroup %s/%s", cg->name, leaf);
    return fd;
}

int crl_cgroup_kill_leaf(struct crl_cgroup *cg, const char *leaf, pid_t spare, struct crl_err *err)
{
    cleanup_close int fd = leaf_open(cg, leaf);
    if (fd < 0)
        return errno == ENOENT ? 0 : crl_err_sys(err, errno, "open cgroup %s/%s", cg->name, leaf);
    return kill_tree(cg->m, fd, spare);
}

int crl_cgroup_signal_leaf(struct crl_cgroup *cg, const char *leaf, int sig, struct crl_err *err)
{
    cleanup_close int fd = leaf_open(cg, leaf);
    if (fd < 0)
        return errno == ENOENT ? 0 : crl_err_sys(err, errno, "open cgroup %s/%s", cg->name, leaf);
    struct kill_ctx k = {.sig = sig};
    kill_tree_procs_fn(fd, &k);
    free(k.seen.v);
    return k.count;
}

int crl_cgroup_kill_all(struct crl_cgroup *cg, struct crl_err *err)
{
    cleanup_close int fd = leaf_open(cg, NULL);
    if (fd < 0)
        return errno == ENOENT ? 0 : crl_err_sys(err, errno, "open cgroup %s", cg->name);
    return kill_tree(cg->m, fd, 0);
}

int crl_cgroup_remove_leaf(struct crl_cgroup *cg, const char *leaf)
{
    cleanup_close int lp = leaf_open(cg, NULL);
    if (lp >= 0 && unlinkat(lp, leaf, AT_REMOVEDIR) < 0 && errno != ENOENT)
        return -1;
    return 0;
}

static int count_fn(int fd, void *ctx);

static int count_child(int parent_fd, const char *name, void *ctx)
{
    return with_child(parent_fd, name, count_fn, ctx);
}

static int count_fn(int fd, void *ctx)
{
    char buf[65536];
    ssize_t n = crl_read_file_at(fd, "cgroup.procs", buf, sizeof(buf));
    for (ssize_t i = 0; i < n; i++)
        *(int *)ctx += buf[i] == '\n';
    each_child(fd, count_child, ctx);
    return 0;
}

static int count_tree(int fd)
{
    int count = 0;
    count_fn(fd, &count);
    return count;
}

int crl_cgroup_count(struct crl_cgroup *cg, const char *leaf)
{
    if (!leaf) {
        /* the whole sandbox: the pids controller counts tasks for us */
        bool v1 = cg->m->version == CRL_CGROUP_V1;
        cleanup_close int fd = cg_open(cg, v1 ? H_PIDS : 0, NULL);
        if (fd < 0)
            return errno == ENOENT ? 0 : -1;
        if (v1 || cg->m->v2_pids)
            return (int)read_u64_at(fd, "pids.current");
        return count_tree(fd);
    }
    char buf[65536];
    char path[128];
    snprintf(path, sizeof(path), "%s/cgroup.procs", leaf);
    cleanup_close int lp = leaf_open(cg, NULL);
    ssize_t n = lp < 0 ? -1 : crl_read_file_at(lp, path, buf, sizeof(buf));
    if (n < 0)
        return errno == ENOENT ? 0 : -1;
    int count = 0;
    for (ssize_t i = 0; i < n; i++)
        count += buf[i] == '\n';
    return count;
}

int crl_cgroup_freeze(struct crl_cgroup *cg, bool frozen, struct crl_err *err)
{
    int r;
    bool v1 = cg->m->version == CRL_CGROUP_V1;
    cleanup_close int fd = cg_open(cg, v1 ? H_FREEZER : 0, NULL);
    if (v1) {
        r = v1_freeze_at(fd, frozen ? "FROZEN" : "THAWED");
    } else {
        r = crl_write_file_at(fd, "cgroup.freeze", frozen ? "1" : "0");
        /* cgroup.events says "frozen 1" once every task has stopped */
        for (int i = 0; r == 0 && frozen && i < 2000; i++) {
            if (read_keyed_at(fd, "cgroup.events", "frozen") == 1)
                break;
            sleep_ms(1);
        }
    }
    if (r < 0)
        return crl_err_sys(err, errno, "%s %s", frozen ? "freeze" : "thaw", cg->name);
    return 0;
}

static uint64_t memory_charge(struct crl_cgroup *cg)
{
    bool v1 = cg->m->version == CRL_CGROUP_V1;
    cleanup_close int fd = cg_open(cg, v1 ? H_MEMORY : 0, NULL);
    return read_u64_at(fd, v1 ? "memory.usage_in_bytes" : "memory.current");
}

int crl_cgroup_reclaim(struct crl_cgroup *cg, struct crl_cgroup_reclaim *r, struct crl_err *err)
{
    struct crl_cgroup_mgr *m = cg->m;
    r->before_bytes = r->after_bytes = memory_charge(cg);
    r->how = "none";
    if (m->version == CRL_CGROUP_V2 && !m->v2_memory)
        return 0; /* no memory controller: nothing charged, nothing to reclaim */
    int rc;
    cleanup_close int fd = cg_open(cg, m->version == CRL_CGROUP_V1 ? H_MEMORY : 0, NULL);
    if (m->version == CRL_CGROUP_V1) {
        /* Reclaims with tasks in the cgroup, frozen or not (measured on
         * 6.18: 100 MiB of page cache in 0.12 s); gives up on what it
         * cannot free (anonymous memory and tmpfs, without swap). */
        r->how = "memory.force_empty";
        rc = crl_write_file_at(fd, "memory.force_empty", "0");
    } else {
        /* Ask for all of it: EAGAIN says less could be freed, as expected. */
        char v[32];
        snprintf(v, sizeof(v), "%" PRIu64, r->before_bytes ? r->before_bytes : 1);
        r->how = "memory.reclaim";
        rc = crl_write_file_at(fd, "memory.reclaim", v);
        if (rc < 0 && errno == EAGAIN)
            rc = 0;
    }
    int e = errno;
    r->after_bytes = memory_charge(cg);
    if (rc < 0)
        return crl_err_sys(err, e, "%s of cgroup %s", r->how, cg->name);
    return 0;
}

int crl_cgroup_stats(struct crl_cgroup *cg, struct crl_cgroup_stats *st)
{
    memset(st, 0, sizeof(*st));
    bool v1 = cg->m->version == CRL_CGROUP_V1;
    /* Each directory opened once: a list reads every sandbox's. */
    cleanup_close int mem = cg_open(cg, v1 ? H_MEMORY : 0, NULL);
    cleanup_close int cpu = v1 ? cg_open(cg, H_CPUACCT, NULL) : -1;
    cleanup_close int pids = v1 ? cg_open(cg, H_PIDS, NULL) : -1;
    uint64_t cpu_ns = read_cpu_ns_at(cg->m, v1 ? cpu : mem);
    st->cpu_ns = cpu_ns > cg->cpu_base_ns ? cpu_ns - cg->cpu_base_ns : 0;
    uint64_t oom = read_oom_kills_at(cg->m, mem);
    st->oom_kills = oom > cg->oom_base ? oom - cg->oom_base : 0;
    if (v1) {
        st->memory_bytes = read_u64_at(mem, "memory.usage_in_bytes");
        st->memory_peak_bytes = read_u64_at(mem, "memory.max_usage_in_bytes");
        st->pids = (unsigned)read_u64_at(pids, "pids.current");
    } else {
        st->memory_bytes = read_u64_at(mem, "memory.current");
        if (cg->peak_fd >= 0) {
            char buf[32];
            ssize_t n = pread(cg->peak_fd, buf, sizeof(buf) - 1, 0);
            if (n > 0) {
                buf[n] = 0;
                st->memory_peak_bytes = strtoull(buf, NULL, 10);
            }
        }
        st->pids = (unsigned)read_u64_at(mem, "pids.current");
    }
    if (st->memory_peak_bytes < st->memory_bytes)
        st->memory_peak_bytes = st->memory_bytes;
    return 0;
}

int crl_cgroup_tidy(struct crl_cgroup *cg, bool remove)
{
    struct remove_ctx r = {.wait = false};
    cleanup_close int lp = leaf_open(cg, NULL);
    if (lp >= 0 && each_child(lp, remove_child, &r) < 0 && !r.err)
        r.err = errno;
    for (int i = 0; remove && i < V1_MAX; i++)
        if (cg->m->parent_fd[i] >= 0 && remove_tree(cg->m->parent_fd[i], cg->name, false) < 0 &&
            !r.err)
            r.err = errno;
    errno = r.err;
    return r.err ? -1 : 0;
}

int crl_cgroup_release(struct crl_cgroup *cg, bool remove, struct crl_err *err)
{
    if (!cg)
        return 0;
    /* Leaves always go: they are cheap, and a stale one would mislead. */
    int ret = 0;
    if (crl_cgroup_tidy(cg, remove) < 0)
        ret = crl_err_sys(err, errno, "removing %s of cgroup %s", remove ? "all" : "the leaves",
                          cg->name);
    if (cg->peak_fd >= 0)
        close(cg->peak_fd);
    free(cg);
    return ret;
}

int crl_cgroup_pause(struct crl_cgroup *cg, const char *who, struct crl_cgroup_reclaim *r,
                     struct crl_err *err)
{
    if (crl_cgroup_freeze(cg, true, err) < 0) {
        crl_cgroup_freeze(cg, false, NULL);
        return -1;
    }
    struct crl_err rerr = CRL_ERR_INIT;
    if (crl_cgroup_reclaim(cg, r, &rerr) < 0)
        crl_warn(who, "pause: %s", rerr.msg);
    crl_debug(who, "frozen; %s: memory %llu -> %llu bytes", r->how,
              (unsigned long long)r->before_bytes, (unsigned long long)r->after_bytes);
    return 0;
}
