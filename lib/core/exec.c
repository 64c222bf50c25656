#include "exec.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"

struct crl_exec {
    struct crl_sandbox *sb;
    struct crl_exec_req req;
    struct crl_proc proc;
    struct crl_exec_cbs cbs;
    void *ctx;
    struct crl_exec_result res;
    struct crl_watch w_in, w_out, w_err;
    size_t in_off;
    struct crl_timer timer;
    uint64_t start_ns;
    uint64_t oom_before;
    bool timed_out, cancelled;
    char **envp;
};

char **crl_env_merge(char *const *a, char *const *b, char *const *c)
{
    size_t n = crl_strv_len(a) + crl_strv_len(b) + crl_strv_len(c);
    char **out = calloc(n + 1, sizeof(char *));
    if (!out)
        return NULL;
    size_t k = 0;
    char *const *src[3] = {a, b, c};
    for (int s = 0; s < 3; s++)
        for (char *const *e = src[s]; e && *e; e++) {
            const char *eq = strchr(*e, '=');
            size_t kl = eq ? (size_t)(eq - *e) : strlen(*e);
            size_t i;
            for (i = 0; i < k; i++)
                if (strncmp(out[i], *e, kl) == 0 && out[i][kl] == '=')
                    break;
            char *dup = strdup(*e);
            if (!dup) {
                crl_strv_free(out);
                return NULL;
            }
            if (i < k) {
                free(out[i]);
                out[i] = dup;
            } else {
                out[k++] = dup;
            }
        }
    return out;
}

json_t *crl_output_json(const char *key, const char *data, size_t len)
{
    json_t *o = json_object();
    if (crl_utf8_valid(data, len)) {
        json_object_set_new(o, key, json_stringn(data ? data : "", len));
    } else {
        cleanup_free char *b64 = crl_base64_encode(data, len, NULL);
        json_object_set_new(o, key, json_string(b64 ? b64 : ""));
        json_object_set_new(o, "encoding", json_string("base64"));
    }
    return o;
}

json_t *crl_exec_result_json(const struct crl_exec_result *r, bool with_output)
{
    json_t *o = json_object();
    json_object_set_new(o, "exit_code", r->signal ? json_null() : json_integer(r->exit_code));
    json_object_set_new(o, "signal", r->signal ? json_integer(r->signal) : json_null());
    if (r->signal) {
        const char *abbrev = sigabbrev_np(r->signal);
        if (abbrev) {
            char name[32];
            snprintf(name, sizeof(name), "SIG%s", abbrev);
            json_object_set_new(o, "signal_name", json_string(name));
        }
    }
    json_object_set_new(o, "reason", json_string(r->reason));
    if (with_output) {
        /* One encoding for both streams, so a client decodes them alike. */
        bool text =
            crl_utf8_valid(r->out.data, r->out.len) && crl_utf8_valid(r->err.data, r->err.len);
        if (text) {
            json_object_set_new(o, "stdout",
                                json_stringn(r->out.data ? r->out.data : "", r->out.len));
            json_object_set_new(o, "stderr",
                                json_stringn(r->err.data ? r->err.data : "", r->err.len));
            json_object_set_new(o, "encoding", json_string("utf-8"));
        } else {
            cleanup_free char *o64 = crl_base64_encode(r->out.data, r->out.len, NULL);
            cleanup_free char *e64 = crl_base64_encode(r->err.data, r->err.len, NULL);
            json_object_set_new(o, "stdout", json_string(o64 ? o64 : ""));
            json_object_set_new(o, "stderr", json_string(e64 ? e64 : ""));
            json_object_set_new(o, "encoding", json_string("base64"));
        }
    }
    json_object_set_new(o, "stdout_truncated", json_boolean(crl_buf_truncated(&r->out)));
    json_object_set_new(o, "stderr_truncated", json_boolean(crl_buf_truncated(&r->err)));
    json_object_set_new(o, "truncated",
                        json_boolean(crl_buf_truncated(&r->out) || crl_buf_truncated(&r->err)));
    json_object_set_new(o, "duration_s", json_real(r->duration_s));
    json_object_set_new(o, "cpu_s", json_real(r->cpu_s));
    json_object_set_new(o, "peak_memory_bytes", json_integer((json_int_t)r->peak_memory_bytes));
    return o;
}

void crl_exec_describe_end(struct crl_proc *p, bool timed_out, bool killed, bool oom,
                           struct crl_exec_result *r)
{
    if (WIFSIGNALED(p->status)) {
        r->exit_code = -1;
        r->signal = WTERMSIG(p->status);
    } else {
        r->exit_code = WEXITSTATUS(p->status);
        r->signal = 0;
    }
    bool sigkilled = r->signal == SIGKILL || (!r->signal && r->exit_code == 128 + SIGKILL);
    if (timed_out)
        r->reason = "timeout";
    else if (oom && sigkilled)
        r->reason = "oom";
    else if (killed)
        r->reason = "killed";
    else if (r->signal)
        r->reason = "signaled";
    else
        r->reason = "exited";
    r->cpu_s = p->cpu_s;
    r->peak_memory_bytes = p->maxrss_bytes;
}

static void close_watch(struct crl_exec *x, struct crl_watch *w, int *fd)
{
    crl_watch_stop(x->sb->owner->loop, w);
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Read what is there now; false at end of file or error. */
static bool pump(struct crl_exec *x, enum crl_exec_stream s)
{
    int fd = s == CRL_STDOUT ? x->proc.out_fd : x->proc.err_fd;
    struct crl_buf *b = s == CRL_STDOUT ? &x->res.out : &x->res.err;
    char chunk[65536];
    /* At most 1 MiB a turn: a command that writes without pause must not
     * keep the loop from everything else. */
    for (int turn = 0; turn < 16; turn++) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        size_t before = b->len;
        if (x->req.stream) {
            /* Streamed output is counted against the cap, not kept. */
            size_t room = b->cap > before ? b->cap - before : 0;
            size_t take = (size_t)n < room ? (size_t)n : room;
            b->len += take;
            b->dropped += (size_t)n - take;
            if (take && x->cbs.on_output && !x->cancelled)
                x->cbs.on_output(x->ctx, s, chunk, take);
        } else if (crl_buf_append(b, chunk, (size_t)n) < 0) {
            b->dropped += (size_t)n; /* out of memory: keep going, report truncation */
        }
    }
    return true; /* more, maybe: epoll says so on the next turn */
}

static void on_out(struct crl_watch *w, uint32_t ev)
{
    struct crl_exec *x = w->data;
    if (!pump(x, CRL_STDOUT))
        close_watch(x, &x->w_out, &x->proc.out_fd);
}

static void on_err(struct crl_watch *w, uint32_t ev)
{
    struct crl_exec *x = w->data;
    if (!pump(x, CRL_STDERR))
        close_watch(x, &x->w_err, &x->proc.err_fd);
}

static void on_in(struct crl_watch *w, uint32_t ev)
{
    struct crl_exec *x = w->data;
    while (x->in_off < x->req.stdin_len) {
        ssize_t n =
            write(x->proc.in_fd, x->req.stdin_data + x->in_off, x->req.stdin_len - x->in_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n < 0)
            break; /* the command closed its stdin: fine */
        x->in_off += (size_t)n;
    }
    close_watch(x, &x->w_in, &x->proc.in_fd);
}

static void on_timeout(struct crl_timer *t)
{
    struct crl_exec *x = t->data;
    x->timed_out = true;
    x->sb->owner->counters->exec_timeouts++;
    crl_info(x->sb->id, "exec %llu timed out after %.3fs: killing its process tree",
             (unsigned long long)x->proc.seq, x->req.timeout_s);
    x->sb->ops->kill(x->sb, &x->proc, CRL_KILL_TREE);
}

static void exec_free(struct crl_exec *x)
{
    struct crl_loop *loop = x->sb->owner->loop;
    crl_timer_stop(loop, &x->timer);
    close_watch(x, &x->w_in, &x->proc.in_fd);
    close_watch(x, &x->w_out, &x->proc.out_fd);
    close_watch(x, &x->w_err, &x->proc.err_fd);
    crl_sandbox_proc_done(x->sb, &x->proc);
    crl_exec_req_free(&x->req);
    crl_buf_free(&x->res.out);
    crl_buf_free(&x->res.err);
    crl_strv_free(x->envp);
    free(x);
}

uint64_t crl_exec_oom_kills(struct crl_sandbox *sb)
{
    struct crl_usage u;
    return sb->ops->stats(sb, &u) == 0 ? u.oom_kills : 0;
}

int crl_exec_check(struct crl_sandbox *sb, struct crl_err *err)
{
    if (crl_sandbox_check_ready(sb, err) < 0)
        return -1;
    if (!sb->image)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "sandbox %s has no image to run a command from",
                           sb->id);
    return 0;
}

int crl_exec_prepare(struct crl_sandbox *sb, struct crl_exec_req *req, struct crl_proc *p,
                     char ***envp, struct crl_err *err)
{
    if (!(*envp = crl_env_merge(sb->image->env, sb->spec.env, req->env)))
        return crl_err_sys(err, ENOMEM, "a command's environment");
    if (!req->argv && !(req->argv = crl_image_default_argv(sb->image, err)))
        return -1;
    struct crl_user user = req->user;
    if (!user.set && crl_image_user(sb->image, &user, err) < 0)
        return -1;
    p->argv = req->argv;
    p->source = req->shell ? req->argv[2] : NULL;
    p->envp = *envp;
    p->cwd = req->cwd ? req->cwd : sb->spec.cwd ? sb->spec.cwd : sb->image->cwd;
    p->uid = user.uid;
    p->gid = user.gid;
    p->setsid = true;
    return 0;
}

static void exec_exited(struct crl_proc *p)
{
    struct crl_exec *x = p->owner;
    /* What the command wrote before it exited is in the pipes now.
     * Descendants that outlive it keep their copies; we stop listening. */
    if (x->proc.out_fd >= 0)
        pump(x, CRL_STDOUT);
    if (x->proc.err_fd >= 0)
        pump(x, CRL_STDERR);
    x->res.duration_s = (double)(crl_now_ns() - x->start_ns) / 1e9;
    bool killed = x->sb->state != CRL_SB_READY && x->sb->state != CRL_SB_PAUSED;
    bool oom = !x->timed_out && crl_exec_oom_kills(x->sb) > x->oom_before;
    crl_exec_describe_end(p, x->timed_out, killed, oom, &x->res);
    if (x->res.reason[0] == 'o')
        x->sb->owner->counters->exec_ooms++;
    crl_debug(x->sb->id, "exec %llu ended: %s %d in %.3f ms", (unsigned long long)p->seq,
              x->res.reason, x->res.signal ? x->res.signal : x->res.exit_code,
              x->res.duration_s * 1e3);
    if (!x->cancelled)
        x->cbs.on_done(x->ctx, &x->res, NULL);
    exec_free(x);
}

static void exec_started(struct crl_proc *p, const struct crl_err *err)
{
    struct crl_exec *x = p->owner;
    struct crl_loop *loop = x->sb->owner->loop;
    if (err) {
        if (x->timed_out && !x->cancelled) {
            /* It never got going before its time ran out (stopped, or stuck in
             * exec): that is a timeout, not an error of the request. */
            p->status = SIGKILL;
            x->res.duration_s = (double)(crl_now_ns() - x->start_ns) / 1e9;
            crl_exec_describe_end(p, true, false, false, &x->res);
            x->cbs.on_done(x->ctx, &x->res, NULL);
        } else if (!x->cancelled) {
            x->cbs.on_done(x->ctx, NULL, err);
        }
        exec_free(x);
        return;
    }
    if (x->cancelled || x->timed_out) {
        /* Its client left, or its time ran out, before it started: end it. */
        x->sb->ops->kill(x->sb, p, CRL_KILL_TREE);
    }
    crl_set_nonblock(p->out_fd, 1);
    crl_set_nonblock(p->err_fd, 1);
    crl_set_nonblock(p->in_fd, 1);
    crl_watch_start(loop, &x->w_out, p->out_fd, EPOLLIN, on_out, x);
    crl_watch_start(loop, &x->w_err, p->err_fd, EPOLLIN, on_err, x);
    if (x->req.stdin_len)
        crl_watch_start(loop, &x->w_in, p->in_fd, EPOLLOUT, on_in, x);
    else
        close_watch(x, &x->w_in, &x->proc.in_fd);
    if (x->cbs.on_start && !x->cancelled)
        x->cbs.on_start(x->ctx);
}

struct crl_exec *crl_exec_start(struct crl_sandbox *sb, struct crl_exec_req *req,
                                const struct crl_exec_cbs *cbs, void *ctx, struct crl_err *err)
{
    if (crl_exec_check(sb, err) < 0) {
        crl_exec_req_free(req);
        return NULL;
    }
    struct crl_exec *x = calloc(1, sizeof(*x));
    if (!x) {
        crl_exec_req_free(req);
        crl_err_sys(err, ENOMEM, "exec");
        return NULL;
    }
    x->sb = sb;
    x->req = *req;
    memset(req, 0, sizeof(*req));
    x->cbs = *cbs;
    x->ctx = ctx;
    crl_buf_init(&x->res.out, x->req.max_output);
    crl_buf_init(&x->res.err, x->req.max_output);
    if (crl_exec_prepare(sb, &x->req, &x->proc, &x->envp, err) < 0)
        goto fail;
    x->proc.owner = x;
    x->proc.on_start = exec_started;
    x->proc.on_exit = exec_exited;
    x->oom_before = crl_exec_oom_kills(sb);
    x->start_ns = crl_now_ns();
    if (crl_sandbox_spawn(sb, &x->proc, err) < 0)
        goto fail;
    /* The timeout runs from now: a command that never gets going is ended too. */
    if (x->req.timeout_s > 0)
        crl_timer_start(sb->owner->loop, &x->timer, (uint64_t)(x->req.timeout_s * 1e9), on_timeout,
                        x);
    sb->owner->counters->execs++;
    crl_sandbox_touch(sb);
    return x;
fail:
    crl_exec_req_free(&x->req);
    crl_buf_free(&x->res.out);
    crl_buf_free(&x->res.err);
    crl_strv_free(x->envp);
    free(x);
    return NULL;
}

void crl_exec_cancel(struct crl_exec *x)
{
    x->cancelled = true;
    if (!x->proc.exited) /* before its start too: it is in its cgroup leaf already */
        x->sb->ops->kill(x->sb, &x->proc, CRL_KILL_TREE);
}

void crl_exec_pause_output(struct crl_exec *x, bool pause)
{
    struct crl_loop *loop = x->sb->owner->loop;
    crl_watch_modify(loop, &x->w_out, pause ? 0 : EPOLLIN);
    crl_watch_modify(loop, &x->w_err, pause ? 0 : EPOLLIN);
}
