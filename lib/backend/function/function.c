/* The function backend: its ops table, a sandbox's life, and the
 * backend's start and end (function_int.h says how its files divide the work). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/host.h"
#include "../../os/idmap.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "function.h"
#include "function_int.h"
#include "root.h"

const char *const crl_fn_runtimes[N_RUNTIMES] = {"shell", "python"};
struct fn_state *crl_fn_state;

/* ---- sandboxes ---- */

/* Give back what corrald holds for a sandbox whose processes are all gone.
 * A destroyed sandbox's cgroup is kept for the next one of its slot; a
 * failed create removes it, leaving nothing of the attempt. */
static void release(struct crl_sandbox *sb, bool quarantine)
{
    struct fn_sandbox *f = sb->priv;
    struct crl_host *h = sb->host;
    crl_timer_stop(h->loop, &f->timer);
    bool failed_create = f->create_failed;
    struct crl_err create_err = f->create_err;
    if (f->cg) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_cgroup_release(f->cg, failed_create && !quarantine, &err) < 0)
            crl_warn(sb->id, "%s", err.msg);
    }
    crl_backend_net_release(sb, f->netns_fd, quarantine);
    if (f->k) {
        f->k->sb = NULL;
        if (!f->k->w_pid.active)
            crl_fn_keeper_free(f->k); /* else when its pidfd says it has exited */
    }
    free(f);
    sb->priv = NULL;
    sb->slot_quarantined = quarantine;
    if (failed_create)
        crl_sandbox_created(sb, &create_err);
    else
        crl_sandbox_destroyed(sb);
}

/* How long a keeper asked to END may take before it is killed. */
#define END_GRACE_MS 1000

/* Wait, on a timer, for the keeper to be gone, the cgroup to empty and its
 * leaves to go, then release.  A keeper that does not END in time is
 * killed, and with it the pid namespace; a cgroup that does not empty
 * quarantines the slot until a restart, as for a container. */
void crl_fn_drain(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    struct fn_sandbox *f = sb->priv;
    bool keeper = f->k && f->k->w_pid.active;
    if (keeper && f->drain_tries == END_GRACE_MS) {
        crl_fn_keeper_lost(f->k, "did not end in time");
        if (f->cg)
            crl_cgroup_kill_all(f->cg, NULL);
    }
    int n = f->cg ? crl_cgroup_count(f->cg, NULL) : 0;
    bool busy = n == 0 && f->cg && crl_cgroup_tidy(f->cg, f->create_failed) < 0 && errno == EBUSY;
    if ((n > 0 || busy || keeper || f->running > 0) && f->drain_tries++ < 5000) {
        if (n > 0 && !keeper && f->drain_tries % 500 == 1)
            crl_cgroup_kill_all(f->cg, NULL);
        crl_timer_start(sb->host->loop, &f->timer, 1000000, crl_fn_drain, sb);
        return;
    }
    if (n > 0 || keeper || f->running > 0)
        crl_error(sb->id,
                  "%d process(es) still in the cgroup after 5s: slot quarantined until restart", n);
    release(sb, n > 0 || keeper);
}

/* Everything of the sandbox goes: its keeper ENDs it (its processes, its
 * IPC objects, then itself and the namespaces), or, if it cannot be asked,
 * is killed with everything in the cgroup; then drain. */
static void teardown(struct crl_sandbox *sb)
{
    struct fn_sandbox *f = sb->priv;
    f->releasing = true;
    crl_timer_stop(sb->host->loop, &f->timer);
    struct keeper *k = f->k;
    struct crl_zyg_req end = {.op = CRL_ZYG_END};
    if (!k || k->state != K_SERVING ||
        send(k->sock, &end, sizeof(end), MSG_NOSIGNAL) != (ssize_t)sizeof(end)) {
        if (k)
            crl_fn_keeper_lost(k, NULL);
        if (f->cg)
            crl_cgroup_kill_all(f->cg, NULL);
    }
    f->drain_tries = 0;
    f->timer.data = sb;
    crl_fn_drain(&f->timer);
}

/* A create that cannot finish: undone once everything it made is gone;
 * the create answers then (release). */
void crl_fn_create_fail(struct crl_sandbox *sb, const struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    if (f->create_failed)
        return;
    f->create_failed = true;
    f->create_err = *err;
    teardown(sb);
}

static void created(struct crl_timer *t)
{
    crl_sandbox_created(t->data, NULL);
}

/* The sandbox's volumes, each an idmapped clone of corrald's mount whose
 * owner 0 is the sandbox's uid (as a container's root is the same uid on
 * the host), for the keeper to attach: their count, or -1. */
static int volume_mounts(struct crl_sandbox *sb, int *out, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    size_t n = sb->spec.n_volumes;
    if (!n)
        return 0;
    cleanup_close int userns = crl_userns_of_range(f->uid, 65536, err);
    if (userns < 0)
        return crl_err_prefix(err, "volumes");
    for (size_t i = 0; i < n; i++) {
        out[i] = crl_mount_idmapped(sb->volume_fds[i], userns, sb->spec.volumes[i].read_only);
        if (out[i] < 0) {
            crl_err_sys(err, errno, "volumes[%zu] (%s): an idmapped mount", i,
                        sb->spec.volumes[i].name);
            close_fds(out, (int)i);
            return -1;
        }
    }
    return (int)n;
}

/* The keeper becomes the sandbox's (keeper.h).  What the files API needs
 * at once (its disk's size, its scratch dir's owner) corrald sets through
 * the keeper's descriptors; the rest (its cgroup, network, hostname, /etc
 * and clocks) the keeper does on CLAIM, which it takes before any call
 * (one socket, in order), so the create answers without waiting for it.
 * A claim that fails (a system error) fails the sandbox: the create, or,
 * if that has answered, its first call says why. */
void crl_fn_claim(struct crl_sandbox *sb, struct keeper *k)
{
    struct fn_sandbox *f = sb->priv;
    struct crl_err err = CRL_ERR_INIT;
    f->k = k;
    k->sb = sb;
    k->state = K_SERVING;
    const char *step = "?";
    int r = crl_fnroot_prepare(k->root_fd, k->scratch_fd, sb->spec.disk_mb, f->uid, f->gid, &step);
    if (r < 0) {
        crl_err_sys(&err, -r, "preparing the sandbox's root: %s", step);
        crl_fn_create_fail(sb, &err);
        return;
    }
    int fds[1 + 2 * CRL_ZYG_MAX_CGROUP_FDS + CRL_ZYG_MAX_VOLUMES];
    int nvol = volume_mounts(sb, fds + 1 + 2 * CRL_ZYG_MAX_CGROUP_FDS, &err);
    if (nvol < 0) {
        crl_fn_create_fail(sb, &err);
        return;
    }
    fds[0] = f->netns_fd;
    int *vols = fds + 1 + 2 * CRL_ZYG_MAX_CGROUP_FDS;
    int ncg = crl_cgroup_join_dirs(f->cg, fds + 1, &err);
    if (ncg < 0) {
        close_fds(vols, nvol);
        crl_fn_create_fail(sb, &err);
        return;
    }
    int nhome = crl_cgroup_mgr_own_dirs(sb->host->cgroups, fds + 1 + ncg, &err);
    if (nhome < 0) {
        close_fds(fds + 1, ncg);
        close_fds(vols, nvol);
        crl_fn_create_fail(sb, &err);
        return;
    }
    /* the volumes' after the rest */
    memmove(fds + 1 + ncg + nhome, vols, (size_t)nvol * sizeof(int));
    struct crl_zyg_claim c = {
        .op = CRL_ZYG_CLAIM,
        .uid = f->uid,
        .gid = f->gid,
        .n_cgroup_fds = (uint32_t)ncg,
        .n_home_fds = (uint32_t)nhome,
    };
    crl_timens_from_now(&c.timens);
    snprintf(c.hostname, sizeof(c.hostname), "%s", sb->id);
    c.n_volumes = (uint32_t)nvol;
    for (int i = 0; i < nvol; i++) {
        snprintf(c.volume_paths[i], sizeof(c.volume_paths[i]), "%s", sb->spec.volumes[i].path);
        if (sb->spec.volumes[i].read_only)
            c.volumes_ro |= 1u << i;
    }
    int sent = crl_send_fds(k->sock, &c, sizeof(c), fds, 1 + ncg + nhome + nvol);
    int send_errno = errno;
    close_fds(fds + 1, ncg); /* the keeper has its copies */
    close_fds(fds + 1 + ncg + nhome, nvol);
    if (sent < 0) {
        crl_err_sys(&err, send_errno, "talking to the sandbox's keeper");
        crl_fn_create_fail(sb, &err);
        return;
    }
    crl_timer_start(sb->host->loop, &f->timer, 0, created, sb);
}

static int fn_create(struct crl_sandbox *sb, struct crl_err *err)
{
    struct fn_state *st = crl_fn_state;
    struct crl_host *h = sb->host;
    unsigned rt = 0;
    while (rt < N_RUNTIMES && strcmp(crl_fn_runtimes[rt], sb->spec.runtime) != 0)
        rt++;
    if (rt == N_RUNTIMES)
        return crl_err_set(err, CRL_E_INVALID, "runtime '%s' is unknown", sb->spec.runtime);
    if (crl_net_policy_mode(sb->spec.network) != CRL_NET_NONE)
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "network.mode '%s': function sandboxes are offline (loopback only) "
                           "in this version; use the container backend for a network",
                           crl_net_mode_name(crl_net_policy_mode(sb->spec.network)));
    if (sb->spec.services)
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "services: function sandboxes are offline (loopback only) in this "
                           "version; use the container backend for services");
    for (size_t i = 0; i < sb->spec.n_volumes; i++) {
        const char *why = crl_fnroot_volume_refused(sb->spec.volumes[i].path);
        if (why)
            return crl_err_set(err, CRL_E_INVALID, "volumes[%zu].path '%s': %s", i,
                               sb->spec.volumes[i].path, why);
    }
    struct zygote *z = &st->zy[rt];
    if (z->sock < 0 && !z->npool && !z->building && crl_fn_zygote_start(st, rt, err) < 0)
        return -1;
    struct fn_sandbox *f = calloc(1, sizeof(*f));
    if (!f)
        return crl_err_sys(err, ENOMEM, "sandbox");
    f->netns_fd = -1;
    f->runtime = rt;
    /* An id range of its own, as a container slot has: unprivileged on the host. */
    f->uid = h->cfg.uid_base + sb->slot * 65536u;
    f->gid = f->uid;
    char name[32];
    snprintf(name, sizeof(name), "s%u", sb->slot);
    struct crl_cgroup_limits lim = {.memory_bytes = (uint64_t)sb->spec.memory_mb << 20,
                                    .pids = sb->spec.pids,
                                    .cpus = sb->spec.cpus};
    if (crl_cgroup_create(h->cgroups, name, &lim, &f->cg, err) < 0 ||
        (f->netns_fd = crl_backend_net_claim(sb, NULL, err)) < 0) {
        if (f->cg)
            crl_cgroup_release(f->cg, true, NULL);
        free(f);
        return -1;
    }
    sb->priv = f;
    struct keeper *k = crl_fn_pool_take(z);
    if (k)
        crl_fn_claim(sb, k);
    else
        crl_fn_wait(z, sb);
    crl_fn_pool_fill(z);
    return 0;
}

static void fn_destroy(struct crl_sandbox *sb)
{
    struct fn_sandbox *f = sb->priv;
    if (!f) {
        crl_sandbox_destroyed(sb);
        return;
    }
    crl_fn_unwait(&crl_fn_state->zy[f->runtime], sb); /* if it waits for a keeper */
    teardown(sb);
}

static int fn_stats(struct crl_sandbox *sb, struct crl_usage *u)
{
    struct fn_sandbox *f = sb->priv;
    memset(u, 0, sizeof(*u));
    if (!f || !f->cg)
        return -1;
    struct crl_cgroup_stats cs;
    if (crl_cgroup_stats(f->cg, &cs) < 0)
        return -1;
    u->cpu_s = (double)cs.cpu_ns / 1e9;
    u->memory_bytes = cs.memory_bytes;
    u->memory_peak_bytes = cs.memory_peak_bytes;
    u->pids = cs.pids;
    u->oom_kills = cs.oom_kills;
    /* The root's tmpfs holds all it can write: the scratch dir, /dev/shm
     * and its few files of /etc. */
    u->disk_limit_bytes = (uint64_t)sb->spec.disk_mb << 20;
    struct statfs fs;
    if (f->k && f->k->scratch_fd >= 0 && fstatfs(f->k->scratch_fd, &fs) == 0)
        u->disk_bytes = (uint64_t)(fs.f_blocks - fs.f_bfree) * (uint64_t)fs.f_bsize;
    return 0;
}

static json_t *fn_info(struct crl_sandbox *sb)
{
    struct fn_sandbox *f = sb->priv;
    if (!f)
        return NULL;
    pid_t pid = f->k ? f->k->pid : 0;
    char root[64] = "";
    if (pid > 0)
        snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
    json_t *o =
        json_pack("{s:s, s:i, s:s, s:i, s:s, s:i, s:s}", "runtime", crl_fn_runtimes[f->runtime],
                  "uid", (json_int_t)f->uid, "scratch", CRL_FN_SCRATCH, "pid", (json_int_t)pid,
                  "root", root, "zygote_pid", (json_int_t)crl_fn_state->zy[f->runtime].pid,
                  "cgroup", f->cg ? crl_cgroup_name(f->cg) : "");
    crl_backend_pause_info(o, &f->last_pause);
    return o;
}

/* ---- pause ---- */

/* Between calls only the keeper is there, waiting, so a pause stops the
 * calls under way, if any, and gives back the page cache its calls charged
 * to it. */
static int fn_pause(struct crl_sandbox *sb, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv; /* a call under way is frozen with it */
    return crl_backend_pause_cgroup(sb, f && !f->releasing ? f->cg : NULL, true,
                                    f ? &f->last_pause : NULL, err);
}

static int fn_resume(struct crl_sandbox *sb, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    return crl_backend_pause_cgroup(sb, f && !f->releasing ? f->cg : NULL, false, NULL, err);
}

/* ---- life ---- */

static int fn_init(struct crl_host *h, void **state, struct crl_err *err)
{
    struct fn_state *st = calloc(1, sizeof(*st));
    if (!st || !(st->msg = malloc(CRL_ZYG_MAX_MSG))) {
        free(st);
        return crl_err_sys(err, ENOMEM, "function backend");
    }
    st->host = h;
    for (unsigned i = 0; i < N_RUNTIMES; i++)
        st->zy[i].sock = -1;
    if (crl_sibling_path("corral-zygote", st->zygote_path, sizeof(st->zygote_path), err) < 0)
        goto fail;
    if (access(st->zygote_path, X_OK) < 0) {
        crl_err_sys(err, errno, "zygote %s", st->zygote_path);
        goto fail;
    }
    /* Only ever a mountpoint, in each keeper's own namespace. */
    snprintf(st->root_dir, sizeof(st->root_dir), "%s/function-root", h->run_dir);
    if (mkdir(st->root_dir, 0700) < 0 && errno != EEXIST) {
        crl_err_sys(err, errno, "mkdir %s", st->root_dir);
        goto fail;
    }
    crl_fn_state = st;
    *state = st;
    /* Initialise the runtimes and fill the pools now, not in the first
     * create; a runtime that cannot start is tried again when a sandbox
     * needs it. */
    for (unsigned i = 0; i < N_RUNTIMES; i++) {
        struct crl_err zerr = CRL_ERR_INIT;
        st->zy[i].st = st;
        st->zy[i].runtime = i;
        if (crl_fn_zygote_start(st, i, &zerr) < 0)
            crl_warn(NULL, "function runtime %s: %s", crl_fn_runtimes[i], zerr.msg);
        else
            crl_fn_pool_fill(&st->zy[i]);
    }
    return 0;
fail:
    free(st->msg);
    free(st);
    return -1;
}

/* Nothing of a function sandbox outlives corrald on disk: its root and
 * scratch dir were a tmpfs in its keeper's mount namespace, which ended
 * with the keeper (its cgroups and processes go with the container
 * backend's reconcile of the same slots).  The scratch dirs of an older
 * corrald, which kept them on disk, go. */
static int fn_reconcile(struct crl_host *h, void *state, struct crl_err *err)
{
    (void)state;
    (void)err;
    char old[PATH_MAX];
    snprintf(old, sizeof(old), "%s/functions", h->run_dir);
    if (crl_rm_rf_at(AT_FDCWD, old) < 0 && errno != ENOENT)
        crl_log_syscall(NULL, errno, "removing %s", old);
    return 0;
}

static void fn_shutdown(struct crl_host *h, void *state)
{
    struct fn_state *st = state;
    (void)h;
    for (unsigned i = 0; i < N_RUNTIMES; i++) {
        struct zygote *z = &st->zy[i];
        /* The pool's keepers (our children: reaped as they are freed). */
        for (struct keeper *k = z->unclaimed; k; k = k->next) {
            setpriority(PRIO_PROCESS, k->pid, 0); /* one still building is at nice 19 */
            syscall(SYS_pidfd_send_signal, k->pidfd, SIGKILL, NULL, 0);
        }
        while (z->unclaimed) {
            struct keeper *k = z->unclaimed;
            z->unclaimed = k->next;
            struct pollfd pf = {k->pidfd, POLLIN, 0};
            poll(&pf, 1, 1000);
            k->state = K_DEAD;
            crl_fn_keeper_free(k);
        }
        if (z->sock < 0)
            continue;
        crl_watch_stop(st->host->loop, &z->w);
        setpriority(PRIO_PROCESS, z->pid, 0); /* so that it sees the EOF now, not when idle */
        /* It exits at the EOF.  A keeper it made meanwhile is in a reply
         * not read yet: our child (CLONE_PARENT) that we know nothing of.
         * Read them all, to the zygote's end, and end each here, so that
         * nothing of ours outlives the shutdown. */
        shutdown(z->sock, SHUT_WR);
        for (;;) {
            struct crl_zyg_reply r;
            int fds[2], nfds = 2;
            struct pollfd pf = {z->sock, POLLIN, 0};
            if (poll(&pf, 1, 5000) <= 0)
                break;
            ssize_t n = crl_recv_fds(z->sock, &r, sizeof(r), fds, &nfds);
            if (n <= 0)
                break;
            if (n == (ssize_t)sizeof(r) && nfds == 2) {
                siginfo_t si;
                setpriority(PRIO_PROCESS, r.pid, 0);
                syscall(SYS_pidfd_send_signal, fds[1], SIGKILL, NULL, 0);
                waitid((idtype_t)P_PIDFD, (id_t)fds[1], &si, WEXITED | __WALL);
            }
            close_fds(fds, nfds);
        }
        close_fd(&z->sock);
        if (z->pid > 0) {
            int status;
            if (waitpid(z->pid, &status, 0) < 0)
                crl_log_syscall(NULL, errno, "waiting for zygote %d", (int)z->pid);
        }
    }
    free(st->msg);
    free(st);
    crl_fn_state = NULL;
}

const struct crl_backend_ops crl_function_backend = {
    .name = "function",
    .volumes = CRL_VOLUMES_MOUNT,
    .admit_mb = 2, /* a keeper: a fork of its runtime's zygote, most pages shared */
    .fds_held = 5, /* measured: its keeper's pidfd and socket, its netns (v2: memory.peak) */
    .init = fn_init,
    .reconcile = fn_reconcile,
    .shutdown = fn_shutdown,
    .create = fn_create,
    .destroy = fn_destroy,
    .stats = fn_stats,
    .info = fn_info,
    .spawn = crl_fn_spawn,
    .kill = crl_fn_kill,
    .signal = crl_fn_signal,
    .resize = crl_backend_pty_resize,
    .open = crl_fn_open,
    .stream = crl_fn_stream,
    .snapshot = crl_fn_snapshot,
    .restore = crl_fn_restore,
    .pause = fn_pause,
    .resume = fn_resume,
};
