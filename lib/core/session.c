#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"

#define MARK_CHAR '\036' /* ASCII record separator: never in ordinary output */

struct crl_session {
    char id[24];
    struct crl_sandbox *sb;
    struct crl_proc proc;
    char *argv[2];
    char **envp;
    char *cwd;
    struct crl_watch w_in, w_out, w_err;
    struct crl_buf inq;
    struct crl_buf win[2]; /* per stream: bytes not yet known to be outside a marker */
    bool alive, started, closing;
    bool resyncing; /* taken back from a corrald before: its command is ours, not a client's */
    /* A client's command that came while resyncing: it waits a moment. */
    bool has_next;
    struct crl_exec_req next_req;
    struct crl_exec_cbs next_cbs;
    void *next_ctx;
    crl_session_open_cb open_cb;
    void *open_ctx;
    /* the command running now */
    bool busy, cancelled, timed_out;
    bool done[2];
    int rc;
    char mark[2][48];
    size_t mark_len[2];
    struct crl_exec_req req;
    struct crl_exec_cbs cbs;
    void *ctx;
    struct crl_exec_result res;
    struct crl_timer timer;
    uint64_t start_ns;
    struct crl_session *next;
};

static unsigned long long session_seq;

const char *crl_session_id(const struct crl_session *s)
{
    return s->id;
}

bool crl_session_alive(const struct crl_session *s)
{
    return s->alive;
}

json_t *crl_session_json(const struct crl_session *s)
{
    return json_pack("{s:s, s:b, s:b}", "session_id", s->id, "alive", s->alive, "busy", s->busy);
}

json_t *crl_session_list_json(struct crl_sandbox *sb)
{
    json_t *a = json_array();
    for (struct crl_session *s = sb->sessions; s; s = s->next)
        json_array_append_new(a, crl_session_json(s));
    const char *id;
    json_t *v;
    json_object_foreach(json_object_get(sb->lost_children, "session"), id, v) json_array_append_new(
        a, json_pack("{s:s, s:b, s:b, s:s, s:s}", "session_id", id, "alive", 0, "busy", 0, "state",
                     "lost", "reason", crl_sandbox_child_lost(sb, "session", id)));
    return json_pack("{s:o}", "sessions", a);
}

struct crl_session *crl_session_find(struct crl_sandbox *sb, const char *id, struct crl_err *err)
{
    for (struct crl_session *s = sb->sessions; s; s = s->next)
        if (strcmp(s->id, id) == 0)
            return s;
    const char *lost = crl_sandbox_child_lost(sb, "session", id);
    if (lost)
        crl_err_set(err, CRL_E_CONFLICT, "session '%s' of sandbox %s is lost: %s", id, sb->id,
                    lost);
    else
        crl_err_set(err, CRL_E_NOT_FOUND, "session '%s' not found in sandbox %s", id, sb->id);
    return NULL;
}

static struct crl_loop *loop_of(struct crl_session *s)
{
    return s->sb->owner->loop;
}

static void stop_fd(struct crl_session *s, struct crl_watch *w, int *fd)
{
    crl_watch_stop(loop_of(s), w);
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* ---- the running command ---- */

static void emit(struct crl_session *s, int i, const char *data, size_t len)
{
    if (!len)
        return;
    struct crl_buf *b = i == 0 ? &s->res.out : &s->res.err;
    if (s->req.stream) {
        size_t room = b->cap > b->len ? b->cap - b->len : 0;
        size_t take = len < room ? len : room;
        b->len += take;
        b->dropped += len - take;
        if (take && !s->cancelled && s->cbs.on_output)
            s->cbs.on_output(s->ctx, i == 0 ? CRL_STDOUT : CRL_STDERR, data, take);
    } else {
        crl_buf_append(b, data, len);
    }
}

static void start_next(struct crl_session *s);

static void run_finish(struct crl_session *s)
{
    crl_timer_stop(loop_of(s), &s->timer);
    s->res.duration_s = (double)(crl_now_ns() - s->start_ns) / 1e9;
    if (s->alive) {
        s->res.exit_code = s->rc;
        s->res.signal = 0;
        s->res.reason = s->timed_out ? "timeout" : "exited";
    } else {
        crl_exec_describe_end(&s->proc, s->timed_out, false, false, &s->res);
    }
    s->busy = s->resyncing = false;
    if (!s->cancelled)
        s->cbs.on_done(s->ctx, &s->res, NULL);
    crl_exec_req_free(&s->req);
    crl_buf_free(&s->res.out);
    crl_buf_free(&s->res.err);
    if (s->has_next)
        start_next(s);
}

/* Feed the bytes of stream i through the marker search.  The window holds
 * at most the marker's length plus what follows a candidate on stdout, so
 * output that mimics the marker (a sandbox can learn the nonce from its
 * own shell's memory) costs no more than ordinary output. */
static void scan(struct crl_session *s, int i)
{
    struct crl_buf *w = &s->win[i];
    if (!s->busy || s->done[i]) {
        w->len = 0; /* output between commands (background jobs) is dropped */
        return;
    }
    const char *m = s->mark[i];
    size_t ml = s->mark_len[i];
    for (;;) {
        const char *hit = w->len >= ml ? memmem(w->data, w->len, m, ml) : NULL;
        if (!hit) {
            /* Everything but a tail that could be the start of the marker. */
            size_t keep = ml - 1;
            if (w->len > keep) {
                emit(s, i, w->data, w->len - keep);
                crl_buf_consume(w, w->len - keep);
            }
            return;
        }
        size_t pos = (size_t)(hit - w->data);
        if (i == 1) {
            emit(s, i, w->data, pos);
            crl_buf_consume(w, pos + ml);
            break;
        }
        /* stdout: "<rc>\036" follows, a few digits at most */
        size_t after = w->len - pos - ml;
        const char *end = memchr(hit + ml, MARK_CHAR, after < 12 ? after : 12);
        if (end) {
            s->rc = (int)strtol(hit + ml, NULL, 10);
            emit(s, i, w->data, pos);
            crl_buf_consume(w, (size_t)(end + 1 - w->data));
            break;
        }
        if (after < 12) { /* wait for the rest */
            emit(s, i, w->data, pos);
            crl_buf_consume(w, pos);
            return;
        }
        /* not the marker after all: it is output */
        emit(s, i, w->data, pos + 1);
        crl_buf_consume(w, pos + 1);
    }
    s->done[i] = true;
    w->len = 0;
    if (s->done[0] && s->done[1])
        run_finish(s);
}

static void read_stream(struct crl_session *s, int i)
{
    int *fd = i == 0 ? &s->proc.out_fd : &s->proc.err_fd;
    char chunk[65536];
    for (;;) {
        ssize_t n = read(*fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            stop_fd(s, i == 0 ? &s->w_out : &s->w_err, fd);
            return;
        }
        crl_buf_append(&s->win[i], chunk, (size_t)n);
        scan(s, i);
    }
}

static void on_out(struct crl_watch *w, uint32_t ev)
{
    read_stream(w->data, 0);
}

static void on_err(struct crl_watch *w, uint32_t ev)
{
    read_stream(w->data, 1);
}

static void on_in(struct crl_watch *w, uint32_t ev)
{
    struct crl_session *s = w->data;
    while (s->inq.len) {
        ssize_t n = write(s->proc.in_fd, s->inq.data, s->inq.len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n < 0) {
            stop_fd(s, &s->w_in, &s->proc.in_fd);
            return;
        }
        crl_buf_consume(&s->inq, (size_t)n);
    }
    crl_watch_modify(loop_of(s), &s->w_in, 0);
}

/* A command the shell runs itself (a builtin loop) outlives the kill of
 * what it started, on a timeout or a cancel: after this grace the shell
 * goes too, and the session. */
#define SESSION_KILL_GRACE_NS (2ull * 1000000000ull)

static void on_grace(struct crl_timer *t)
{
    struct crl_session *s = t->data;
    crl_info(s->sb->id, "session %s: the %s command runs in the shell itself: ending the session",
             s->id, s->cancelled ? "cancelled" : "timed-out");
    s->sb->ops->kill(s->sb, &s->proc, CRL_KILL_TREE);
}

static void on_timeout(struct crl_timer *t)
{
    struct crl_session *s = t->data;
    s->timed_out = true;
    s->sb->owner->counters->exec_timeouts++;
    crl_info(s->sb->id, "session %s: command timed out after %.3fs: killing what it started", s->id,
             s->req.timeout_s);
    s->sb->ops->kill(s->sb, &s->proc, CRL_KILL_DESCENDANTS);
    crl_timer_start(loop_of(s), &s->timer, SESSION_KILL_GRACE_NS, on_grace, s);
}

/* Single-quote for the shell: ' becomes '\'' */
static int append_quoted(struct crl_buf *b, const char *s)
{
    if (crl_buf_append(b, "'", 1) < 0)
        return -1;
    for (const char *p = s; *p; p++) {
        if (*p == '\'') {
            if (crl_buf_append(b, "'\\''", 4) < 0)
                return -1;
        } else if (crl_buf_append(b, p, 1) < 0) {
            return -1;
        }
    }
    return crl_buf_append(b, "'", 1);
}

static int run_refused(struct crl_exec_req *req)
{
    crl_exec_req_free(req);
    return -1;
}

/* Queue `cmd` for the shell, followed by its markers with a fresh nonce. */
static int send_command(struct crl_session *s, const char *cmd, struct crl_err *err)
{
    unsigned char r[16];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return crl_err_sys(err, errno, "getrandom");
    char nonce[33];
    for (int i = 0; i < 16; i++)
        snprintf(nonce + 2 * i, 3, "%02x", r[i]);
    s->mark_len[0] = (size_t)snprintf(s->mark[0], sizeof(s->mark[0]), "%c%s ", MARK_CHAR, nonce);
    s->mark_len[1] =
        (size_t)snprintf(s->mark[1], sizeof(s->mark[1]), "%c%s%c", MARK_CHAR, nonce, MARK_CHAR);
    size_t before = s->inq.len;
    if (crl_buf_append(&s->inq, "command eval ", 13) < 0 || append_quoted(&s->inq, cmd) < 0 ||
        crl_buf_printf(&s->inq,
                       " </dev/null\nprintf '\\036%%s %%d\\036' %s \"$?\"; printf '\\036%%s\\036' "
                       "%s >&2\n",
                       nonce, nonce) < 0) {
        s->inq.len = before;
        return crl_err_sys(err, ENOMEM, "session command");
    }
    return 0;
}

/* The command just queued is the one running now. */
static void begin(struct crl_session *s)
{
    s->busy = true;
    s->cancelled = s->timed_out = false;
    s->done[0] = s->done[1] = false;
    s->rc = 0;
    memset(&s->res, 0, sizeof(s->res));
    crl_buf_init(&s->res.out, s->req.max_output);
    crl_buf_init(&s->res.err, s->req.max_output);
    s->win[0].len = s->win[1].len = 0;
    s->start_ns = crl_now_ns();
    if (s->proc.in_fd >= 0)
        crl_watch_modify(loop_of(s), &s->w_in, EPOLLOUT);
}

/* How long a command waits for a session taken back to reach a
 * command's boundary: at once for a shell that was idle, never for one
 * whose command runs on. */
#define SESSION_RESYNC_WAIT_NS (2ull * 1000000000ull)

static void drop_next(struct crl_session *s, enum crl_errc code, const char *why)
{
    if (!s->has_next)
        return;
    struct crl_err e = CRL_ERR_INIT;
    crl_err_set(&e, code, "session %s %s", s->id, why);
    s->has_next = false;
    crl_exec_req_free(&s->next_req);
    s->next_cbs.on_done(s->next_ctx, NULL, &e);
}

static void next_waited(struct crl_timer *t)
{
    drop_next(t->data, CRL_E_CONFLICT,
              "is finishing what it ran when corrald restarted; run one command at a time");
}

int crl_session_run(struct crl_session *s, struct crl_exec_req *req, const struct crl_exec_cbs *cbs,
                    void *ctx, struct crl_err *err)
{
    if (crl_sandbox_check_ready(s->sb, err) < 0)
        return run_refused(req);
    if (!s->alive) {
        crl_err_set(err, CRL_E_CONFLICT, "session %s has ended", s->id);
        return run_refused(req);
    }
    if (s->busy && s->resyncing && !s->has_next) {
        s->next_req = *req;
        memset(req, 0, sizeof(*req));
        s->next_cbs = *cbs;
        s->next_ctx = ctx;
        s->has_next = true;
        crl_timer_start(loop_of(s), &s->timer, SESSION_RESYNC_WAIT_NS, next_waited, s);
        return 0;
    }
    if (s->busy || !s->started) {
        crl_err_set(err, CRL_E_CONFLICT, "session %s is %s; run one command at a time", s->id,
                    s->started ? "running a command" : "starting");
        return run_refused(req);
    }
    /* argv[2] is the command string (a session takes only strings) */
    if (send_command(s, req->argv[2], err) < 0)
        return run_refused(req);
    s->req = *req;
    memset(req, 0, sizeof(*req));
    s->cbs = *cbs;
    s->ctx = ctx;
    begin(s);
    if (s->req.timeout_s > 0)
        crl_timer_start(loop_of(s), &s->timer, (uint64_t)(s->req.timeout_s * 1e9), on_timeout, s);
    s->sb->owner->counters->execs++;
    crl_sandbox_touch(s->sb);
    if (s->cbs.on_start)
        s->cbs.on_start(s->ctx);
    return 0;
}

/* The command that waited for the resync: its turn now. */
static void start_next(struct crl_session *s)
{
    struct crl_exec_req req = s->next_req;
    struct crl_err err = CRL_ERR_INIT;
    s->has_next = false;
    memset(&s->next_req, 0, sizeof(s->next_req));
    if (crl_session_run(s, &req, &s->next_cbs, s->next_ctx, &err) < 0)
        s->next_cbs.on_done(s->next_ctx, NULL, &err);
}

void crl_session_pause_output(struct crl_session *s, bool pause)
{
    crl_watch_modify(loop_of(s), &s->w_out, pause ? 0 : EPOLLIN);
    crl_watch_modify(loop_of(s), &s->w_err, pause ? 0 : EPOLLIN);
}

void crl_session_cancel_run(struct crl_session *s)
{
    if (s->has_next) { /* its command waited behind ours, which runs on */
        s->has_next = false;
        crl_exec_req_free(&s->next_req);
        crl_timer_stop(loop_of(s), &s->timer);
        return;
    }
    if (s->busy) {
        s->cancelled = true;
        s->sb->ops->kill(s->sb, &s->proc, CRL_KILL_DESCENDANTS);
        crl_timer_start(loop_of(s), &s->timer, SESSION_KILL_GRACE_NS, on_grace, s);
    }
}

/* ---- the shell ---- */

static void session_free(struct crl_session *s)
{
    crl_timer_stop(loop_of(s), &s->timer);
    stop_fd(s, &s->w_in, &s->proc.in_fd);
    stop_fd(s, &s->w_out, &s->proc.out_fd);
    stop_fd(s, &s->w_err, &s->proc.err_fd);
    crl_buf_free(&s->inq);
    crl_buf_free(&s->win[0]);
    crl_buf_free(&s->win[1]);
    crl_exec_req_free(&s->req);
    crl_exec_req_free(&s->next_req);
    crl_buf_free(&s->res.out);
    crl_buf_free(&s->res.err);
    crl_strv_free(s->envp);
    free(s->argv[0]);
    free(s->cwd);
    free(s);
}

static void unlink_session(struct crl_session *s)
{
    for (struct crl_session **pp = &s->sb->sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            s->sb->n_sessions--;
            crl_sandbox_child(s->sb, "session", s->id, false);
            return;
        }
}

/* A handover: the shell runs on for the next corrald, and we let go. */
static void let_go(struct crl_session *s)
{
    drop_next(s, CRL_E_UNAVAILABLE, "runs on, but corrald is restarting: run it again");
    if (s->busy && !s->cancelled) {
        struct crl_err e = CRL_ERR_INIT;
        crl_err_set(&e, CRL_E_UNAVAILABLE,
                    "corrald is restarting: session %s runs on, this command's result is lost",
                    s->id);
        s->cbs.on_done(s->ctx, NULL, &e);
    }
    s->busy = false;
    s->cancelled = true;
    struct crl_sandbox *sb = s->sb;
    crl_sandbox_ref(sb); /* handing the process back may drop the last reference */
    unlink_session(s);
    crl_sandbox_release_proc(sb, &s->proc);
    session_free(s);
    crl_sandbox_unref(sb);
}

/* The sandbox's end hook: every session closes before its processes are
 * killed and the backend tears it down; at a handover, those whose shells
 * outlive corrald are let go instead. */
static void close_all(struct crl_sandbox *sb)
{
    while (sb->sessions) {
        struct crl_session *s = sb->sessions;
        if (sb->handed_over && s->alive && !s->closing && s->proc.outlives)
            let_go(s);
        else
            crl_session_close(s);
    }
}

/* Its shell runs: read and write it. */
static void watch_shell(struct crl_session *s)
{
    struct crl_proc *p = &s->proc;
    s->alive = true;
    crl_set_nonblock(p->in_fd, 1);
    crl_set_nonblock(p->out_fd, 1);
    crl_set_nonblock(p->err_fd, 1);
    crl_watch_start(loop_of(s), &s->w_out, p->out_fd, EPOLLIN, on_out, s);
    crl_watch_start(loop_of(s), &s->w_err, p->err_fd, EPOLLIN, on_err, s);
    crl_watch_start(loop_of(s), &s->w_in, p->in_fd, 0, on_in, s);
}

static void shell_exited(struct crl_proc *p)
{
    struct crl_session *s = p->owner;
    struct crl_sandbox *sb = s->sb;
    crl_sandbox_ref(sb); /* handing the process back may drop the last reference */
    s->alive = false;
    /* Output still in the pipes belongs to the last command. */
    if (s->proc.out_fd >= 0)
        read_stream(s, 0);
    if (s->proc.err_fd >= 0)
        read_stream(s, 1);
    if (s->busy) {
        for (int i = 0; i < 2; i++)
            if (!s->done[i] && s->win[i].len)
                emit(s, i, s->win[i].data, s->win[i].len);
        run_finish(s);
    }
    crl_debug(sb->id, "session %s: shell exited", s->id);
    crl_sandbox_proc_done(sb, &s->proc);
    if (s->closing)
        session_free(s);
    crl_sandbox_unref(sb);
}

static void shell_started(struct crl_proc *p, const struct crl_err *err)
{
    struct crl_session *s = p->owner;
    struct crl_sandbox *sb = s->sb;
    crl_session_open_cb cb = s->open_cb;
    void *ctx = s->open_ctx;
    if (err) {
        crl_sandbox_ref(sb);
        crl_sandbox_proc_done(sb, &s->proc);
        if (!s->closing)
            unlink_session(s);
        session_free(s);
        if (cb)
            cb(NULL, err, ctx);
        crl_sandbox_unref(sb);
        return;
    }
    s->started = true;
    if (s->closing) {
        sb->ops->kill(sb, &s->proc, CRL_KILL_TREE);
        return;
    }
    watch_shell(s);
    /* In its sandbox's record from now on (its opener learns its id now),
     * with what a corrald started anew takes it back by if its backend can. */
    json_t *shell = crl_sandbox_proc_record(sb, p);
    crl_sandbox_child_is(sb, "session", s->id,
                         shell ? json_pack("{s:s, s:o}", "shell", s->argv[0], "proc", shell)
                               : json_true());
    if (cb)
        cb(s, NULL, ctx);
}

/* A session of this sandbox's that the last corrald left, as its record
 * had it: its shell back, or why not.  What the shell was doing when that
 * corrald died is unknown (a command may still run; its client is gone,
 * and the end of what it wrote into the pipes meanwhile is there to read):
 * a command of ours, whose markers come back once the shell reads its
 * input again, brings the session back to a command's boundary, and until
 * then it is busy and its output is dropped. */
/* A session of sb, not listed yet, with its buffers and its shell's
 * process set up as every session's is; `shell` (argv[0]) is taken. */
static struct crl_session *session_new(struct crl_sandbox *sb, char *shell)
{
    struct crl_session *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->sb = sb;
    crl_buf_init(&s->inq, CRL_BUF_UNBOUNDED);
    crl_buf_init(&s->win[0], CRL_BUF_UNBOUNDED);
    crl_buf_init(&s->win[1], CRL_BUF_UNBOUNDED);
    s->argv[0] = shell;
    s->proc.argv = s->argv;
    s->proc.session = true;
    s->proc.setsid = true;
    s->proc.owner = s;
    s->proc.on_start = shell_started;
    s->proc.on_exit = shell_exited;
    return s;
}

static void link_session(struct crl_session *s)
{
    s->next = s->sb->sessions;
    s->sb->sessions = s;
    s->sb->n_sessions++;
}

int crl_session_adopt(struct crl_sandbox *sb, const char *id, json_t *rec, struct crl_err *err)
{
    const char *shell = json_string_value(json_object_get(rec, "shell"));
    if (!json_is_object(rec) || !shell)
        return crl_err_set(err, CRL_E_INVALID,
                           "its shell had not started, or its backend did not keep it for a "
                           "corrald started anew (docs/api.md says when)");
    if (strlen(id) >= sizeof(((struct crl_session *)0)->id))
        return crl_err_set(err, CRL_E_INVALID, "its id is too long");
    if (crl_sandbox_on_end(sb, close_all, err) < 0)
        return -1;
    char *argv0 = strdup(shell);
    struct crl_session *s = argv0 ? session_new(sb, argv0) : NULL;
    if (!s) {
        free(argv0);
        return crl_err_sys(err, ENOMEM, "session");
    }
    snprintf(s->id, sizeof(s->id), "%s", id);
    if (crl_sandbox_adopt_proc(sb, &s->proc, json_object_get(rec, "proc"), err) < 0) {
        session_free(s);
        return -1;
    }
    s->started = true;
    link_session(s);
    crl_sandbox_child_is(sb, "session", s->id, json_incref(rec));
    watch_shell(s);
    struct crl_err e = CRL_ERR_INIT;
    if (send_command(s, ":", &e) < 0) {
        crl_warn(sb->id, "session %s: %s: ending it", s->id, e.msg);
        sb->ops->kill(sb, &s->proc, CRL_KILL_TREE);
        return 0;
    }
    s->req.stream = true; /* into buffers that keep nothing: max_output 0 */
    begin(s);
    s->cancelled = s->resyncing = true;
    return 0;
}

int crl_session_open(struct crl_sandbox *sb, struct crl_session_req *req, crl_session_open_cb cb,
                     void *ctx, struct crl_err *err)
{
    if (crl_sandbox_check_ready(sb, err) < 0)
        return -1;
    if (!sb->image)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "sandbox %s has no image to run a shell from",
                           sb->id);
    if (crl_sandbox_on_end(sb, close_all, err) < 0)
        return -1;
    struct crl_session *s = session_new(sb, req->shell);
    if (!s)
        return crl_err_sys(err, ENOMEM, "session");
    req->shell = NULL;
    /* A given id (a trajectory's session, opened again) or a new one that
     * no session of this sandbox has, whatever ids were given before. */
    struct crl_err ignored;
    if (req->id[0])
        snprintf(s->id, sizeof(s->id), "%s", req->id);
    else
        do
            snprintf(s->id, sizeof(s->id), "ss-%llu", ++session_seq);
        while (crl_session_find(sb, s->id, &ignored) ||
               crl_sandbox_child_lost(sb, "session", s->id));
    s->cwd = req->cwd;
    req->cwd = NULL;
    s->envp = crl_env_merge(sb->image->env, sb->spec.env, req->env);
    if (!s->envp) {
        session_free(s);
        return crl_err_sys(err, ENOMEM, "session environment");
    }
    s->proc.envp = s->envp;
    s->proc.cwd = s->cwd ? s->cwd : sb->spec.cwd ? sb->spec.cwd : sb->image->cwd;
    struct crl_user user = req->user;
    if (!user.set && crl_image_user(sb->image, &user, err) < 0) {
        session_free(s);
        return -1;
    }
    s->proc.uid = user.uid;
    s->proc.gid = user.gid;
    s->open_cb = cb;
    s->open_ctx = ctx;
    if (crl_sandbox_spawn(sb, &s->proc, err) < 0) {
        session_free(s);
        return -1;
    }
    link_session(s);
    crl_sandbox_touch(sb);
    return 0;
}

void crl_session_close(struct crl_session *s)
{
    if (s->closing)
        return;
    s->closing = true;
    if (!s->started && s->open_cb) {
        /* Its opener is still waiting: answer it now. */
        struct crl_err e = CRL_ERR_INIT;
        crl_err_set(&e, CRL_E_CONFLICT, "session %s was closed before its shell started", s->id);
        crl_session_open_cb cb = s->open_cb;
        s->open_cb = NULL;
        cb(NULL, &e, s->open_ctx);
    }
    drop_next(s, CRL_E_CONFLICT, "was closed before its command ran");
    if (s->busy && !s->cancelled) {
        struct crl_err e = CRL_ERR_INIT;
        crl_err_set(&e, CRL_E_CONFLICT, "session %s was closed while its command ran", s->id);
        s->busy = false;
        s->cbs.on_done(s->ctx, NULL, &e);
    }
    s->cancelled = true;
    s->open_cb = NULL;
    unlink_session(s);
    if (s->started && !s->alive) {
        session_free(s); /* the shell is gone already */
        return;
    }
    /* Freed when the shell's exit is reported (or its start fails). */
    if (s->started)
        s->sb->ops->kill(s->sb, &s->proc, CRL_KILL_TREE);
}
