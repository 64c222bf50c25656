#include "process.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"

struct crl_process {
    struct crl_sandbox *sb; /* a reference while the record lives */
    struct crl_exec_req req;
    struct crl_proc proc;
    char **envp;
    unsigned refs;
    bool listed;  /* in the sandbox's list: found by pid */
    bool started; /* reported to its starter */
    bool ended;
    double started_at, ended_at;
    uint64_t start_ns;
    uint64_t oom_before;
    bool timed_out;
    struct crl_exec_result res; /* its end; no output in it */
    /* output: chunks [head..tail], bytes [base, end) of the sequence */
    struct crl_chunk *head, *tail;
    uint64_t base, end;
    size_t kept;
    struct crl_watch w_out, w_err, w_in;
    /* stdin: bytes queued for it; closed once they are written, with eof */
    struct crl_buf in;
    bool in_eof, in_closed;
    struct crl_timer timer;
    struct crl_process_sub *subs;
    crl_process_started_fn started_cb;
    void *started_ctx;
    struct crl_process *next; /* the sandbox's, oldest first */
};

/* ---- the sandbox's list ---- */

static struct crl_process *first(struct crl_sandbox *sb)
{
    return sb->processes;
}

static void unlist(struct crl_process *x)
{
    if (!x->listed)
        return;
    struct crl_sandbox *sb = x->sb;
    for (struct crl_process **pp = &sb->processes; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    x->next = NULL;
    x->listed = false;
    char pid[16];
    snprintf(pid, sizeof(pid), "%d", (int)x->proc.ns_pid);
    crl_sandbox_child(sb, "process", pid, false);
    if (x->ended)
        sb->n_processes_ended--;
    else
        sb->n_processes_live--;
    crl_process_unref(x); /* the list's */
}

static void list_add(struct crl_process *x)
{
    struct crl_sandbox *sb = x->sb;
    if (x->req.hidden)
        return;
    /* A pid the sandbox reuses names the new process: the ended one goes. */
    for (struct crl_process *o = first(sb), *next; o; o = next) {
        next = o->next;
        if (o->ended && o->proc.ns_pid == x->proc.ns_pid)
            unlist(o);
    }
    struct crl_process **pp = &sb->processes;
    while (*pp)
        pp = &(*pp)->next;
    *pp = x;
    x->listed = true;
    sb->n_processes_live++;
    crl_process_ref(x);
    char pid[16];
    snprintf(pid, sizeof(pid), "%d", (int)x->proc.ns_pid);
    crl_sandbox_child(sb, "process", pid, true);
}

/* Keep the newest CRL_PROCESS_KEEP_ENDED ended records. */
static void trim_ended(struct crl_sandbox *sb)
{
    for (struct crl_process *o = first(sb), *next;
         o && sb->n_processes_ended > CRL_PROCESS_KEEP_ENDED; o = next) {
        next = o->next;
        if (o->ended)
            unlist(o);
    }
}

/* ---- notification ---- */

static void notify(struct crl_process *x)
{
    /* A subscriber may leave (or another may be freed) from its call: walk
     * a snapshot of the list, checking each is still on it. */
    crl_process_ref(x);
    size_t n = 0;
    for (struct crl_process_sub *s = x->subs; s; s = s->next)
        n++;
    struct crl_process_sub **v = n ? calloc(n, sizeof(*v)) : NULL;
    size_t k = 0;
    for (struct crl_process_sub *s = x->subs; s && v; s = s->next)
        v[k++] = s;
    for (size_t i = 0; i < k; i++) {
        bool still = false;
        for (struct crl_process_sub *s = x->subs; s; s = s->next)
            still |= s == v[i];
        if (still)
            v[i]->notify(v[i]);
    }
    free(v);
    crl_process_unref(x);
}

void crl_process_subscribe(struct crl_process *x, struct crl_process_sub *s)
{
    s->next = x->subs;
    x->subs = s;
}

void crl_process_unsubscribe(struct crl_process *x, struct crl_process_sub *s)
{
    for (struct crl_process_sub **pp = &x->subs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            s->next = NULL;
            return;
        }
}

/* ---- output ---- */

static void keep(struct crl_process *x, enum crl_exec_stream s, const char *data, size_t len)
{
    x->end += len;
    if (len > x->req.ring_bytes) { /* more than the ring holds: its tail */
        data += len - x->req.ring_bytes;
        len = x->req.ring_bytes;
    }
    struct crl_chunk *c = len ? malloc(sizeof(*c) + len) : NULL;
    if (c) {
        c->next = NULL;
        c->off = x->end - len;
        c->len = (uint32_t)len;
        c->stream = (uint8_t)s;
        memcpy(c->data, data, len);
        if (x->tail)
            x->tail->next = c;
        else
            x->head = c;
        x->tail = c;
        x->kept += len;
    }
    /* Drop the oldest bytes past the ring's size: whole chunks, then the
     * front of the oldest left. */
    while (x->head && x->kept > x->req.ring_bytes) {
        struct crl_chunk *h = x->head;
        size_t over = x->kept - x->req.ring_bytes;
        if (over < h->len) {
            memmove(h->data, h->data + over, h->len - over);
            h->off += over;
            h->len -= (uint32_t)over;
            x->kept -= over;
            break;
        }
        x->head = h->next;
        if (!x->head)
            x->tail = NULL;
        x->kept -= h->len;
        free(h);
    }
    x->base = x->head ? x->head->off : x->end;
}

static void close_watch(struct crl_process *x, struct crl_watch *w, int *fd)
{
    crl_watch_stop(x->sb->owner->loop, w);
    close_fd(fd);
}

/* Read what is there now; false at end of file or error (a terminal whose
 * every slave is closed reads EIO). */
static bool pump(struct crl_process *x, enum crl_exec_stream s)
{
    int fd = s == CRL_STDOUT ? x->proc.out_fd : x->proc.err_fd;
    char chunk[65536];
    bool got = false, more = true;
    for (int turn = 0; turn < 16; turn++) { /* 1 MiB a turn at most, as exec.c */
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            more = false;
            break;
        }
        keep(x, s, chunk, (size_t)n);
        got = true;
    }
    if (got)
        notify(x);
    return more;
}

static void on_out(struct crl_watch *w, uint32_t ev)
{
    struct crl_process *x = w->data;
    if (!pump(x, CRL_STDOUT))
        close_watch(x, &x->w_out, &x->proc.out_fd);
}

static void on_err(struct crl_watch *w, uint32_t ev)
{
    struct crl_process *x = w->data;
    if (!pump(x, CRL_STDERR))
        close_watch(x, &x->w_err, &x->proc.err_fd);
}

const struct crl_chunk *crl_process_output(const struct crl_process *x, uint64_t from,
                                           uint64_t *lost, uint64_t *end)
{
    *lost = from < x->base ? x->base - from : 0;
    *end = x->end;
    for (const struct crl_chunk *c = x->head; c; c = c->next)
        if (c->off + c->len > from)
            return c;
    return NULL;
}

/* ---- stdin ---- */

static void stdin_close(struct crl_process *x)
{
    x->in_closed = true;
    crl_buf_free(&x->in);
    if (x->proc.tty) {
        /* A terminal's input is its output's descriptor too: the line
         * discipline hears end-of-file (at the start of a line), and
         * the descriptor stays for reading and resizing. */
        crl_watch_stop(x->sb->owner->loop, &x->w_in);
        static const char eot = 4;
        if (x->proc.in_fd >= 0 && write(x->proc.in_fd, &eot, 1) < 0 && errno != EAGAIN)
            crl_debug(x->sb->id, "process %d: end of input: %s", (int)x->proc.ns_pid,
                      strerror(errno));
        close_watch(x, &x->w_in, &x->proc.in_fd);
        return;
    }
    close_watch(x, &x->w_in, &x->proc.in_fd);
}

static void on_in(struct crl_watch *w, uint32_t ev)
{
    struct crl_process *x = w->data;
    size_t before = x->in.len;
    while (x->in.len) {
        ssize_t n = write(x->proc.in_fd, x->in.data, x->in.len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n < 0) { /* it closed its stdin: what is queued goes nowhere */
            stdin_close(x);
            notify(x);
            return;
        }
        crl_buf_consume(&x->in, (size_t)n);
    }
    if (!x->in.len) {
        crl_watch_modify(x->sb->owner->loop, &x->w_in, 0);
        if (x->in_eof)
            stdin_close(x);
    }
    if (x->in.len < before)
        notify(x); /* room for a writer that waits */
}

int crl_process_stdin(struct crl_process *x, const char *data, size_t *len, bool eof,
                      struct crl_err *err)
{
    if (x->ended || x->in_closed || x->in_eof || x->proc.in_fd < 0)
        return crl_err_set(err, CRL_E_CONFLICT, "the stdin of process %d is closed%s",
                           (int)x->proc.ns_pid, x->ended ? ": it has ended" : "");
    size_t room = CRL_PROCESS_STDIN_MAX > x->in.len ? CRL_PROCESS_STDIN_MAX - x->in.len : 0;
    size_t take = *len < room ? *len : room;
    if (take && crl_buf_append(&x->in, data, take) < 0)
        return crl_err_sys(err, ENOMEM, "stdin of process %d", (int)x->proc.ns_pid);
    *len -= take;
    if (eof && !*len)
        x->in_eof = true;
    if (x->in.len) {
        crl_watch_modify(x->sb->owner->loop, &x->w_in, EPOLLOUT);
    } else if (x->in_eof) {
        stdin_close(x);
    }
    crl_sandbox_touch(x->sb);
    return 0;
}

bool crl_process_stdin_open(const struct crl_process *x)
{
    return !x->ended && !x->in_closed && !x->in_eof && x->proc.in_fd >= 0;
}

/* ---- its life ---- */

static void on_timeout(struct crl_timer *t)
{
    struct crl_process *x = t->data;
    x->timed_out = true;
    x->sb->owner->counters->exec_timeouts++;
    crl_info(x->sb->id, "process %d timed out after %.3fs: killing its process tree",
             (int)x->proc.ns_pid, x->req.timeout_s);
    x->sb->ops->kill(x->sb, &x->proc, CRL_KILL_TREE);
}

static void release_io(struct crl_process *x)
{
    struct crl_loop *loop = x->sb->owner->loop;
    crl_timer_stop(loop, &x->timer);
    close_watch(x, &x->w_in, &x->proc.in_fd);
    close_watch(x, &x->w_out, &x->proc.out_fd);
    close_watch(x, &x->w_err, &x->proc.err_fd);
    crl_buf_free(&x->in);
}

static void proc_exited(struct crl_proc *p)
{
    struct crl_process *x = p->owner;
    struct crl_sandbox *sb = x->sb;
    /* What it wrote before it exited is in the pipes (or the terminal). */
    if (p->out_fd >= 0)
        pump(x, CRL_STDOUT);
    if (p->err_fd >= 0)
        pump(x, CRL_STDERR);
    bool killed = sb->state != CRL_SB_READY && sb->state != CRL_SB_PAUSED;
    bool oom = !x->timed_out && crl_exec_oom_kills(sb) > x->oom_before;
    crl_exec_describe_end(p, x->timed_out, killed, oom, &x->res);
    x->res.duration_s = (double)(crl_now_ns() - x->start_ns) / 1e9;
    x->ended_at = crl_wall_s();
    x->ended = true;
    x->in_closed = true;
    release_io(x);
    crl_sandbox_proc_done(sb, p);
    if (x->listed) {
        sb->n_processes_live--;
        sb->n_processes_ended++;
    }
    crl_debug(sb->id, "process %d ended: %s", (int)p->ns_pid, x->res.reason);
    notify(x);
    if (x->listed)
        trim_ended(sb);
    crl_process_unref(x); /* the run's */
}

static void proc_started(struct crl_proc *p, const struct crl_err *err)
{
    struct crl_process *x = p->owner;
    struct crl_loop *loop = x->sb->owner->loop;
    crl_process_started_fn cb = x->started_cb;
    x->started_cb = NULL;
    if (err) {
        crl_timer_stop(loop, &x->timer);
        x->ended = true;
        if (cb)
            cb(NULL, err, x->started_ctx);
        crl_process_unref(x); /* the run's: the record goes */
        return;
    }
    x->started = true;
    x->started_at = crl_wall_s();
    crl_set_nonblock(p->out_fd, 1);
    crl_set_nonblock(p->in_fd, 1);
    crl_watch_start(loop, &x->w_out, p->out_fd, EPOLLIN, on_out, x);
    if (p->err_fd >= 0) {
        crl_set_nonblock(p->err_fd, 1);
        crl_watch_start(loop, &x->w_err, p->err_fd, EPOLLIN, on_err, x);
    }
    crl_watch_start(loop, &x->w_in, p->in_fd, 0, on_in, x);
    list_add(x);
    if (x->req.stdin_len) { /* all of it, whatever the queue's bound: the request held it */
        if (crl_buf_append(&x->in, x->req.stdin_data, x->req.stdin_len) < 0)
            crl_warn(x->sb->id, "process %d: no memory for its stdin", (int)p->ns_pid);
        else
            crl_watch_modify(loop, &x->w_in, EPOLLOUT);
        free(x->req.stdin_data);
        x->req.stdin_data = NULL;
        x->req.stdin_len = 0;
    }
    if (cb) {
        crl_process_ref(x); /* the starter's */
        cb(x, NULL, x->started_ctx);
    }
}

static void process_free(struct crl_process *x)
{
    struct crl_sandbox *sb = x->sb;
    release_io(x);
    crl_sandbox_proc_done(sb, &x->proc); /* if it never started */
    for (struct crl_chunk *c = x->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    crl_exec_req_free(&x->req);
    crl_strv_free(x->envp);
    free(x);
    crl_sandbox_unref(sb);
}

void crl_process_ref(struct crl_process *x)
{
    x->refs++;
}

void crl_process_unref(struct crl_process *x)
{
    if (x && --x->refs == 0)
        process_free(x);
}

/* The sandbox ends: its records go with it (readers keep theirs), and
 * what runs is killed with it. */
static void sandbox_ending(struct crl_sandbox *sb)
{
    while (sb->processes)
        unlist(sb->processes);
}

int crl_process_start(struct crl_sandbox *sb, struct crl_exec_req *req,
                      crl_process_started_fn started, void *ctx, struct crl_err *err)
{
    struct crl_process *x = NULL;
    int ready = crl_exec_check(sb, err);
    if (ready == 0 && !sb->ops->signal)
        ready = crl_err_set(err, CRL_E_UNSUPPORTED,
                            "the %s backend has no background processes in this version",
                            sb->ops->name);
    if (ready == 0 && req->tty && !sb->ops->resize)
        ready =
            crl_err_set(err, CRL_E_UNSUPPORTED, "the %s backend has no terminals", sb->ops->name);
    if (ready == 0 && sb->n_processes_live >= CRL_PROCESS_MAX_LIVE)
        ready = crl_err_set(err, CRL_E_CAPACITY, "sandbox %s runs %u background processes already",
                            sb->id, sb->n_processes_live);
    if (ready == 0 && crl_sandbox_on_end(sb, sandbox_ending, err) < 0)
        ready = -1;
    if (ready < 0 || !(x = calloc(1, sizeof(*x)))) {
        if (ready == 0)
            crl_err_sys(err, ENOMEM, "process");
        crl_exec_req_free(req);
        return -1;
    }
    x->sb = sb;
    crl_sandbox_ref(sb);
    x->req = *req;
    memset(req, 0, sizeof(*req));
    x->refs = 1; /* the run's, until it ends */
    crl_buf_init(&x->in, CRL_BUF_UNBOUNDED);
    if (crl_exec_prepare(sb, &x->req, &x->proc, &x->envp, err) < 0)
        goto fail;
    x->proc.tty = x->req.tty;
    x->proc.rows = x->req.rows;
    x->proc.cols = x->req.cols;
    x->proc.in_fd = x->proc.out_fd = x->proc.err_fd = -1;
    x->proc.owner = x;
    x->proc.on_start = proc_started;
    x->proc.on_exit = proc_exited;
    x->started_cb = started;
    x->started_ctx = ctx;
    x->oom_before = crl_exec_oom_kills(sb);
    x->start_ns = crl_now_ns();
    if (crl_sandbox_spawn(sb, &x->proc, err) < 0)
        goto fail;
    if (x->req.timeout_s > 0)
        crl_timer_start(sb->owner->loop, &x->timer, (uint64_t)(x->req.timeout_s * 1e9), on_timeout,
                        x);
    sb->owner->counters->execs++;
    crl_sandbox_touch(sb);
    return 0;
fail:
    x->started_cb = NULL;
    process_free(x);
    return -1;
}

struct crl_process *crl_process_find(struct crl_sandbox *sb, const char *pid, struct crl_err *err)
{
    char *end;
    errno = 0;
    long v = strtol(pid, &end, 10);
    if (errno || end == pid || *end || v <= 0 || v > INT32_MAX) {
        crl_err_set(err, CRL_E_INVALID, "'%s' is not a process id (a pid of the sandbox's)", pid);
        return NULL;
    }
    struct crl_process *found = NULL;
    for (struct crl_process *x = first(sb); x; x = x->next)
        if (x->proc.ns_pid == (pid_t)v)
            found = x; /* the newest */
    const char *lost = found ? NULL : crl_sandbox_child_lost(sb, "process", pid);
    if (lost) {
        crl_err_set(err, CRL_E_CONFLICT, "background process %ld of sandbox %s is lost: %s", v,
                    sb->id, lost);
        return NULL;
    }
    if (!found) {
        crl_err_set(err, CRL_E_NOT_FOUND,
                    "sandbox %s has no background process %ld (started through the processes "
                    "API, and not forgotten)",
                    sb->id, v);
        return NULL;
    }
    crl_process_ref(found);
    return found;
}

int crl_process_pid(const struct crl_process *x)
{
    return (int)x->proc.ns_pid;
}

bool crl_process_ended(const struct crl_process *x)
{
    return x->ended;
}

const struct crl_exec_result *crl_process_result(const struct crl_process *x)
{
    return &x->res;
}

json_t *crl_process_json(const struct crl_process *x)
{
    json_t *o = json_object();
    json_object_set_new(o, "pid", json_integer(x->proc.ns_pid));
    json_t *argv = json_array();
    for (char **a = x->req.argv; a && *a; a++)
        json_array_append_new(argv, json_string(*a));
    json_object_set_new(o, "cmd", x->req.shell ? json_string(x->req.argv[2]) : argv);
    if (x->req.shell)
        json_decref(argv);
    json_object_set_new(o, "tag", x->req.tag ? json_string(x->req.tag) : json_null());
    json_object_set_new(o, "tty", json_boolean(x->proc.tty));
    json_object_set_new(o, "state", json_string(x->ended ? "exited" : "running"));
    json_object_set_new(o, "started_at", crl_json_time(x->started_at));
    json_object_set_new(o, "ended_at", crl_json_time(x->ended_at));
    json_object_set_new(o, "stdin_open", json_boolean(crl_process_stdin_open(x)));
    json_object_set_new(o, "output",
                        json_pack("{s:I, s:I, s:I}", "start", (json_int_t)x->base, "end",
                                  (json_int_t)x->end, "buffer_bytes",
                                  (json_int_t)x->req.ring_bytes));
    json_object_set_new(o, "result", x->ended ? crl_exec_result_json(&x->res, false) : json_null());
    return o;
}

json_t *crl_process_list_json(struct crl_sandbox *sb, const char *state)
{
    json_t *a = json_array();
    for (struct crl_process *x = first(sb); x; x = x->next)
        if (!state || strcmp(state, x->ended ? "exited" : "running") == 0)
            json_array_append_new(a, crl_process_json(x));
    return json_pack("{s:o}", "processes", a);
}

int crl_process_signal(struct crl_process *x, int sig, enum crl_signal_scope scope,
                       struct crl_err *err)
{
    struct crl_sandbox *sb = x->sb;
    if (x->ended)
        return crl_err_set(err, CRL_E_CONFLICT, "process %d has ended", (int)x->proc.ns_pid);
    if (!sb->ops->signal)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "the %s backend sends no signals",
                           sb->ops->name);
    if (crl_sandbox_check_ready(sb, err) < 0)
        return -1;
    crl_sandbox_touch(sb);
    return sb->ops->signal(sb, &x->proc, sig, scope, err);
}

int crl_process_resize(struct crl_process *x, unsigned rows, unsigned cols, struct crl_err *err)
{
    struct crl_sandbox *sb = x->sb;
    if (!x->proc.tty)
        return crl_err_set(err, CRL_E_CONFLICT, "process %d has no terminal (start it with tty)",
                           (int)x->proc.ns_pid);
    if (x->ended)
        return crl_err_set(err, CRL_E_CONFLICT, "process %d has ended", (int)x->proc.ns_pid);
    crl_sandbox_touch(sb);
    return sb->ops->resize(sb, &x->proc, rows, cols, err);
}

void crl_process_forget(struct crl_process *x)
{
    if (!x->ended)
        x->sb->ops->kill(x->sb, &x->proc, CRL_KILL_TREE);
    unlist(x);
}

int crl_signal_parse(const char *s)
{
    if (!s || !*s)
        return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (end != s)
        return *end == 0 && v >= 1 && v <= 64 ? (int)v : 0;
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (int sig = 1; sig < 32; sig++) {
        const char *name = sigabbrev_np(sig);
        if (name && strcasecmp(s, name) == 0)
            return sig;
    }
    return 0;
}
