/* Background processes: the endpoints (handlers_processes.h). */
#include "handlers_processes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../core/process.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "request.h"

/* Output waiting for a slow client: no more is taken from the ring until
 * it reads (the ring keeps the rest, or says what it lost). */
#define OUT_HIGH (256u << 10)

/* A request's state (r->state): the process it is about and what it waits
 * for. */
struct preq {
    struct crl_req *r;
    struct crl_process *x;
    struct crl_process_sub sub;
    bool subscribed;
    uint64_t off; /* output: the next byte to send */
    bool follow, done;
    uint64_t bytes; /* stdin: taken so far */
    bool eof, failed;
    struct crl_err err;
    struct crl_timer timer; /* wait */
};

static struct preq *state_new(struct crl_req *r, struct crl_err *err)
{
    struct preq *q = calloc(1, sizeof(*q));
    if (!q) {
        crl_err_sys(err, ENOMEM, "a process request");
        return NULL;
    }
    q->r = r;
    r->state = q;
    return q;
}

/* The route's sandbox and process, into a new state. */
static struct preq *lookup(struct crl_req *r, struct crl_err *err)
{
    struct preq *q;
    if (crl_req_sandbox(r, err) < 0 || !(q = state_new(r, err)))
        return NULL;
    return (q->x = crl_process_find(r->sb, r->route.sub, err)) ? q : NULL;
}

static void subscribe(struct preq *q, void (*fn)(struct crl_process_sub *s))
{
    if (q->subscribed)
        return;
    q->sub.notify = fn;
    q->sub.ctx = q;
    crl_process_subscribe(q->x, &q->sub);
    q->subscribed = true;
}

static void unsubscribe(struct preq *q)
{
    if (q->subscribed)
        crl_process_unsubscribe(q->x, &q->sub);
    q->subscribed = false;
}

void crl_h_process_cancel(struct crl_req *r)
{
    struct preq *q = r->state;
    if (!q)
        return;
    unsubscribe(q);
    crl_timer_stop(r->api->host->loop, &q->timer);
}

void crl_h_process_free(struct crl_req *r)
{
    struct preq *q = r->state;
    if (!q)
        return;
    crl_h_process_cancel(r);
    if (q->x)
        crl_process_unref(q->x);
    free(q);
    r->state = NULL;
}

/* ---- start, list, inspect, forget ---- */

static void started(struct crl_process *x, const struct crl_err *err, void *ctx)
{
    struct crl_req *r = ctx;
    if (!r->gone) {
        if (err)
            crl_req_error(r, err);
        else
            crl_req_json(r, 201, crl_process_json(x));
    }
    if (x)
        crl_process_unref(x);
    crl_req_pending_done(r);
}

void crl_h_process_start(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_exec_req req;
    if (crl_req_sandbox(r, &err) < 0 ||
        crl_exec_req_parse(r->body.data, r->body.len, CRL_EXEC_KIND_PROCESS, &req, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    if (r->sb->spec.trajectory[0]) {
        crl_exec_req_free(&req);
        crl_err_set(&err, CRL_E_UNSUPPORTED,
                    "sandbox %s records trajectory %s, and a background process is no step "
                    "that can be replayed: run it with exec or a session",
                    r->sb->id, r->sb->spec.trajectory);
        crl_req_error(r, &err);
        return;
    }
    r->pending++;
    if (crl_process_start(r->sb, &req, started, r, &err) < 0) {
        r->pending--;
        crl_req_error(r, &err);
    }
}

void crl_h_processes_list(struct crl_req *r)
{
    static const char *const states[] = {"running", "exited", NULL};
    static const struct crl_list_spec list = {
        .items = "processes", .key = "pid", .states = states, .no_labels = true};
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0)
        crl_req_error(r, &err);
    else
        crl_req_list(r, crl_process_list_json(r->sb, NULL), &list);
}

void crl_h_process_inspect(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct preq *q = lookup(r, &err);
    crl_req_json_or_error(r, 200, q ? crl_process_json(q->x) : NULL, &err);
}

void crl_h_process_forget(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct preq *q = lookup(r, &err);
    if (!q) {
        crl_req_error(r, &err);
        return;
    }
    crl_process_forget(q->x);
    crl_req_json(r, 200, crl_process_json(q->x));
}

/* ---- output ---- */

static void out_line(struct crl_req *r, json_t *line, uint64_t off)
{
    json_object_set_new(line, "offset", json_integer((json_int_t)off));
    crl_req_stream_json(r, line);
}

/* Send what the ring has from q->off on, up to what a slow client may
 * hold; then the end, once the process has ended (or at once, not
 * following).  A UTF-8 sequence the newest chunk has only part of waits
 * for the rest, so text stays text. */
static void feed(struct preq *q)
{
    struct crl_req *r = q->r;
    if (q->done || r->gone)
        return;
    const struct crl_chunk *c = NULL;
    while (r->out.len < OUT_HIGH) {
        uint64_t lost, end;
        c = crl_process_output(q->x, q->off, &lost, &end);
        if (lost) {
            out_line(r, json_pack("{s:I}", "lost", (json_int_t)lost), q->off);
            q->off += lost;
            continue;
        }
        if (!c)
            break;
        size_t from = (size_t)(q->off - c->off), len = c->len - from;
        if (!c->next && !crl_process_ended(q->x) &&
            !(len = crl_utf8_complete_prefix(c->data + from, len)))
            break;
        out_line(
            r, crl_output_json(c->stream == CRL_STDERR ? "stderr" : "stdout", c->data + from, len),
            q->off);
        q->off += len;
    }
    if (c || r->out.len >= OUT_HIGH)
        return; /* more to send once the client reads (drained) */
    bool ended = crl_process_ended(q->x);
    if (q->follow && !ended)
        return; /* until more comes (notify) */
    json_t *fin = json_pack("{s:I, s:s}", "next_offset", (json_int_t)q->off, "state",
                            ended ? "exited" : "running");
    if (ended)
        json_object_set_new(fin, "result", crl_exec_result_json(crl_process_result(q->x), false));
    q->done = true;
    unsubscribe(q);
    crl_req_stream_end(r, crl_req_stream_json(r, fin) < 0);
}

static void out_notify(struct crl_process_sub *s)
{
    feed(s->ctx);
}

void crl_h_process_drained(struct crl_req *r)
{
    struct preq *q = r->state;
    if (q && q->x)
        feed(q);
}

/* An offset query parameter (default def). */
static int query_offset(struct crl_req *r, uint64_t def, uint64_t *out, struct crl_err *err)
{
    const char *v = crl_req_query(r, "offset");
    *out = def;
    if (!v)
        return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-')
        return crl_err_set(err, CRL_E_INVALID, "offset must be a byte offset (0 or more), not '%s'",
                           v);
    *out = n;
    return 0;
}

void crl_h_process_output(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct preq *q = lookup(r, &err);
    uint64_t lost, end;
    if (q) {
        crl_process_output(q->x, 0, &lost, &end);
        if (query_offset(r, 0, &q->off, &err) == 0 && q->off > end)
            crl_err_set(&err, CRL_E_INVALID, "offset %llu is past the end of the output (%llu)",
                        (unsigned long long)q->off, (unsigned long long)end);
    }
    if (!q || err.code || crl_req_query_bool(r, "follow", true, &q->follow, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    crl_req_respond(r, 200, crl_req_stream_response(r, "application/x-ndjson"));
    subscribe(q, out_notify);
    feed(q);
}

/* ---- stdin ---- */

static void stdin_notify(struct crl_process_sub *s)
{
    struct preq *q = s->ctx;
    unsubscribe(q);
    crl_req_resume(q->r); /* MHD hands the rest of the chunk again */
}

bool crl_h_process_stdin_begin(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct preq *q = lookup(r, &err);
    if (!q || crl_req_query_bool(r, "eof", false, &q->eof, &err) < 0)
        crl_req_error(r, &err);
    return true;
}

int crl_h_process_stdin_body(struct crl_req *r, const char *data, size_t *len)
{
    struct preq *q = r->state;
    if (!q || !q->x || q->failed) {
        *len = 0; /* read the rest, to answer at its end */
        return 0;
    }
    size_t before = *len;
    if (crl_process_stdin(q->x, data, len, false, &q->err) < 0) {
        q->failed = true;
        *len = 0;
        return 0;
    }
    q->bytes += before - *len;
    if (!*len)
        return 0;
    subscribe(q, stdin_notify); /* room comes as it reads */
    return -1;
}

void crl_h_process_stdin(struct crl_req *r)
{
    struct preq *q = r->state;
    struct crl_err err = CRL_ERR_INIT;
    if (!q || !q->x)
        return; /* answered at its start */
    size_t none = 0;
    if (q->failed)
        crl_req_error(r, &q->err);
    else if (q->eof && crl_process_stdin(q->x, "", &none, true, &err) < 0)
        crl_req_error(r, &err);
    else
        crl_req_json(r, 200,
                     json_pack("{s:i, s:I, s:b}", "pid", crl_process_pid(q->x), "bytes",
                               (json_int_t)q->bytes, "stdin_open", crl_process_stdin_open(q->x)));
}

/* ---- signal, resize, wait ---- */

static json_t *load_body(struct crl_req *r, const char *const *keys, size_t n, bool required,
                         struct crl_err *err)
{
    json_t *root = NULL;
    if (!r->body.len && !required)
        return json_object();
    if (crl_json_load(r->body.data, r->body.len, &root, err) < 0)
        return NULL;
    if (crl_json_check_keys(root, "", keys, n, err)) {
        json_decref(root);
        return NULL;
    }
    return root;
}

void crl_h_process_signal(struct crl_req *r)
{
    static const char *const keys[] = {"signal", "scope"};
    struct crl_err err = CRL_ERR_INIT;
    struct preq *q = lookup(r, &err);
    json_auto_t *b = q ? load_body(r, keys, CRL_ARRAY_SIZE(keys), true, &err) : NULL;
    if (!b) {
        crl_req_error(r, &err);
        return;
    }
    json_t *s = json_object_get(b, "signal"), *sc = json_object_get(b, "scope");
    char num[24];
    const char *name = json_is_string(s) ? json_string_value(s) : NULL;
    if (json_is_integer(s)) {
        snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(s));
        name = num;
    }
    int sig = crl_signal_parse(name);
    const char *scope = json_is_string(sc) ? json_string_value(sc) : sc ? "" : "process";
    enum crl_signal_scope sco = strcmp(scope, "group") == 0  ? CRL_SIGNAL_GROUP
                                : strcmp(scope, "tree") == 0 ? CRL_SIGNAL_TREE
                                                             : CRL_SIGNAL_PROC;
    if (!s)
        crl_err_set(&err, CRL_E_INVALID, "signal is required (a name such as TERM, or 1-64)");
    else if (!sig)
        crl_err_set(&err, CRL_E_INVALID, "signal must be a name such as TERM or a number 1-64");
    else if (sco == CRL_SIGNAL_PROC && strcmp(scope, "process") != 0)
        crl_err_set(&err, CRL_E_INVALID, "scope must be process, group or tree");
    if (err.code || crl_process_signal(q->x, sig, sco, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    crl_req_json(r, 200, crl_process_json(q->x));
}

void crl_h_process_resize(struct crl_req *r)
{
    static const char *const keys[] = {"rows", "cols"};
    struct crl_err err = CRL_ERR_INIT;
    struct preq *q = lookup(r, &err);
    json_auto_t *b = q ? load_body(r, keys, CRL_ARRAY_SIZE(keys), true, &err) : NULL;
    unsigned short rows, cols;
    if (!b || crl_tty_size_parse(b, "size", &rows, &cols, &err) < 0 ||
        crl_process_resize(q->x, rows, cols, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    crl_req_json(r, 200, crl_process_json(q->x));
}

static void wait_over(struct preq *q)
{
    unsubscribe(q);
    crl_timer_stop(q->r->api->host->loop, &q->timer);
    crl_req_json(q->r, 200, crl_process_json(q->x));
}

static void wait_notify(struct crl_process_sub *s)
{
    struct preq *q = s->ctx;
    if (crl_process_ended(q->x))
        wait_over(q);
}

static void wait_timeout(struct crl_timer *t)
{
    wait_over(t->data);
}

void crl_h_process_wait(struct crl_req *r)
{
    static const char *const keys[] = {"timeout_s"};
    struct crl_err err = CRL_ERR_INIT;
    struct preq *q = lookup(r, &err);
    json_auto_t *b = q ? load_body(r, keys, CRL_ARRAY_SIZE(keys), false, &err) : NULL;
    unsigned timeout = 0;
    json_t *t = b ? json_object_get(b, "timeout_s") : NULL;
    if (!b || (t && crl_json_get_uint(t, "timeout_s", 0, 86400, &timeout, &err) < 0)) {
        crl_req_error(r, &err);
        return;
    }
    if (crl_process_ended(q->x)) {
        crl_req_json(r, 200, crl_process_json(q->x));
        return;
    }
    subscribe(q, wait_notify);
    if (timeout)
        crl_timer_start(r->api->host->loop, &q->timer, (uint64_t)timeout * 1000000000ull,
                        wait_timeout, q);
}

/* ---- attach: an upgraded connection ----
 *
 * After the 101 the client's bytes are the process's stdin and the
 * process's output (from ?offset=, by default all the ring holds) is the
 * client's, stdout and stderr as they come.  The client's end of stream
 * detaches it (the process runs on; closing stdin is POST .../stdin?eof);
 * the process's end, once its output is sent, closes the connection. */

struct crl_attach {
    struct crl_api *api;
    struct crl_process *x;
    struct crl_process_sub sub;
    struct MHD_UpgradeResponseHandle *urh;
    int sock;
    struct crl_watch w;
    uint64_t off;
    struct crl_buf out; /* for the client */
    struct crl_buf in;  /* from the client, not yet taken by stdin */
    struct crl_attach *next;
};

static void attach_close(struct crl_attach *a)
{
    for (struct crl_attach **pp = &a->api->attaches; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    crl_process_unsubscribe(a->x, &a->sub);
    crl_watch_stop(a->api->host->loop, &a->w);
    MHD_upgrade_action(a->urh, MHD_UPGRADE_ACTION_CLOSE);
    crl_process_unref(a->x);
    crl_buf_free(&a->out);
    crl_buf_free(&a->in);
    free(a);
}

/* Move output from the ring to the client's buffer, and both buffers on;
 * false once the attach is over (it is freed then). */
static bool attach_pump(struct crl_attach *a)
{
    while (a->out.len < OUT_HIGH) {
        uint64_t lost, end;
        const struct crl_chunk *c = crl_process_output(a->x, a->off, &lost, &end);
        a->off += lost;
        if (!c)
            break;
        size_t from = (size_t)(a->off - c->off);
        if (crl_buf_append(&a->out, c->data + from, c->len - from) < 0)
            break;
        a->off = c->off + c->len;
    }
    while (a->out.len) {
        ssize_t n = send(a->sock, a->out.data, a->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n < 0) { /* the client is gone */
            attach_close(a);
            return false;
        }
        crl_buf_consume(&a->out, (size_t)n);
    }
    if (a->in.len && crl_process_stdin_open(a->x)) {
        size_t left = a->in.len;
        struct crl_err err = CRL_ERR_INIT;
        if (crl_process_stdin(a->x, a->in.data, &left, false, &err) == 0)
            crl_buf_consume(&a->in, a->in.len - left);
    } else if (a->in.len) {
        crl_buf_consume(&a->in, a->in.len); /* stdin is closed: nowhere to go */
    }
    uint64_t lost, end;
    bool all_sent = !a->out.len && !crl_process_output(a->x, a->off, &lost, &end);
    if (crl_process_ended(a->x) && all_sent) {
        attach_close(a);
        return false;
    }
    uint32_t ev = (a->out.len ? EPOLLOUT : 0) | (!a->in.len ? EPOLLIN : 0);
    crl_watch_modify(a->api->host->loop, &a->w, ev);
    return true;
}

static void attach_ready(struct crl_watch *w, uint32_t ev)
{
    struct crl_attach *a = w->data;
    if (ev & EPOLLIN) {
        char buf[16384];
        ssize_t n = recv(a->sock, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            attach_close(a); /* detached: the process runs on */
            return;
        }
        if (n > 0 && crl_buf_append(&a->in, buf, (size_t)n) < 0) {
            attach_close(a);
            return;
        }
    }
    attach_pump(a);
}

static void attach_notify(struct crl_process_sub *s)
{
    attach_pump(s->ctx);
}

static void on_attached(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra_in,
                        size_t extra_in_size, MHD_socket sock,
                        struct MHD_UpgradeResponseHandle *urh)
{
    struct crl_req *r = cls;
    struct crl_attach *a = calloc(1, sizeof(*a));
    struct preq *q = r->state;
    if (!a || !q || !q->x) {
        free(a);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        return;
    }
    a->api = r->api;
    a->x = q->x; /* the request's reference, now the attach's */
    q->x = NULL;
    a->off = q->off;
    a->urh = urh;
    a->sock = sock;
    crl_buf_init(&a->out, CRL_BUF_UNBOUNDED);
    crl_buf_init(&a->in, CRL_BUF_UNBOUNDED);
    a->next = a->api->attaches;
    a->api->attaches = a;
    a->sub.notify = attach_notify;
    a->sub.ctx = a;
    crl_process_subscribe(a->x, &a->sub);
    if ((extra_in_size && crl_buf_append(&a->in, extra_in, extra_in_size) < 0) ||
        crl_watch_start(a->api->host->loop, &a->w, sock, EPOLLIN, attach_ready, a) < 0) {
        attach_close(a);
        return;
    }
    attach_pump(a);
}

void crl_h_process_attach(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct preq *q = lookup(r, &err);
    const char *up = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Upgrade");
    if (q && (!up || strcasecmp(up, "corral-attach") != 0))
        crl_err_set(&err, CRL_E_INVALID,
                    "attach is a connection upgraded to corral-attach (Upgrade: corral-attach); "
                    "GET .../output reads the output as NDJSON");
    if (q && !err.code)
        query_offset(r, 0, &q->off, &err);
    if (!q || err.code) {
        crl_req_error(r, &err);
        return;
    }
    /* The request lives until the attach closes its connection (MHD ends
     * it then); one whose client left before the switch frees its state. */
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_attached, r);
    MHD_add_response_header(resp, "Upgrade", "corral-attach");
    crl_req_respond(r, 101, resp);
}

void crl_h_processes_stop(struct crl_api *a)
{
    while (a->attaches)
        attach_close(a->attaches);
}
