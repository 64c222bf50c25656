/* A microVM's writable layer for a checkpoint (backend.h's
 * snapshot_start).  The layer is inside the guest: its agent's
 * corral:layer-out streams the overlay's upper dir as a tar (procs.c runs
 * it), and corral-unpack unpacks that into a tmpfs mounted nowhere, in the
 * form lib/traj/ckpt.h reads; the view is that tmpfs's root, freed with
 * the last descriptor of it, so nothing is left to remove whatever
 * happens.
 *
 * The tar comes from the guest: corral-unpack is root of a user namespace
 * that maps the sandbox's 65536 ids and nothing else (the ids its
 * container would have), under seccomp, and reaches nothing but the
 * tmpfs; the tmpfs is as big as the sandbox's disk, and a guest that takes
 * longer than VIEW_DEADLINE_MS to hand its layer over is killed
 * (checkpoint_timeout), the checkpoint failed. */
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../helper/stream.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "mvm_int.h"

#define VIEW_DEADLINE_MS (10u * 60u * 1000u)
/* Entries a layer may have: a checkpoint of more is refused. */
#define VIEW_MAX_ENTRIES 1000000u

struct mvm_view {
    struct crl_snapshot_req *rq;
    struct mvm_sandbox *m; /* until the guest's half ends */
    struct crl_loop *loop;
    char sbid[64];
    int mnt;    /* the tmpfs's root (fsmount), until the view is handed over */
    int msg_fd; /* corral-unpack's stderr */
    int pidfd;
    uid_t shift;
    struct crl_watch w_pid;
    struct crl_timer deadline;
    bool helper_done, guest_done, timed_out;
    int helper_code, guest_code;
    char guest_why[256];
};

/* A detached tmpfs of `mb` MiB whose root belongs to the sandbox's id 0. */
static int make_tmpfs(unsigned mb, uid_t shift, struct crl_err *err)
{
    cleanup_close int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
    if (fs < 0)
        return crl_err_sys(err, errno, "fsopen tmpfs");
    char size[32], ids[16], inodes[24];
    snprintf(size, sizeof(size), "%um", mb);
    snprintf(ids, sizeof(ids), "%u", (unsigned)shift);
    snprintf(inodes, sizeof(inodes), "%u", VIEW_MAX_ENTRIES + 64u);
    const char *opts[][2] = {{"size", size}, {"nr_inodes", inodes}, {"mode", "0755"},
                             {"uid", ids},   {"gid", ids},          {"huge", "never"}};
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
        if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, opts[i][0], opts[i][1], 0) < 0)
            return crl_err_sys(err, errno, "tmpfs option %s=%s", opts[i][0], opts[i][1]);
    if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return crl_err_sys(err, errno, "a tmpfs for the guest's layer");
    int m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                         MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
    if (m < 0)
        return crl_err_sys(err, errno, "fsmount the layer's tmpfs");
    return m;
}

/* ---- corral-unpack's launch: in the forked child, system calls only
 * (corrald has threads) ---- */

static void write_file(pid_t pid, const char *name, const char *text)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        _exit(1);
    close(fd);
}

static void child_fail(const char *what)
{
    char line[128];
    const char *es = strerrordesc_np(errno); /* not strerror: no locale in a forked child */
    int n = snprintf(line, sizeof(line), "starting corral-unpack: %s: %s\n", what, es ? es : "?");
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
    _exit(CRL_STREAM_FAILED);
}

/* Become root of a new user namespace mapping ids 0..65535 to shift..: a
 * process outside it (a child made first) writes the maps. */
static void enter_userns(uid_t shift)
{
    int sync[2];
    if (pipe2(sync, O_CLOEXEC) < 0)
        child_fail("pipe");
    pid_t self = getpid();
    pid_t g = fork();
    if (g < 0)
        child_fail("fork");
    if (g == 0) {
        char c;
        close(sync[1]);
        if (read(sync[0], &c, 1) != 1)
            _exit(1);
        char map[64];
        snprintf(map, sizeof(map), "0 %u 65536\n", (unsigned)shift);
        write_file(self, "setgroups", "deny");
        write_file(self, "uid_map", map);
        write_file(self, "gid_map", map);
        _exit(0);
    }
    close(sync[0]);
    int st = -1;
    if (unshare(CLONE_NEWUSER) < 0) {
        int e = errno;
        kill(g, SIGKILL);
        waitpid(g, NULL, 0);
        errno = e;
        child_fail("unshare(CLONE_NEWUSER)");
    }
    if (write(sync[1], "x", 1) != 1 || waitpid(g, &st, 0) != g || st != 0)
        child_fail("the user namespace's id maps");
    close(sync[1]);
    if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
        child_fail("becoming the namespace's root");
}

static void child_run(const char *path, int tar_r, int msg_w, int mnt, uid_t shift)
{
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    if (dup2(msg_w, 2) < 0)
        _exit(CRL_STREAM_FAILED);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    enter_userns(shift);
    if (dup2(tar_r, 0) < 0 || dup2(msg_w, 1) < 0 || dup2(mnt, 3) < 0)
        child_fail("stdio");
    close_range(4, ~0u, 0);
    char max[24];
    snprintf(max, sizeof(max), "%u", VIEW_MAX_ENTRIES);
    char *argv[] = {(char *)"corral-unpack", (char *)"--max-entries", max, NULL};
    char *envp[] = {NULL};
    execve(path, argv, envp);
    child_fail(path);
}

/* ---- the view's end ---- */

static void view_free(struct mvm_view *v)
{
    crl_watch_stop(v->loop, &v->w_pid);
    crl_timer_stop(v->loop, &v->deadline);
    close_fd(&v->pidfd);
    close_fd(&v->msg_fd);
    close_fd(&v->mnt);
    free(v);
}

/* The last line corral-unpack wrote, control characters made spaces. */
static void helper_why(struct mvm_view *v, char *out, size_t cap)
{
    char buf[1024];
    ssize_t n = read(v->msg_fd, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = 0;
    char *last = strrchr(buf, '\n');
    snprintf(out, cap, "%s", last ? last + 1 : buf);
    for (char *c = out; *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = ' ';
}

/* Both halves ended: hand the view over, or why not. */
static void maybe_done(struct mvm_view *v)
{
    if (!v->helper_done || !v->guest_done)
        return;
    struct crl_err err = CRL_ERR_INIT;
    char why[256];
    helper_why(v, why, sizeof(why));
    if (v->timed_out) {
        crl_err_set(&err, CRL_E_INTERNAL,
                    "the guest took over %u s to hand its writable layer over",
                    VIEW_DEADLINE_MS / 1000);
    } else if (v->guest_code != CRL_STREAM_OK && v->helper_code != CRL_STREAM_BAD_INPUT) {
        /* The guest failed first (the helper then saw a short stream). */
        crl_err_set(&err,
                    v->guest_code == CRL_STREAM_GONE      ? CRL_E_CONFLICT
                    : v->guest_code == CRL_STREAM_NOSPACE ? CRL_E_NO_SPACE
                                                          : CRL_E_INTERNAL,
                    "the guest's writable layer: %s",
                    v->guest_code == CRL_STREAM_GONE ? "the sandbox ended meanwhile"
                    : v->guest_why[0]                ? v->guest_why
                                                     : "its agent failed");
    } else if (v->helper_code != CRL_STREAM_OK) {
        crl_err_set(&err, v->helper_code == CRL_STREAM_NOSPACE ? CRL_E_NO_SPACE : CRL_E_INTERNAL,
                    "the guest's writable layer%s: %s",
                    v->helper_code == CRL_STREAM_BAD_INPUT ? " (refused: the guest sent it)" : "",
                    why[0] ? why : "corral-unpack failed");
    }
    if (err.code != CRL_OK) {
        crl_warn(v->sbid, "checkpoint: %s", err.msg);
        v->rq->done(v->rq, NULL, &err);
        view_free(v);
        return;
    }
    struct crl_snapshot_view view = {
        .format = CRL_LAYER_OVERLAY, .uid_shift = v->shift, .gid_shift = v->shift};
    view.dir_fd = openat(v->mnt, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (view.dir_fd < 0) {
        crl_err_sys(&err, errno, "opening the guest's layer");
        v->rq->done(v->rq, NULL, &err);
    } else {
        v->rq->done(v->rq, &view, NULL);
    }
    view_free(v);
}

static void helper_exited(struct crl_watch *w, uint32_t ev)
{
    struct mvm_view *v = w->data;
    (void)ev;
    siginfo_t si = {0};
    if (waitid((idtype_t)P_PIDFD, (id_t)v->pidfd, &si, WEXITED | WNOHANG) < 0 || si.si_pid == 0)
        return;
    crl_watch_stop(v->loop, &v->w_pid);
    v->helper_done = true;
    v->helper_code = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
    maybe_done(v);
}

static void deadline_passed(struct crl_timer *t)
{
    struct mvm_view *v = t->data;
    v->timed_out = true;
    if (!v->helper_done)
        syscall(SYS_pidfd_send_signal, v->pidfd, SIGKILL, NULL, 0);
    if (!v->guest_done) /* its end ends the guest's half (mvm_procs_end) */
        mvm_vm_kill(&v->m->vm, "checkpoint_timeout",
                    "the guest did not hand its writable layer over in %u s",
                    VIEW_DEADLINE_MS / 1000);
}

struct mvm_view *mvm_view_start(struct mvm_sandbox *m, struct crl_snapshot_req *rq, int *tar_w,
                                struct crl_err *err)
{
    struct crl_sandbox *sb = m->sb;
    struct mvm_state *st = mvm_state_of(sb);
    if (!st->unpack[0])
        return crl_err_set(err, CRL_E_UNSUPPORTED, "%s", st->unpack_missing), NULL;
    struct mvm_view *v = calloc(1, sizeof(*v));
    if (!v)
        return crl_err_sys(err, ENOMEM, "checkpoint"), NULL;
    v->rq = rq;
    v->m = m;
    v->loop = sb->host->loop;
    v->pidfd = v->msg_fd = -1;
    v->shift = sb->host->cfg.uid_base + sb->slot * 65536u;
    snprintf(v->sbid, sizeof(v->sbid), "%s", sb->id);
    unsigned mb = (sb->spec.disk_mb ? sb->spec.disk_mb : m->mem_mb) + 64u;
    int tar[2] = {-1, -1}, msg[2] = {-1, -1};
    if ((v->mnt = make_tmpfs(mb, v->shift, err)) < 0)
        goto fail;
    if (pipe2(tar, O_CLOEXEC) < 0 || pipe2(msg, O_CLOEXEC) < 0) {
        crl_err_sys(err, errno, "a checkpoint's pipes");
        goto fail;
    }
    /* Its last words fit a pipe: it never blocks on them. */
    pid_t pid = fork();
    if (pid < 0) {
        crl_err_sys(err, errno, "fork for corral-unpack");
        goto fail;
    }
    if (pid == 0)
        child_run(st->unpack, tar[0], msg[1], v->mnt, v->shift);
    v->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (v->pidfd < 0) {
        crl_err_sys(err, errno, "pidfd_open(corral-unpack %d)", (int)pid);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        goto fail;
    }
    close(tar[0]);
    close(msg[1]);
    v->msg_fd = msg[0];
    crl_set_nonblock(v->msg_fd, 1);
    crl_watch_start(v->loop, &v->w_pid, v->pidfd, EPOLLIN, helper_exited, v);
    crl_timer_start(v->loop, &v->deadline, (uint64_t)VIEW_DEADLINE_MS * 1000000u, deadline_passed,
                    v);
    *tar_w = tar[1];
    return v;
fail:
    close_fds(tar, tar[0] >= 0 ? 2 : 0);
    close_fds(msg, msg[0] >= 0 ? 2 : 0);
    close_fd(&v->mnt);
    free(v);
    return NULL;
}

void mvm_view_guest_done(struct mvm_view *v, int code, const char *why)
{
    v->guest_done = true;
    v->m = NULL;
    v->guest_code = code;
    snprintf(v->guest_why, sizeof(v->guest_why), "%s", why ? why : "");
    maybe_done(v);
}
