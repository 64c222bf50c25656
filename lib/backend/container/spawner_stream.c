/* A forked helper inside a sandbox: tar in and out, an upload, a
 * checkpoint's restore (spawner_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/backend.h"
#include "../../helper/file_in.h"
#include "../../helper/fsop.h"
#include "../../helper/seccomp.h"
#include "../../helper/tar.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/path.h"
#include "../../util/rawclone.h"
#include "../../util/rawsys.h"
#include "spawner_int.h"

/* ---- streams: a forked child inside the sandbox ---- */

static void stream_child(const struct crl_spawn_req *rq_in, int *fds, const char *path_in)
{
    /* Our copies first: the request lives in the buffer we clear below. */
    struct crl_spawn_stream stcopy = rq_in->u.stream;
    const struct crl_spawn_stream *st = &stcopy;
    bool restore = rq_in->op == CRL_SPAWN_RESTORE;
    char *path = strdup(path_in);
    int code = CRL_STREAM_FAILED;
    char msg[512] = "";
    if (!path)
        _exit(CRL_STREAM_FAILED);
    /* Nothing of the spawner's may stay with us: not its descriptors (other
     * sandboxes' sockets, the host netns, corrald's log), not the request
     * buffer (other sandboxes' commands).  The pipes go to fixed numbers:
     * 3 data, 4 messages, 5 the init's pidfd, 6... cgroup.procs. */
    memset(crl_spawner.msg, 0, CRL_SPAWN_MAX_MSG);
    int keep[3 + CRL_SPAWN_MAX_CGROUP_FDS];
    int nkeep = 3 + (int)st->n_cgroup_fds;
    keep[0] = fds[1];
    keep[1] = fds[2];
    keep[2] = fds[0];
    for (unsigned i = 0; i < st->n_cgroup_fds; i++)
        keep[3 + i] = fds[3 + i];
    for (int i = 0; i < nkeep; i++)
        keep[i] = fcntl(keep[i], F_DUPFD_CLOEXEC, 100 + i);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int i = 0; i < 3; i++)
        dup2(devnull, i);
    for (int i = 0; i < nkeep; i++) {
        dup2(keep[i], 3 + i);
        close(keep[i]);
    }
    close_range(3 + (unsigned)nkeep, ~0u, 0);
    int data = 3, msgfd = 4, pid1fd = 5;
    crl_write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "0");
    for (unsigned i = 0; i < st->n_cgroup_fds; i++)
        if (write(6 + (int)i, "0", 1) != 1) {
            snprintf(msg, sizeof(msg), "cgroup attach: %s", strerror(errno));
            goto out;
        }
    int step;
    long r = -EINVAL;
    int tree = -1;
    /* A forked child is single-threaded, so it may join init's time
     * namespace (an exec's CLONE_VM stages may not: see stage_a). */
    if (setns(pid1fd, CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET | CLONE_NEWCGROUP |
                          CLONE_NEWTIME) < 0)
        r = -errno;
    /* A restore works on the overlay alone: a detached copy of the root
     * mount without the ones on it (/proc, /dev, /sys), made while we are
     * still host root (the sandbox's root may not mount), so that their
     * mountpoints are plain directories of the overlay. */
    else if (restore && (tree = (int)syscall(SYS_open_tree, AT_FDCWD, "/",
                                             OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)) < 0)
        r = -errno;
    else
        r = crl_spawner_enter_identity(pid1fd, st->uid, st->gid, crl_spawner.last_cap, &step);
    if (r == 0 && tree >= 0 && fchdir(tree) < 0)
        r = -errno;
    if (r < 0) {
        int e = (int)-r;
        snprintf(msg, sizeof(msg), "%s the sandbox: %s", restore ? "restoring into" : "entering",
                 strerror(e));
        code = e == ESRCH ? CRL_STREAM_GONE : CRL_STREAM_FAILED;
        goto out;
    }
    close_range(5, ~0u, 0); /* the tree too: our cwd holds it */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &crl_spawner.seccomp) < 0 ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &crl_spawner.no_new_code) < 0) {
        snprintf(msg, sizeof(msg), "seccomp: %s", strerror(errno));
        goto out;
    }
    if (restore) {
        unsigned long n;
        code = crl_tar_apply(data, CRL_TAR_APPLY_OWNERS, &n, msg, sizeof(msg));
        goto out;
    }
    if (st->kind == CRL_STREAM_FS || st->kind == CRL_STREAM_WATCH) {
        /* our root is the sandbox's since the setns */
        int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
            code = crl_tar_status_of_errno(errno);
        else if (st->kind == CRL_STREAM_FS)
            code = crl_fsop_run(root, path, data, msg, sizeof(msg));
        else
            code = crl_fsop_watch(root, path, st->mode == 1, data, msg, sizeof(msg));
        goto out;
    }
    if (st->kind == CRL_STREAM_FILE_IN) {
        code = crl_file_in(data, msgfd, path, st->mode, msg, sizeof(msg));
        goto out;
    }
    if (st->kind == CRL_STREAM_TAR_IN)
        crl_mkdir_p(path, 0755);
    if (chdir(path) < 0) {
        int e = errno;
        snprintf(msg, sizeof(msg), "%s: %s", path, strerror(e));
        code = crl_tar_status_of_errno(e);
        goto out;
    }
    if (st->kind == CRL_STREAM_TAR_OUT) {
        code = crl_tar_out(data, msg, sizeof(msg)) < 0 ? CRL_STREAM_FAILED : CRL_STREAM_OK;
    } else {
        unsigned long n;
        if (crl_tar_in(data, &n, msg, sizeof(msg)) < 0) {
            code = CRL_STREAM_BAD_INPUT;
            goto out;
        }
        /* Read to the end: tar's records may pad past the end-of-archive
         * marker, and the uploader must not meet a closed pipe. */
        char sink[65536];
        while (read(data, sink, sizeof(sink)) > 0)
            ;
        snprintf(msg, sizeof(msg), "entries=%lu", n);
        code = CRL_STREAM_OK;
    }
out:
    dprintf(msgfd, "%s\n", msg);
    _exit(code);
}

void crl_spawner_handle_stream(const struct crl_spawn_req *rq, int *fds, int nfds)
{
    if ((unsigned)nfds != 3 + rq->u.stream.n_cgroup_fds || rq->strings_len == 0 ||
        rq->strings[rq->strings_len - 1] != 0 || rq->u.stream.kind > CRL_STREAM_WATCH) {
        crl_spawner_reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "stream: malformed request");
        return;
    }
    pid_t pid = fork();
    if (pid < 0) {
        crl_spawner_reply(rq->id, errno, CRL_STEP_CLONE, 0, NULL, 0, NULL);
        return;
    }
    if (pid == 0)
        stream_child(rq, fds, rq->strings);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    crl_spawner_reply(rq->id, 0, CRL_STEP_NONE, pid, &pidfd, pidfd >= 0 ? 1 : 0, NULL);
    if (pidfd >= 0)
        close(pidfd);
}
