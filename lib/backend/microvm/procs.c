/* What runs in a guest, as streams of the agent protocol: an exec (or a
 * session's shell) is an EXEC stream whose STDOUT and STDERR corrald
 * writes into the pipes the process's owner reads, and whose stdin it
 * reads from the pipe the owner writes.  The rest are the agent's
 * builtins on EXEC streams too: a file read (corral:file-out into a
 * memfd), a transfer (tar-out, tar-in, file-in on the owner's socket), a
 * checkpoint's layer (corral:layer-out into corral-unpack, view.c) and a
 * restore (corral:layer-in, its stdin the change set's memfd).
 *
 * Flow control end to end: the guest may send an exec's output only
 * within the window corrald grants, and corrald grants only what the
 * owner's pipe has taken, so a guest that prints without end fills a
 * pipe, not corrald's memory; stdin goes out only within the guest's
 * window. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../agent/msg.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "mvm_int.h"

#define CHUNK (64u * 1024u)
#define GRANT_AT (32u * 1024u)
/* The most a file read may bring into corrald's memory (a memfd). */
#define MAX_GET_BYTES (1ull << 30)

struct mvm_proc {
    struct mvm_proc *next;
    struct mvm_sandbox *m;
    struct crl_proc *p;              /* an exec's or a session's owner, or */
    struct crl_stream_req *t;        /* a stream's, or */
    struct crl_open_req *o;          /* a file read's (agent builtins), or */
    struct mvm_view *view;           /* a checkpoint's, or */
    struct crl_restore_req *restore; /* a restore's, or */
    bool sync;                       /* a destroy's corral:sync */
    uint64_t bytes;                  /* a file read's, so far */
    char why[256]; /* a builtin's stderr, kept where nobody reads it: why it failed */
    int memfd;     /* a file read's bytes, handed over whole */
    bool too_big;
    int status;
    uint32_t id;
    int out_w[2];           /* our ends of the owner's stdout and stderr pipes */
    struct crl_buf pend[2]; /* what the guest sent and the pipe has not taken */
    uint32_t ungranted;     /* bytes the pipes took and the guest was not credited */
    int in_r;               /* our end of the owner's stdin pipe, or a file (in_file) */
    bool in_file;           /* a restore's change set: read at in_off, never watched */
    off_t in_off;
    struct crl_watch w_in, w_out[2];
    bool started; /* its owner heard of its start: at STARTED, or before its EXIT */
    bool exit_seen, stdin_done;
};

static struct mvm_proc *find_proc(struct mvm_sandbox *m, uint32_t id)
{
    for (struct mvm_proc *x = m->procs; x; x = x->next)
        if (x->id == id)
            return x;
    return NULL;
}

static struct crl_loop *loop_of(struct mvm_sandbox *m)
{
    return m->sb->host->loop;
}

static bool serving(struct mvm_sandbox *m)
{
    return m && m->ready && !m->releasing && m->vm_started && !m->vm.dying;
}

/* ---- execs ---- */

static void grant(struct mvm_sandbox *m, uint32_t id, uint32_t *ungranted, bool force)
{
    if (!*ungranted || (!force && *ungranted < GRANT_AT))
        return;
    struct crl_agent_host_stream *s = crl_agent_host_stream(&m->vm.sess, id);
    struct crl_err err = CRL_ERR_INIT;
    if (!s) {
        *ungranted = 0;
        return;
    }
    if (crl_agent_window_grant(&s->win, *ungranted, &err) < 0) {
        mvm_vm_kill(&m->vm, "internal", "granting: %s", err.msg);
        return;
    }
    uint8_t f[CRL_AGENT_CREDIT_FRAME_SIZE];
    crl_agent_encode_credit(f, id, *ungranted);
    *ungranted = 0;
    mvm_vm_send(&m->vm, CRL_AGENT_CREDIT, id, f + CRL_AGENT_HEADER_SIZE, 4);
}

static void proc_free(struct mvm_proc *x)
{
    struct mvm_sandbox *m = x->m;
    struct crl_loop *loop = loop_of(m);
    for (struct mvm_proc **pp = &m->procs; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    crl_watch_stop(loop, &x->w_in);
    for (int i = 0; i < 2; i++) {
        crl_watch_stop(loop, &x->w_out[i]);
        close_fd(&x->out_w[i]);
        crl_buf_free(&x->pend[i]);
    }
    close_fd(&x->in_r);
    close_fd(&x->memfd);
    if (x->p)
        x->p->priv = NULL;
    free(x);
}

/* A file read ended: its owner gets the memfd, a directory's word, or why
 * not (the builtin's status and last line, as a stream's). */
static void open_finish(struct crl_open_req *o, int fd, int st, const char *why, bool too_big)
{
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    struct crl_err err = CRL_ERR_INIT;
    if (!too_big && code == CRL_STREAM_OK) {
        off_t size = lseek(fd, 0, SEEK_END);
        if (size >= 0 && lseek(fd, 0, SEEK_SET) == 0) {
            o->done(o, fd, false, (uint64_t)size, NULL);
            return;
        }
        crl_err_sys(&err, errno, "the file read's buffer");
    } else if (!too_big && code == CRL_STREAM_ISDIR) {
        o->done(o, fd, true, 0, NULL); /* the owner asks for a tar stream next */
        return;
    } else if (too_big) {
        crl_err_set(&err, CRL_E_TOO_LARGE, "%s: over %llu bytes, more than a read may take",
                    o->path, (unsigned long long)MAX_GET_BYTES);
    } else {
        enum crl_errc ec = code == CRL_STREAM_NOENT    ? CRL_E_NOT_FOUND
                           : code == CRL_STREAM_DENIED ? CRL_E_FORBIDDEN
                           : code == CRL_STREAM_NOTDIR || code == CRL_STREAM_BAD_INPUT
                               ? CRL_E_INVALID
                           : code == 128 + SIGKILL ? CRL_E_CONFLICT
                                                   : CRL_E_INTERNAL;
        crl_err_set(&err, ec, "reading %s: %s", o->path,
                    why[0]                  ? why
                    : code == 128 + SIGKILL ? "the sandbox ended meanwhile"
                                            : "failed");
    }
    if (fd >= 0)
        close(fd);
    o->done(o, -1, false, 0, &err);
}

/* A restore's corral:layer-in ended with `code` (its status, or 128 + a
 * signal). */
static void restore_finish(struct crl_restore_req *rq, int code, const char *why, bool live)
{
    struct crl_err err = CRL_ERR_INIT;
    rq->done(rq, crl_restore_error(code, why, live, &err) < 0 ? &err : NULL);
}

/* The process ended and its output is all in the pipes: tell the owner. */
static void maybe_finish(struct mvm_proc *x)
{
    if (!x->exit_seen || x->pend[0].len || x->pend[1].len)
        return;
    struct crl_proc *p = x->p;
    struct crl_stream_req *t = x->t;
    struct crl_open_req *o = x->o;
    struct mvm_view *view = x->view;
    struct crl_restore_req *rq = x->restore;
    struct mvm_sandbox *m = x->m;
    bool sync = x->sync;
    bool live = serving(x->m);
    int st = x->status, memfd = x->memfd;
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    bool too_big = x->too_big;
    char why[sizeof(x->why)];
    memcpy(why, x->why, sizeof(why));
    x->memfd = -1;
    x->p = NULL;
    proc_free(x);
    if (o)
        open_finish(o, memfd, st, why, too_big);
    if (view)
        mvm_view_guest_done(view, code, why);
    if (rq)
        restore_finish(rq, code, why, live);
    if (p) {
        p->priv = NULL;
        p->exited = true;
        p->on_exit(p);
    }
    if (t) /* the builtin's status is the stream's, or 128 + its signal */
        t->done(t, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    if (sync) /* the volumes are written back: the guest may end */
        mvm_vm_kill(&m->vm, "destroyed", "destroyed");
}

static void out_writable(struct crl_watch *w, uint32_t ev);

static void flush_pipe(struct mvm_proc *x, int i)
{
    struct crl_buf *b = &x->pend[i];
    while (b->len && x->out_w[i] >= 0) {
        ssize_t n = write(x->out_w[i], b->data, b->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            /* The owner closed its end: the output has nowhere to go, and
             * the guest may send on (its window given back). */
            x->ungranted += (uint32_t)b->len;
            crl_buf_consume(b, b->len);
            break;
        }
        crl_buf_consume(b, (size_t)n);
        x->ungranted += (uint32_t)n;
    }
    struct crl_loop *loop = loop_of(x->m);
    if (b->len && x->out_w[i] >= 0 && !x->w_out[i].active)
        crl_watch_start(loop, &x->w_out[i], x->out_w[i], EPOLLOUT, out_writable, x);
    else if (!b->len && x->w_out[i].active)
        crl_watch_stop(loop, &x->w_out[i]);
    if (x->exit_seen && !b->len)
        close_fd(&x->out_w[i]);
    grant(x->m, x->id, &x->ungranted, false);
}

static void out_writable(struct crl_watch *w, uint32_t ev)
{
    struct mvm_proc *x = w->data;
    int i = w == &x->w_out[0] ? 0 : 1;
    flush_pipe(x, i);
    maybe_finish(x);
}

static void stdin_readable(struct crl_watch *w, uint32_t ev);
static void stdin_pump(struct mvm_proc *x);
static void stdin_end(struct mvm_proc *x);
static int signal_proc(struct mvm_sandbox *m, struct mvm_proc *x, int sig,
                       enum crl_agent_signal_scope scope);

/* Stdin goes out while the guest's window is open: a pipe's as it is
 * readable, a file's (never readable as epoll sees it) at once. */
static void stdin_watch(struct mvm_proc *x)
{
    struct crl_agent_host_stream *s = crl_agent_host_stream(&x->m->vm.sess, x->id);
    bool want = x->in_r >= 0 && s && s->win.send > 0;
    struct crl_loop *loop = loop_of(x->m);
    if (x->in_file) {
        if (want)
            stdin_pump(x);
        return;
    }
    if (want && !x->w_in.active)
        crl_watch_start(loop, &x->w_in, x->in_r, EPOLLIN, stdin_readable, x);
    else if (!want && x->w_in.active)
        crl_watch_stop(loop, &x->w_in);
}

static void stdin_readable(struct crl_watch *w, uint32_t ev)
{
    stdin_pump(w->data);
}

/* Send what stdin has, within the window: a pipe's one read, a file's
 * until the window or the file ends. */
static void stdin_pump(struct mvm_proc *x)
{
    struct mvm_sandbox *m = x->m;
    for (;;) {
        struct crl_agent_host_stream *s = crl_agent_host_stream(&m->vm.sess, x->id);
        if (!s || !serving(m) || x->in_r < 0) {
            crl_watch_stop(loop_of(m), &x->w_in);
            return;
        }
        uint32_t room = s->win.send < CHUNK ? s->win.send : CHUNK;
        if (room == 0) {
            stdin_watch(x);
            return;
        }
        char buf[CHUNK];
        ssize_t n = x->in_file ? pread(x->in_r, buf, room, x->in_off) : read(x->in_r, buf, room);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            stdin_end(x);
            return;
        }
        struct crl_err err = CRL_ERR_INIT;
        if (crl_agent_window_sending(&s->win, (uint32_t)n, &err) < 0) {
            mvm_vm_kill(&m->vm, "internal", "stdin: %s", err.msg);
            return;
        }
        mvm_vm_send(&m->vm, CRL_AGENT_STDIN, x->id, buf, (uint32_t)n);
        x->in_off += n;
        if (!x->in_file) {
            stdin_watch(x);
            return;
        }
    }
}

/* Stdin ended (the owner closed it, or the file is all sent): the guest's
 * end closes too, but for an upload corrald has not committed, which dies
 * unfinished. */
static void stdin_end(struct mvm_proc *x)
{
    struct mvm_sandbox *m = x->m;
    crl_watch_stop(loop_of(m), &x->w_in);
    close_fd(&x->in_r);
    if (x->t && x->t->kind == CRL_STREAM_FILE_IN) {
        char c = 0;
        if (recv(x->out_w[1], &c, 1, MSG_DONTWAIT) != 1 || c != CRL_STREAM_COMMIT) {
            signal_proc(m, x, SIGKILL, CRL_AGENT_SIGNAL_TREE);
            return;
        }
    }
    mvm_vm_send(&m->vm, CRL_AGENT_STDIN, x->id, NULL, 0);
}

/* The guest ran it (STARTED), or says how it ended before that (EXIT: it
 * could not start, which the exec's status then says, as the container
 * backend does): its owner hears of its start first, once. */
static void proc_started(struct mvm_proc *x)
{
    if (x->started)
        return;
    x->started = true;
    if (x->p)
        x->p->on_start(x->p, NULL);
    if (x->t)
        x->t->started(x->t, NULL);
}

static void started_frame(struct mvm_proc *x, const struct crl_agent_frame *f)
{
    struct crl_agent_started st;
    struct crl_err err = CRL_ERR_INIT;
    if (x->started || crl_agent_parse_started(f->payload, f->len, &st, &err) < 0) {
        mvm_vm_kill(&x->m->vm, "agent_protocol", "%s",
                    x->started ? "STARTED twice on one stream" : err.msg);
        return;
    }
    if (x->p)
        x->p->ns_pid = st.pid;
    proc_started(x);
}

static void exit_frame(struct mvm_proc *x, const struct crl_agent_frame *f)
{
    struct mvm_sandbox *m = x->m;
    struct crl_agent_exit e;
    struct crl_err err = CRL_ERR_INIT;
    if (crl_agent_parse_exit(f->payload, f->len, &e, &err) < 0) {
        mvm_vm_kill(&m->vm, "agent_protocol", "%s", err.msg);
        return;
    }
    proc_started(x);
    struct crl_proc *p = x->p;
    switch (e.reason) {
    case CRL_AGENT_EXITED: x->status = W_EXITCODE(e.code, 0); break;
    case CRL_AGENT_OOM_KILLED:
        m->oom_kills++;
        x->status = W_EXITCODE(0, SIGKILL);
        break;
    case CRL_AGENT_SIGNALED: x->status = W_EXITCODE(0, e.signal); break;
    case CRL_AGENT_START_FAILED: {
        /* As the container backend says it: 127 and why on stderr. */
        char line[256];
        int n = snprintf(line, sizeof(line), "corral: %s: %s\n", p ? p->argv[0] : "builtin",
                         e.error_no == ENOENT ? "command not found" : strerror(e.error_no));
        crl_buf_append(&x->pend[1], line, (size_t)n);
        x->status = W_EXITCODE(e.error_no == ENOENT || e.error_no == ENOTDIR ? 127 : 126, 0);
        break;
    }
    }
    if (e.disk_bytes >= 0)
        m->disk_bytes = (uint64_t)e.disk_bytes;
    if (p) {
        p->status = x->status;
        p->cpu_s = (double)(e.utime_us + e.stime_us) / 1e6;
        p->maxrss_bytes = (uint64_t)e.maxrss_kb * 1024;
    }
    x->exit_seen = true;
    crl_watch_stop(loop_of(m), &x->w_in);
    close_fd(&x->in_r);
    flush_pipe(x, 0);
    flush_pipe(x, 1);
    maybe_finish(x);
}

static void proc_frame(struct mvm_proc *x, const struct crl_agent_frame *f)
{
    switch (f->type) {
    case CRL_AGENT_STDOUT:
    case CRL_AGENT_STDERR: {
        int i = f->type == CRL_AGENT_STDOUT ? 0 : 1;
        if (!x->p && !x->t && i == 1) { /* a builtin's stderr: why it failed, its last line */
            size_t have = strlen(x->why), room = sizeof(x->why) - 1 - have;
            size_t n = f->len < room ? f->len : room;
            memcpy(x->why + have, f->payload, n);
            x->why[have + n] = 0;
            for (char *c = x->why; *c; c++)
                if ((unsigned char)*c < 0x20)
                    *c = *(c + 1) ? ' ' : 0;
        }
        if (x->o && i == 0 && !x->too_big && (x->bytes += f->len) > MAX_GET_BYTES) {
            x->too_big = true;
            signal_proc(x->m, x, SIGKILL, CRL_AGENT_SIGNAL_TREE);
        }
        if (x->out_w[i] < 0 || x->too_big) {
            x->ungranted += f->len; /* nobody reads it: take it and let more come */
        } else if (crl_buf_append(&x->pend[i], f->payload, f->len) < 0) {
            mvm_vm_kill(&x->m->vm, "internal", "out of memory for an exec's output");
            return;
        }
        flush_pipe(x, i);
        return;
    }
    case CRL_AGENT_CREDIT: stdin_watch(x); return;
    case CRL_AGENT_STARTED: started_frame(x, f); return;
    case CRL_AGENT_EXIT: exit_frame(x, f); return;
    case CRL_AGENT_ERROR: {
        struct crl_agent_error e;
        struct crl_err err = CRL_ERR_INIT;
        if (crl_agent_parse_error(f->payload, f->len, &e, &err) < 0) {
            mvm_vm_kill(&x->m->vm, "agent_protocol", "%s", err.msg);
            return;
        }
        crl_warn(x->m->sb->id, "exec stream %u failed in the guest: %s", x->id, e.message);
        x->status = W_EXITCODE(0, SIGKILL);
        if (x->p)
            x->p->status = x->status;
        x->exit_seen = true;
        flush_pipe(x, 0);
        flush_pipe(x, 1);
        maybe_finish(x);
        return;
    }
    }
}

/* What a process in the guest is: its EXEC, and where its stdio goes
 * (corrald's ends: -1 for none). */
struct start {
    char *const *argv;
    char *const *envp;
    const char *cwd;
    uid_t uid;
    gid_t gid;
    bool tty;               /* a terminal of the guest's: its output comes on out_w */
    unsigned rows, cols;    /* tty */
    int out_w, err_w, in_r; /* taken, even on failure */
};

/* Open an EXEC stream for a new process; its owner hears of the start on
 * the loop, once this has returned. */
static struct mvm_proc *proc_start(struct mvm_sandbox *m, struct start *st, struct crl_err *err)
{
    int fds[3] = {st->out_w, st->err_w, st->in_r};
    if (!serving(m)) {
        crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", m->sb->id);
        goto fail;
    }
    struct mvm_proc *x = calloc(1, sizeof(*x));
    if (!x) {
        crl_err_sys(err, ENOMEM, "exec");
        goto fail;
    }
    size_t n_env = 0, argc = 0;
    while (st->envp && st->envp[n_env])
        n_env++;
    while (st->argv[argc])
        argc++;
    struct crl_agent_exec e = {
        .argv = (char **)st->argv,
        .argc = argc,
        .env = (char **)st->envp,
        .envc = n_env,
        .uid = st->uid,
        .gid = st->gid,
        .stdin_open = st->in_r >= 0,
        .tty = st->tty,
        .rows = st->rows,
        .cols = st->cols,
    };
    snprintf(e.cwd, sizeof(e.cwd), "%s", st->cwd && st->cwd[0] ? st->cwd : "/");
    char *json = NULL;
    size_t len = 0;
    if (crl_agent_build_exec(&e, &json, &len, err) < 0 ||
        crl_agent_host_open(&m->vm.sess, CRL_AGENT_STREAM_EXEC, &x->id, err) < 0) {
        free(json);
        free(x);
        goto fail;
    }
    if (mvm_vm_send_json(&m->vm, CRL_AGENT_EXEC, x->id, json, len) < 0) {
        crl_err_set(err, CRL_E_CONFLICT, "sandbox %s: its guest is gone", m->sb->id);
        free(x);
        goto fail;
    }
    x->m = m;
    x->memfd = -1;
    crl_buf_init(&x->pend[0], CRL_BUF_UNBOUNDED);
    crl_buf_init(&x->pend[1], CRL_BUF_UNBOUNDED);
    x->out_w[0] = st->out_w;
    x->out_w[1] = st->err_w;
    x->in_r = st->in_r;
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            crl_set_nonblock(fds[i], 1);
    x->next = m->procs;
    m->procs = x;
    return x;
fail:
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return NULL;
}

int mvm_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err)
{
    struct mvm_sandbox *m = sb->priv;
    /* A terminal's output is one stream: no stderr pipe. */
    int out[2] = {-1, -1}, er[2] = {-1, -1}, in[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) < 0 || (!p->tty && pipe2(er, O_CLOEXEC) < 0) ||
        pipe2(in, O_CLOEXEC) < 0) {
        crl_err_sys(err, errno, "an exec's pipes");
        close_fds(out, out[0] >= 0 ? 2 : 0);
        close_fds(er, er[0] >= 0 ? 2 : 0);
        return -1;
    }
    struct start st = {.argv = p->argv,
                       .envp = p->envp,
                       .cwd = p->cwd,
                       .uid = p->uid,
                       .gid = p->gid,
                       .tty = p->tty,
                       .rows = p->rows,
                       .cols = p->cols,
                       .out_w = out[1],
                       .err_w = er[1],
                       .in_r = in[0]};
    struct mvm_proc *x = proc_start(m, &st, err);
    if (!x) {
        close(out[0]);
        if (er[0] >= 0)
            close(er[0]);
        close(in[1]);
        return -1;
    }
    p->out_fd = out[0];
    p->err_fd = er[0];
    p->in_fd = in[1];
    p->pid = 0; /* the guest's, never a host pid */
    p->priv = x;
    x->p = p;
    stdin_watch(x);
    return 0;
}

/* The guest runs each exec in a process group of its own and signals the
 * group: the process and everything it started that stayed in it. */
static int signal_proc(struct mvm_sandbox *m, struct mvm_proc *x, int sig,
                       enum crl_agent_signal_scope scope)
{
    struct crl_agent_signal s = {.signal = sig, .scope = scope};
    char *json;
    size_t len;
    struct crl_err err = CRL_ERR_INIT;
    if (crl_agent_build_signal(&s, &json, &len, &err) < 0)
        return -1;
    return mvm_vm_send_json(&m->vm, CRL_AGENT_SIGNAL, x->id, json, len);
}

int mvm_signal(struct crl_sandbox *sb, struct crl_proc *p, int sig, enum crl_signal_scope scope,
               struct crl_err *err)
{
    struct mvm_sandbox *m = sb->priv;
    struct mvm_proc *x = p->priv;
    if (!x || x->exit_seen)
        return crl_err_set(err, CRL_E_CONFLICT, "process %d of %s has ended", (int)p->ns_pid,
                           sb->id);
    if (!serving(m))
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    enum crl_agent_signal_scope s = scope == CRL_SIGNAL_GROUP  ? CRL_AGENT_SIGNAL_GROUP
                                    : scope == CRL_SIGNAL_TREE ? CRL_AGENT_SIGNAL_TREE
                                                               : CRL_AGENT_SIGNAL_PROCESS;
    if (signal_proc(m, x, sig, s) < 0)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s: its guest is gone", sb->id);
    return 0;
}

int mvm_resize(struct crl_sandbox *sb, struct crl_proc *p, unsigned rows, unsigned cols,
               struct crl_err *err)
{
    struct mvm_sandbox *m = sb->priv;
    struct mvm_proc *x = p->priv;
    struct crl_agent_resize rz = {.rows = rows, .cols = cols};
    char *json;
    size_t len;
    if (!x || x->exit_seen)
        return crl_err_set(err, CRL_E_CONFLICT, "process %d of %s has ended", (int)p->ns_pid,
                           sb->id);
    if (!serving(m))
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    if (crl_agent_build_resize(&rz, &json, &len, err) < 0)
        return -1;
    if (mvm_vm_send_json(&m->vm, CRL_AGENT_RESIZE, x->id, json, len) < 0)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s: its guest is gone", sb->id);
    return 0;
}

int mvm_kill(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope)
{
    struct mvm_sandbox *m = sb->priv;
    struct mvm_proc *x = p->priv;
    if (!x || !serving(m) || x->exit_seen)
        return 0;
    /* A process alone is its tree here: the guest has no finer handle. */
    return signal_proc(m, x, SIGKILL,
                       scope == CRL_KILL_DESCENDANTS ? CRL_AGENT_SIGNAL_DESCENDANTS
                                                     : CRL_AGENT_SIGNAL_TREE);
}

/* ---- files ---- */

/* A file read is the agent's corral:file-out, run as the request's user,
 * its stdout into a memfd handed over whole (at most MAX_GET_BYTES). */
int mvm_open(struct crl_sandbox *sb, struct crl_open_req *o, struct crl_err *err)
{
    struct mvm_sandbox *m = sb->priv;
    if ((o->flags & O_ACCMODE) != O_RDONLY)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "microvm: files are written as uploads");
    int fd = memfd_create("corral-file", MFD_CLOEXEC);
    int keep = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (keep < 0) {
        crl_err_sys(err, errno, "a memfd for a file read");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char *argv[] = {"corral:file-out", (char *)o->path, NULL};
    char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    struct start st = {.argv = argv,
                       .envp = envp,
                       .cwd = "/",
                       .uid = o->uid,
                       .gid = o->gid,
                       .out_w = fd,
                       .err_w = -1,
                       .in_r = -1};
    struct mvm_proc *x = proc_start(m, &st, err);
    if (!x) {
        close(keep);
        return -1;
    }
    x->o = o;
    x->memfd = keep;
    return 0;
}

/* A stream is an agent builtin run as the stream's user (corral:tar-out,
 * corral:tar-in, corral:file-in), its stdout or stdin on the data socket,
 * its stderr on the message socket; its exit status is the stream's.  An
 * upload's stdin ends only once corrald commits it: an abandoned one is
 * killed, and its file never replaces the old. */
int mvm_stream(struct crl_sandbox *sb, struct crl_stream_req *t, struct crl_err *err)
{
    struct mvm_sandbox *m = sb->priv;
    int data[2] = {-1, -1}, msg[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, data) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, msg) < 0) {
        close_fds(data, data[0] >= 0 ? 2 : 0);
        return crl_err_sys(err, errno, "a stream's sockets");
    }
    bool out = crl_stream_out(t->kind);
    char mode[16];
    snprintf(mode, sizeof(mode), "%o", (unsigned)(t->mode ? t->mode & 07777 : 0644));
    static const char *const builtins[] = {[CRL_STREAM_TAR_OUT] = "corral:tar-out",
                                           [CRL_STREAM_TAR_IN] = "corral:tar-in",
                                           [CRL_STREAM_FILE_IN] = "corral:file-in",
                                           [CRL_STREAM_FS] = "corral:fs",
                                           [CRL_STREAM_WATCH] = "corral:watch"};
    char *argv[] = {(char *)builtins[t->kind], (char *)t->path,
                    t->kind == CRL_STREAM_FILE_IN ? mode
                    : t->kind == CRL_STREAM_WATCH ? (t->recursive ? "1" : "0")
                                                  : NULL,
                    NULL};
    char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    struct start st = {.argv = argv,
                       .envp = envp,
                       .cwd = "/",
                       .uid = t->uid,
                       .gid = t->gid,
                       .out_w = out ? data[1] : -1,
                       .err_w = msg[1],
                       .in_r = out ? -1 : data[1]};
    struct mvm_proc *x = proc_start(m, &st, err);
    if (!x) {
        close(data[0]);
        close(msg[0]);
        return -1;
    }
    shutdown(data[0], out ? SHUT_WR : SHUT_RD);
    t->data_fd = data[0];
    t->msg_fd = msg[0];
    x->t = t;
    stdin_watch(x);
    return 0;
}

void mvm_stream_cancel(struct crl_sandbox *sb, struct crl_stream_req *t)
{
    struct mvm_sandbox *m = sb->priv;
    for (struct mvm_proc *x = m ? m->procs : NULL; x; x = x->next)
        if (x->t == t && !x->exit_seen && serving(m))
            signal_proc(m, x, SIGKILL, CRL_AGENT_SIGNAL_TREE);
}

/* ---- checkpoints ---- */

/* The writable layer: corral:layer-out's tar into corral-unpack (view.c),
 * which makes the view. */
int mvm_snapshot_start(struct crl_sandbox *sb, struct crl_snapshot_req *rq, struct crl_err *err)
{
    struct mvm_sandbox *m = sb->priv;
    if (sb->state == CRL_SB_PAUSED)
        return crl_err_set(err, CRL_E_CONFLICT,
                           "sandbox %s is paused: its guest cannot hand its layer over; resume it",
                           sb->id);
    if (!serving(m))
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    int tar_w = -1;
    struct mvm_view *v = mvm_view_start(m, rq, &tar_w, err);
    if (!v)
        return -1;
    char *argv[] = {"corral:layer-out", NULL};
    char *envp[] = {NULL};
    struct start st = {.argv = argv, .envp = envp, .out_w = tar_w, .err_w = -1, .in_r = -1};
    struct mvm_proc *x = proc_start(m, &st, err);
    if (!x) { /* the helper meets the end of its stream: the view ends with it */
        mvm_view_guest_done(v, CRL_STREAM_GONE, err->msg);
        return 0;
    }
    x->view = v;
    return 0;
}

/* A change set applied through the guest's overlay by corral:layer-in, as
 * root, its stdin the change set's memfd. */
int mvm_restore(struct crl_sandbox *sb, struct crl_restore_req *rq, struct crl_err *err)
{
    struct mvm_sandbox *m = sb->priv;
    int in = fcntl(rq->tar_fd, F_DUPFD_CLOEXEC, 0);
    if (in < 0)
        return crl_err_sys(err, errno, "restore: dup");
    char *argv[] = {"corral:layer-in", NULL};
    char *envp[] = {NULL};
    struct start st = {.argv = argv, .envp = envp, .out_w = -1, .err_w = -1, .in_r = in};
    struct mvm_proc *x = proc_start(m, &st, err);
    if (!x)
        return -1;
    x->restore = rq;
    x->in_file = true;
    stdin_watch(x);
    return 0;
}

/* ---- a guest's volumes at its end ---- */

/* A destroy of a guest with a volume read-write: corral:sync writes back
 * what its kernel holds of it before QEMU is killed (maybe_finish kills it
 * then; a guest that does not finish within its deadline is killed by it,
 * and loses what it had not written, as a power cut would). */
int mvm_sync_volumes(struct mvm_sandbox *m, struct crl_err *err)
{
    char *argv[] = {"corral:sync", NULL};
    char *envp[] = {NULL};
    struct start st = {.argv = argv, .envp = envp, .out_w = -1, .err_w = -1, .in_r = -1};
    struct mvm_proc *x = proc_start(m, &st, err);
    if (!x)
        return -1;
    x->sync = true;
    mvm_vm_deadline(&m->vm, 10000, "the volumes written back at destroy");
    return 0;
}

/* ---- frames and the end ---- */

void mvm_procs_frame(struct mvm_sandbox *m, const struct crl_agent_frame *f)
{
    struct mvm_proc *p = find_proc(m, f->stream);
    if (p) {
        proc_frame(p, f);
        return;
    }
}

void mvm_procs_end(struct mvm_sandbox *m)
{
    while (m->procs) {
        struct mvm_proc *x = m->procs;
        if (x->p && !x->exit_seen)
            x->p->status = W_EXITCODE(0, SIGKILL);
        x->exit_seen = true;
        crl_buf_consume(&x->pend[0], x->pend[0].len);
        crl_buf_consume(&x->pend[1], x->pend[1].len);
        struct crl_proc *p = x->p;
        struct crl_stream_req *t = x->t;
        struct crl_open_req *o = x->o;
        struct mvm_view *view = x->view;
        struct crl_restore_req *rq = x->restore;
        bool started = x->started;
        x->p = NULL;
        proc_free(x);
        struct crl_err err = CRL_ERR_INIT;
        crl_err_set(&err, CRL_E_CONFLICT, "the sandbox's guest ended");
        if (view)
            mvm_view_guest_done(view, CRL_STREAM_GONE, NULL);
        if (rq)
            restore_finish(rq, CRL_STREAM_GONE, "", false);
        if (p && started) {
            p->exited = true;
            p->on_exit(p);
        } else if (p) {
            p->on_start(p, &err);
        }
        if (t && started)
            t->done(t, CRL_STREAM_GONE);
        else if (t)
            t->started(t, &err);
        if (o)
            o->done(o, -1, false, 0, &err);
    }
}
