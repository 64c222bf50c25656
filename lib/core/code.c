#include "code.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "../util/buf.h"
#include "../util/cleanup.h"
#include "../util/log.h"
#include "exec.h"
#include "process.h"

/* lib/core/code_kernel.py, as a C string (made by the build). */
static const char kernel_src[] =
#include "code_kernel.inc"
    ;

#define INTERRUPT_GRACE_NS (2ull * 1000000000) /* after SIGINT, before the kernel is killed */
#define KERNEL_RING (2u << 20)

struct crl_code_cell {
    struct crl_code_cell *next;
    struct crl_code_ctx *cx;
    char *code;
    double timeout_s;
    crl_code_done_fn done;
    void *ctx;
    bool cancelled;
    json_int_t id; /* the request's, which its answer must name */
};

struct crl_code_ctx {
    struct crl_code_ctx *next;
    struct crl_sandbox *sb;
    char name[64];
    char *cwd;
    struct crl_process *k; /* its kernel, once started; NULL: to start at the next cell */
    bool starting, ready;
    struct crl_process_sub sub;
    uint64_t off;        /* the kernel's output read so far */
    struct crl_buf line; /* an answer line in progress */
    struct crl_buf in;   /* a request the kernel's stdin has yet to take */
    char nonce[40];
    struct crl_code_cell *head, *tail; /* waiting; the head runs once sent */
    bool sent;                         /* the head's request went to the kernel */
    bool interrupted;
    struct crl_timer timer;
    unsigned restarts;
    unsigned long executions;
    json_int_t next_id;
    /* Kernels being started: a start answers later, maybe after the
     * context was removed or its kernel replaced, so each carries the
     * generation it was for, and a removed context is freed by the last. */
    unsigned gen, pending;
    bool removed;
};

struct start_token {
    struct crl_code_ctx *cx;
    unsigned gen;
};

static struct crl_code_ctx **list_of(struct crl_sandbox *sb)
{
    return &sb->code_contexts;
}

static void kernel_start(struct crl_code_ctx *cx);
static void pump(struct crl_code_ctx *cx);

static void cell_free(struct crl_code_cell *c)
{
    free(c->code);
    free(c);
}

/* The head cell is over: its answer, or why not; the next one goes. */
static void cell_over(struct crl_code_ctx *cx, json_t *answer, const struct crl_err *err)
{
    struct crl_code_cell *c = cx->head;
    crl_timer_stop(cx->sb->owner->loop, &cx->timer);
    cx->head = c->next;
    if (!cx->head)
        cx->tail = NULL;
    cx->sent = cx->interrupted = false;
    if (!c->cancelled) {
        if (answer)
            json_object_set_new(answer, "context", json_string(cx->name));
        c->done(c->ctx, answer, err);
    } else {
        json_decref(answer);
    }
    cell_free(c);
    pump(cx);
}

static void line(struct crl_code_ctx *cx, const char *s, size_t n)
{
    long long want = cx->head && cx->sent ? (long long)cx->head->id : -1;
    json_t *answer = NULL;
    switch (crl_code_answer(s, n, cx->nonce, want, cx->executions + 1, &answer)) {
    case CRL_CODE_LINE_READY: cx->ready = true; break;
    case CRL_CODE_LINE_ANSWER:
        cx->executions++;
        cell_over(cx, answer, NULL);
        break;
    case CRL_CODE_LINE_MALFORMED:
        crl_warn(cx->sb->id, "code context %s: a malformed answer dropped", cx->name);
        break;
    case CRL_CODE_LINE_OTHER: break;
    }
}

/* ---- the kernel ---- */

static void kernel_gone(struct crl_code_ctx *cx, const char *why)
{
    if (cx->k) {
        crl_process_unsubscribe(cx->k, &cx->sub);
        crl_process_forget(cx->k);
        crl_process_unref(cx->k);
        cx->k = NULL;
    }
    cx->ready = cx->starting = false;
    cx->gen++;             /* a start under way now starts nothing of ours */
    crl_buf_free(&cx->in); /* freed, then ready for the next kernel */
    crl_buf_free(&cx->line);
    crl_buf_init(&cx->in, CRL_BUF_UNBOUNDED);
    crl_buf_init(&cx->line, CRL_BUF_UNBOUNDED);
    if (cx->head && cx->sent) {
        struct crl_err err = CRL_ERR_INIT;
        crl_err_set(&err, CRL_E_CONFLICT, "%s: context %s starts again (its state is gone)", why,
                    cx->name);
        cell_over(cx, NULL, &err);
    }
}

static void on_kernel(struct crl_process_sub *s)
{
    struct crl_code_ctx *cx = s->ctx;
    uint64_t lost, end;
    const struct crl_chunk *c;
    while ((c = crl_process_output(cx->k, cx->off, &lost, &end))) {
        size_t from = (size_t)(cx->off + lost - c->off);
        const char *p = c->data + from, *e = c->data + c->len;
        cx->off = c->off + c->len;
        while (p < e) {
            const char *nl = memchr(p, '\n', (size_t)(e - p));
            size_t n = nl ? (size_t)(nl - p) : (size_t)(e - p);
            if (cx->line.len + n > CRL_CODE_MAX_ANSWER)
                crl_buf_consume(&cx->line, cx->line.len); /* past any answer: dropped */
            else
                crl_buf_append(&cx->line, p, n);
            if (!nl)
                break;
            line(cx, cx->line.data ? cx->line.data : "", cx->line.len);
            crl_buf_consume(&cx->line, cx->line.len);
            if (!cx->k)
                return; /* a callback ended it */
            p = nl + 1;
        }
    }
    if (cx->in.len) { /* room in its stdin, maybe */
        size_t left = cx->in.len;
        struct crl_err err = CRL_ERR_INIT;
        if (crl_process_stdin(cx->k, cx->in.data, &left, false, &err) == 0)
            crl_buf_consume(&cx->in, cx->in.len - left);
    }
    if (crl_process_ended(cx->k)) {
        char why[96];
        const struct crl_exec_result *r = crl_process_result(cx->k);
        snprintf(why, sizeof(why), "its python ended (%s %d)", r->reason,
                 r->signal ? r->signal : r->exit_code);
        kernel_gone(cx, why);
        return;
    }
    pump(cx);
}

static void ctx_release(struct crl_code_ctx *cx)
{
    free(cx->cwd);
    free(cx);
}

static void kernel_started(struct crl_process *x, const struct crl_err *err, void *ctx)
{
    struct start_token *t = ctx;
    struct crl_code_ctx *cx = t->cx;
    bool stale = cx->removed || t->gen != cx->gen;
    free(t);
    cx->pending--;
    if (stale) { /* removed, restarted or timed out meanwhile: not ours any more */
        if (x) {
            crl_process_forget(x);
            crl_process_unref(x);
        }
        if (cx->removed && !cx->pending)
            ctx_release(cx);
        return;
    }
    cx->starting = false;
    if (err) {
        while (cx->head)
            cell_over(cx, NULL, err);
        return;
    }
    cx->k = x; /* the starter's reference */
    cx->off = 0;
    cx->sub.notify = on_kernel;
    cx->sub.ctx = cx;
    crl_process_subscribe(x, &cx->sub);
    on_kernel(&cx->sub);
}

static void kernel_start(struct crl_code_ctx *cx)
{
    struct crl_err err = CRL_ERR_INIT;
    unsigned char r[12];
    if (getrandom(r, sizeof(r), 0) != sizeof(r))
        memset(r, 0x5a, sizeof(r));
    for (size_t i = 0; i < sizeof(r); i++)
        snprintf(cx->nonce + 2 * i, sizeof(cx->nonce) - 2 * i, "%02x", r[i]);
    snprintf(cx->nonce + 2 * sizeof(r), sizeof(cx->nonce) - 2 * sizeof(r), ":");
    struct crl_exec_req req = {0};
    char nonce_env[sizeof(cx->nonce) + 32];
    snprintf(nonce_env, sizeof(nonce_env), "CORRAL_CODE_NONCE=%s", cx->nonce);
    /* The image's python3; a function sandbox of the python runtime runs
     * source in its own (a string cmd there is python, not sh). */
    char *argv[] = {"python3", "-I", "-u", "-c", (char *)kernel_src, NULL};
    char *source[] = {"/bin/sh", "-c", (char *)kernel_src, NULL};
    char *env[] = {"PYTHONUNBUFFERED=1", "MPLBACKEND=Agg", nonce_env, NULL};
    req.shell = strcmp(cx->sb->spec.runtime, "python") == 0;
    req.argv = crl_strv_dup(req.shell ? source : argv);
    req.env = crl_strv_dup(env);
    req.cwd = cx->cwd ? strdup(cx->cwd) : NULL;
    req.hidden = true;
    req.ring_bytes = KERNEL_RING;
    cx->starting = true;
    cx->ready = false;
    struct start_token *t = malloc(sizeof(*t));
    if (t)
        *t = (struct start_token){cx, cx->gen};
    if (!t || !req.argv || !req.env ||
        crl_process_start(cx->sb, &req, kernel_started, t, &err) < 0) {
        if (!err.code)
            crl_err_sys(&err, ENOMEM, "a code context's kernel");
        if (!t || !req.argv || !req.env)
            crl_exec_req_free(&req); /* else crl_process_start took it */
        free(t);
        cx->starting = false;
        while (cx->head)
            cell_over(cx, NULL, &err);
        return;
    }
    cx->pending++;
}

static void on_timeout(struct crl_timer *t)
{
    struct crl_code_ctx *cx = t->data;
    if (!cx->interrupted && cx->k) {
        struct crl_err err = CRL_ERR_INIT;
        cx->interrupted = true; /* KeyboardInterrupt in the cell: its error answers */
        crl_process_signal(cx->k, SIGINT, CRL_SIGNAL_PROC, &err);
        crl_timer_start(cx->sb->owner->loop, &cx->timer, INTERRUPT_GRACE_NS, on_timeout, cx);
        return;
    }
    kernel_gone(cx, "the cell ran past its timeout and did not stop");
    cx->restarts++;
    pump(cx);
}

/* Send the head cell to a ready kernel; start one if there is none. */
static void pump(struct crl_code_ctx *cx)
{
    if (!cx->head || cx->sent || cx->removed)
        return;
    if (!cx->k) {
        if (!cx->starting)
            kernel_start(cx);
        return;
    }
    if (!cx->ready)
        return;
    struct crl_code_cell *c = cx->head;
    c->id = ++cx->next_id;
    json_auto_t *req = json_pack("{s:s, s:I}", "code", c->code, "id", c->id);
    cleanup_free char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    struct crl_err err = CRL_ERR_INIT;
    if (!text || crl_buf_append(&cx->in, text, strlen(text)) < 0 ||
        crl_buf_append(&cx->in, "\n", 1) < 0) {
        crl_err_sys(&err, ENOMEM, "a cell");
        cell_over(cx, NULL, &err);
        return;
    }
    size_t left = cx->in.len;
    if (crl_process_stdin(cx->k, cx->in.data, &left, false, &err) < 0) {
        kernel_gone(cx, "its python's stdin is closed");
        return;
    }
    crl_buf_consume(&cx->in, cx->in.len - left);
    cx->sent = true;
    if (c->timeout_s > 0)
        crl_timer_start(cx->sb->owner->loop, &cx->timer, (uint64_t)(c->timeout_s * 1e9), on_timeout,
                        cx);
}

/* ---- contexts ---- */

static struct crl_code_ctx *find(struct crl_sandbox *sb, const char *name)
{
    for (struct crl_code_ctx *cx = *list_of(sb); cx; cx = cx->next)
        if (strcmp(cx->name, name) == 0)
            return cx;
    return NULL;
}

static void ctx_free(struct crl_code_ctx *cx)
{
    struct crl_err err = CRL_ERR_INIT;
    crl_err_set(&err, CRL_E_CONFLICT, "code context %s was removed", cx->name);
    kernel_gone(cx, "removed");
    cx->removed = true; /* pump() starts no other kernel for it */
    while (cx->head)
        cell_over(cx, NULL, &err);
    crl_timer_stop(cx->sb->owner->loop, &cx->timer);
    if (!cx->pending) /* else the last start under way frees it */
        ctx_release(cx);
}

static void sandbox_ending(struct crl_sandbox *sb)
{
    while (*list_of(sb)) {
        struct crl_code_ctx *cx = *list_of(sb);
        *list_of(sb) = cx->next;
        ctx_free(cx);
    }
}

static struct crl_code_ctx *ctx_new(struct crl_sandbox *sb, const char *name, const char *cwd,
                                    struct crl_err *err)
{
    unsigned n = 0;
    for (struct crl_code_ctx *cx = *list_of(sb); cx; cx = cx->next)
        n++;
    if (n >= CRL_CODE_MAX_CONTEXTS) {
        crl_err_set(err, CRL_E_CAPACITY, "sandbox %s has %u code contexts, the most it may", sb->id,
                    n);
        return NULL;
    }
    if (crl_sandbox_on_end(sb, sandbox_ending, err) < 0)
        return NULL;
    struct crl_code_ctx *cx = calloc(1, sizeof(*cx));
    if (!cx || (cwd && !(cx->cwd = strdup(cwd)))) {
        free(cx);
        crl_err_sys(err, ENOMEM, "a code context");
        return NULL;
    }
    cx->sb = sb;
    if (name)
        snprintf(cx->name, sizeof(cx->name), "%s", name);
    else
        snprintf(cx->name, sizeof(cx->name), "ctx-%llu", (unsigned long long)++sb->next_seq);
    crl_buf_init(&cx->line, CRL_BUF_UNBOUNDED);
    crl_buf_init(&cx->in, CRL_BUF_UNBOUNDED);
    cx->next = *list_of(sb);
    *list_of(sb) = cx;
    return cx;
}

static json_t *ctx_json(const struct crl_code_ctx *cx)
{
    return json_pack("{s:s, s:s, s:o, s:s, s:I, s:i}", "id", cx->name, "language", "python", "cwd",
                     cx->cwd ? json_string(cx->cwd) : json_null(), "state",
                     cx->k ? (cx->ready ? "ready" : "starting") : "idle", "executions",
                     (json_int_t)cx->executions, "restarts", cx->restarts);
}

struct crl_code_cell *crl_code_run(struct crl_sandbox *sb, const char *name, const char *code,
                                   double timeout_s, crl_code_done_fn done, void *ctx,
                                   struct crl_err *err)
{
    if (crl_exec_check(sb, err) < 0)
        return NULL;
    struct crl_code_ctx *cx = find(sb, name);
    if (!cx && strcmp(name, CRL_CODE_DEFAULT) != 0) {
        crl_err_set(err, CRL_E_NOT_FOUND, "sandbox %s has no code context %s", sb->id, name);
        return NULL;
    }
    if (!cx && !(cx = ctx_new(sb, name, NULL, err)))
        return NULL;
    struct crl_code_cell *c = calloc(1, sizeof(*c));
    if (!c || !(c->code = strdup(code))) {
        free(c);
        crl_err_sys(err, ENOMEM, "a cell");
        return NULL;
    }
    c->cx = cx;
    c->timeout_s = timeout_s;
    c->done = done;
    c->ctx = ctx;
    if (cx->tail)
        cx->tail->next = c;
    else
        cx->head = c;
    cx->tail = c;
    crl_sandbox_touch(sb);
    pump(cx);
    return c;
}

void crl_code_cancel(struct crl_code_cell *c)
{
    c->cancelled = true; /* it runs to its end; nobody hears */
}

json_t *crl_code_context_create(struct crl_sandbox *sb, const char *cwd, struct crl_err *err)
{
    if (crl_exec_check(sb, err) < 0)
        return NULL;
    struct crl_code_ctx *cx = ctx_new(sb, NULL, cwd, err);
    if (!cx)
        return NULL;
    kernel_start(cx);
    return ctx_json(cx);
}

json_t *crl_code_context_list(struct crl_sandbox *sb)
{
    json_t *a = json_array();
    for (struct crl_code_ctx *cx = *list_of(sb); cx; cx = cx->next)
        json_array_append_new(a, ctx_json(cx));
    return json_pack("{s:o}", "contexts", a);
}

json_t *crl_code_context_restart(struct crl_sandbox *sb, const char *name, struct crl_err *err)
{
    struct crl_code_ctx *cx = find(sb, name);
    if (!cx) {
        crl_err_set(err, CRL_E_NOT_FOUND, "sandbox %s has no code context %s", sb->id, name);
        return NULL;
    }
    kernel_gone(cx, "restarted");
    cx->restarts++;
    cx->executions = 0;
    kernel_start(cx);
    return ctx_json(cx);
}

json_t *crl_code_context_remove(struct crl_sandbox *sb, const char *name, struct crl_err *err)
{
    for (struct crl_code_ctx **pp = list_of(sb); *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->name, name) == 0) {
            struct crl_code_ctx *cx = *pp;
            json_t *was = ctx_json(cx);
            *pp = cx->next;
            ctx_free(cx);
            return was;
        }
    crl_err_set(err, CRL_E_NOT_FOUND, "sandbox %s has no code context %s", sb->id, name);
    return NULL;
}
