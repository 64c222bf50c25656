/* EXEC: a child in its own session with the host's uid, gid, cwd and env,
 * its stdin, stdout and stderr on pipes the loop pumps; its EXIT once it
 * is reaped and its output has ended. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "serve_int.h"

/* In the child, between fork and exec: errno goes back on `report`.  A
 * terminal's slave (m->tty: in, out and errfd) becomes the controlling
 * terminal of the session it makes. */
static void __attribute__((noreturn))
child(const struct crl_agent_exec *m, int in, int out, int errfd, int report, int procs)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (procs >= 0 && write(procs, "0", 1) != 1) /* into the exec's cgroup, first */
        goto fail;
    signal(SIGPIPE, SIG_DFL);
    setsid();
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(errfd, 2) < 0)
        goto fail;
    if (m->tty && ioctl(0, TIOCSCTTY, 0) < 0)
        goto fail;
    if (getuid() == 0 && setgroups(0, NULL) < 0)
        goto fail;
    if ((m->gid != getgid() && setgid(m->gid) < 0) || (m->uid != getuid() && setuid(m->uid) < 0))
        goto fail;
    if (chdir(m->cwd) < 0)
        goto fail;
    environ = m->env;
    if (strncmp(m->argv[0], CRL_GA_BUILTIN_PREFIX, strlen(CRL_GA_BUILTIN_PREFIX)) == 0) {
        /* No exec closes what the agent holds: its end of this child's
         * stdin among it, which would never see its end of file. */
        bool layer = strcmp(m->argv[0], CRL_GA_BUILTIN_LAYER_OUT) == 0 && m->uid == 0;
        if (layer && crl_ga_rw_fd >= 0 && dup2(crl_ga_rw_fd, CRL_GA_LAYER_FD) < 0)
            goto fail;
        close_range(layer ? CRL_GA_LAYER_FD + 1 : 3, ~0u, 0); /* report too: started */
        _exit(crl_ga_builtin(m->argv));
    }
    execvp(m->argv[0], m->argv);
fail:;
    int e = errno;
    (void)!write(report, &e, sizeof(e));
    _exit(127);
}

/* PID 1's: the guest's whole tree is its own.  A service's: below its
 * own cgroup, which systemd delegates to it. */
char crl_ga_leaves[256] = "/sys/fs/cgroup/corral";
#define LEAVES crl_ga_leaves

/* A cgroup for exec `id` (a directory descriptor), or -1 where the guest
 * has no cgroup2: then kills go by session. */
static int leaf_make(uint32_t id)
{
    char path[sizeof(crl_ga_leaves) + 16];
    if (mkdir(LEAVES, 0755) < 0 && errno != EEXIST)
        return -1;
    if (snprintf(path, sizeof(path), "%s/e%u", LEAVES, id) >= (int)sizeof(path))
        return -1;
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return -1;
    return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static int send_exit(struct agent *a, struct stream *s, struct crl_err *err)
{
    struct crl_agent_exit m = {0};
    if (WIFSIGNALED(s->status)) {
        m.reason = CRL_AGENT_SIGNALED;
        m.signal = WTERMSIG(s->status);
    } else {
        m.reason = CRL_AGENT_EXITED;
        m.code = WEXITSTATUS(s->status);
    }
    m.utime_us = (int64_t)s->ru.ru_utime.tv_sec * 1000000 + s->ru.ru_utime.tv_usec;
    m.stime_us = (int64_t)s->ru.ru_stime.tv_sec * 1000000 + s->ru.ru_stime.tv_usec;
    m.maxrss_kb = s->ru.ru_maxrss;
    struct statfs sf;
    m.disk_bytes = crl_ga_rw_fd >= 0 && fstatfs(crl_ga_rw_fd, &sf) == 0
                       ? (int64_t)(sf.f_blocks - sf.f_bfree) * (int64_t)sf.f_bsize
                       : -1;
    char *j;
    size_t n;
    if (crl_agent_build_exit(&m, &j, &n, err) < 0)
        return -1;
    return crl_ga_queue_json(a, CRL_AGENT_EXIT, s->id, j, n, err);
}

static int start_failed(struct agent *a, uint32_t id, int errnum, struct crl_err *err)
{
    struct crl_agent_exit m = {.reason = CRL_AGENT_START_FAILED,
                               .error_no = errnum > 0 && errnum < 4096 ? errnum : EIO,
                               .disk_bytes = -1};
    char *j;
    size_t n;
    if (crl_agent_build_exit(&m, &j, &n, err) < 0)
        return -1;
    return crl_ga_queue_json(a, CRL_AGENT_EXIT, id, j, n, err);
}

/* A terminal of the guest's devpts, rows x cols, owned by the exec's user
 * (group tty, 0620): its master in *tty, dups of it for our ends of stdin
 * (if the EXEC asked for it) and stdout, and its slave as the child's
 * stdin, stdout and stderr.  Its output comes as STDOUT alone.  0 or an
 * errno. */
static int open_tty(const struct crl_agent_exec *m, int *tty, int *p_in, int *p_out, int *p_err)
{
    int unlock = 0;
    struct winsize ws = {.ws_row = (unsigned short)m->rows, .ws_col = (unsigned short)m->cols};
    int master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC), slave = -1;
    if (master < 0 || ioctl(master, TIOCSPTLCK, &unlock) < 0 ||
        (slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 ||
        ioctl(slave, TIOCSWINSZ, &ws) < 0 || fchown(slave, m->uid, (gid_t)-1) < 0 ||
        fchmod(slave, 0620) < 0 || (p_out[0] = fcntl(master, F_DUPFD_CLOEXEC, 0)) < 0 ||
        (m->stdin_open && (p_in[1] = fcntl(master, F_DUPFD_CLOEXEC, 0)) < 0) ||
        (p_out[1] = fcntl(slave, F_DUPFD_CLOEXEC, 0)) < 0 ||
        (p_err[1] = fcntl(slave, F_DUPFD_CLOEXEC, 0)) < 0) {
        int e = errno ? errno : EIO;
        close_fd(&p_out[0]);
        close_fd(&p_in[1]);
        close_fd(&p_out[1]);
        close_fd(&p_err[1]);
        close_fd(&slave);
        close_fd(&master);
        return e;
    }
    p_in[0] = slave; /* the child's stdin, closed here once it has forked */
    *tty = master;
    return 0;
}

int crl_ga_exec_start(struct agent *a, uint32_t id, const struct crl_agent_frame *f,
                      struct crl_err *err)
{
    struct crl_err perr = CRL_ERR_INIT;
    struct crl_agent_exec m;
    if (crl_agent_parse_exec(f->payload, f->len, &m, &perr) < 0)
        return crl_ga_stream_fail(a, NULL, id, perr.msg, err);
    int p_out[2] = {-1, -1}, p_err[2] = {-1, -1}, p_in[2] = {-1, -1}, rep[2] = {-1, -1};
    int tty = -1, e = 0;
    if (pipe2(rep, O_CLOEXEC) < 0)
        e = errno;
    else if (m.tty)
        e = open_tty(&m, &tty, p_in, p_out, p_err);
    else if (pipe2(p_out, O_CLOEXEC) < 0 || pipe2(p_err, O_CLOEXEC) < 0)
        e = errno;
    else if (m.stdin_open && pipe2(p_in, O_CLOEXEC) < 0)
        e = errno;
    else if (!m.stdin_open && (p_in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        e = errno;
    struct stream *s = e ? NULL : crl_ga_stream_new(a, id, K_EXEC);
    if (!e && !s)
        e = ENOMEM;
    /* As PID 1 or a system's service, each exec gets a cgroup of its own
     * in the guest: its tree, however detached, is what a kill of it
     * reaches. */
    int procs = -1;
    if (!e && crl_ga_reconnects(a->o) && (s->leaf = leaf_make(id)) >= 0)
        procs = openat(s->leaf, "cgroup.procs", O_WRONLY | O_CLOEXEC);
    pid_t pid = -1;
    if (!e && (pid = fork()) < 0)
        e = errno;
    if (pid == 0)
        child(&m, p_in[0], p_out[1], p_err[1], rep[1], procs);
    close_fd(&procs);
    crl_agent_exec_free(&m);
    close_fd(&p_in[0]);
    close_fd(&p_out[1]);
    close_fd(&p_err[1]);
    close_fd(&rep[1]);
    if (!e) {
        /* EOF: the exec happened (the pipe is close-on-exec); else its errno. */
        int got = 0;
        ssize_t n;
        while ((n = read(rep[0], &got, sizeof(got))) < 0 && errno == EINTR)
            ;
        if (n == (ssize_t)sizeof(got)) {
            e = got;
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
            pid = -1;
        }
    }
    close_fd(&rep[0]);
    if (e) {
        close_fd(&p_out[0]);
        close_fd(&p_err[0]);
        close_fd(&p_in[1]);
        close_fd(&tty);
        if (s)
            crl_ga_stream_drop(a, s);
        return start_failed(a, id, e, err);
    }
    s->pid = pid;
    s->out[0] = p_out[0];
    s->out[1] = p_err[0];
    s->in = p_in[1];
    s->tty = tty;
    s->has_stdin = s->in >= 0;
    if (s->in >= 0)
        crl_set_nonblock(s->in, 1);
    crl_set_nonblock(s->out[0], 1);
    if (s->out[1] >= 0)
        crl_set_nonblock(s->out[1], 1);
    /* It runs: the host learns its pid before any of its output. */
    struct crl_agent_started st = {.pid = pid};
    char *j;
    size_t n;
    if (crl_agent_build_started(&st, &j, &n, err) < 0)
        return -1;
    return crl_ga_queue_json(a, CRL_AGENT_STARTED, id, j, n, err);
}

/* Write queued STDIN to the pipe; close it at the host's EOF.  Bytes the
 * child will never read (it closed stdin) are dropped but still granted
 * back, so the host is not left waiting on a window. */
int crl_ga_exec_stdin(struct agent *a, struct stream *s, struct crl_err *err)
{
    while (s->in >= 0 && s->in_buf.len > 0) {
        ssize_t n = write(s->in, s->in_buf.data, s->in_buf.len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n < 0) {
            close_fd(&s->in); /* EPIPE: the child is done reading */
            break;
        }
        s->ungranted += (uint32_t)n;
        crl_buf_consume(&s->in_buf, (size_t)n);
    }
    if (s->in < 0 && s->in_buf.len > 0) {
        s->ungranted += (uint32_t)s->in_buf.len;
        crl_buf_consume(&s->in_buf, s->in_buf.len);
    }
    if (s->in_eof && s->in_buf.len == 0)
        close_fd(&s->in);
    return crl_ga_send_credit(a, s, s->in_buf.len == 0, err);
}

/* Read one chunk of the child's output (i: 0 stdout, 1 stderr) within
 * the window. */
int crl_ga_exec_output(struct agent *a, struct stream *s, int i, struct crl_err *err)
{
    uint32_t room = s->win.send < CHUNK ? s->win.send : CHUNK;
    if (room == 0)
        return 0;
    char buf[CHUNK];
    ssize_t n;
    while ((n = read(s->out[i], buf, room)) < 0 && errno == EINTR)
        ;
    if (n < 0 && errno == EAGAIN)
        return 0;
    if (n <= 0) {
        close_fd(&s->out[i]);
        return 0;
    }
    if (crl_agent_window_sending(&s->win, (uint32_t)n, err) < 0)
        return -1;
    return crl_ga_queue(a, i == 0 ? CRL_AGENT_STDOUT : CRL_AGENT_STDERR, s->id, buf, (uint32_t)n,
                        err);
}

/* An exec whose child is reaped and whose pipes are at their end: EXIT. */
int crl_ga_exec_maybe_end(struct agent *a, struct stream *s, struct crl_err *err)
{
    if (s->kind != K_EXEC || s->pid != 0 || s->out[0] >= 0 || s->out[1] >= 0)
        return 0;
    int r = send_exit(a, s, err);
    crl_ga_stream_drop(a, s);
    return r;
}

void crl_ga_exec_tidy(void)
{
    DIR *d = opendir(LEAVES);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] == 'e')
            unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR); /* EBUSY while a process is in it */
    if (d)
        closedir(d);
}

/* Every process of a cgroup but `spare`: 1 if it could be read. */
static int leaf_signal(int leaf, int sig, pid_t spare)
{
    int fd = openat(leaf, "cgroup.procs", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return 0;
    }
    long pid;
    while (fscanf(f, "%ld", &pid) == 1)
        if (pid > 1 && pid != spare)
            kill((pid_t)pid, sig);
    fclose(f);
    return 1;
}

static void session_signal(pid_t leader, const struct crl_agent_signal *m);

void crl_ga_exec_signal(struct stream *s, const struct crl_agent_signal *m)
{
    /* The process, or the group it leads (setsid made it a leader). */
    if (m->scope == CRL_AGENT_SIGNAL_PROCESS || m->scope == CRL_AGENT_SIGNAL_GROUP) {
        if (s->pid > 0)
            kill(m->scope == CRL_AGENT_SIGNAL_GROUP ? -s->pid : s->pid, m->signal);
        return;
    }
    bool tree = m->scope == CRL_AGENT_SIGNAL_TREE;
    if (s->leaf >= 0) {
        /* A kill of the tree is the kernel's, atomic with respect to forks;
         * other signals, and a tree but its leader, go one by one, twice
         * (a process forked meanwhile is caught the second time). */
        if (tree && m->signal == SIGKILL && crl_write_file_at(s->leaf, "cgroup.kill", "1") == 0)
            return;
        if (leaf_signal(s->leaf, m->signal, tree ? 0 : s->pid) &&
            leaf_signal(s->leaf, m->signal, tree ? 0 : s->pid))
            return;
    }
    if (s->pid > 0)
        session_signal(s->pid, m);
}

/* Each exec leads a session of its own (setsid in the child): what it
 * started in the background stays in that session or its process group
 * unless it makes a session of its own. */
static void session_signal(pid_t leader, const struct crl_agent_signal *m)
{
    if (m->scope == CRL_AGENT_SIGNAL_TREE)
        kill(-leader, m->signal);
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 1 || pid == leader)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        if (crl_read_file_at(AT_FDCWD, path, buf, sizeof(buf)) <= 0)
            continue;
        char *rp = strrchr(buf, ')'); /* the command may hold anything but the last ')' */
        long ppid, pgrp, sid;
        char state;
        if (rp && sscanf(rp + 1, " %c %ld %ld %ld", &state, &ppid, &pgrp, &sid) == 4 &&
            (sid == leader || pgrp == leader))
            kill((pid_t)pid, m->signal);
    }
    if (d)
        closedir(d);
    if (m->scope == CRL_AGENT_SIGNAL_TREE)
        kill(leader, m->signal);
}

void crl_ga_reap(struct agent *a)
{
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG, &ru);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            return;
        for (struct stream *s = a->streams; s; s = s->next)
            if (s->kind == K_EXEC && s->pid == pid) {
                s->pid = 0;
                s->status = status;
                s->ru = ru;
                break;
            }
    }
}
