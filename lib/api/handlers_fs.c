/* The filesystem API: GET .../fs/stat and .../fs/list, POST .../fs/mkdir,
 * .../fs/move and .../fs/remove, and GET .../fs/watch as NDJSON
 * (handlers_fs.h). */
#include "handlers_fs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fs.h"
#include "../core/spec.h"
#include "../util/cleanup.h"
#include "../util/path.h"
#include "request.h"

/* A watch's events waiting for a slow client: above this, the watch is
 * held (the kernel's queue takes what comes, and says when it overflowed). */
#define WATCH_HIGH (256u << 10)

struct fsreq {
    struct crl_fs_call *call;
    struct crl_fs_watch *watch;
    bool held;
};

static struct fsreq *state(struct crl_req *r, struct crl_err *err)
{
    struct fsreq *q = calloc(1, sizeof(*q));
    if (!q)
        crl_err_sys(err, ENOMEM, "a filesystem request");
    r->state = q;
    return q;
}

void crl_h_fs_cancel(struct crl_req *r)
{
    struct fsreq *q = r->state;
    if (q && q->call) {
        crl_fs_call_cancel(q->call);
        q->call = NULL;
        r->pending--;
    }
    if (q && q->watch) {
        crl_fs_watch_stop(q->watch);
        q->watch = NULL;
    }
}

void crl_h_fs_free(struct crl_req *r)
{
    crl_h_fs_cancel(r);
    free(r->state);
    r->state = NULL;
}

/* Who does it: `user` (root, UID or UID:GID), root by default. */
static int user_of(const char *s, struct crl_user *u, struct crl_err *err)
{
    memset(u, 0, sizeof(*u));
    return s ? crl_user_parse(s, u, err) : 0;
}

static int path_arg(json_t *req, const char *key, const char *value, struct crl_err *err)
{
    if (!value)
        return crl_err_set(err, CRL_E_INVALID, "%s is required (an absolute path)", key);
    if (crl_path_check(value, key, err) < 0)
        return -1;
    return json_object_set_new(req, key, json_string(value)) < 0
               ? crl_err_set(err, CRL_E_INVALID, "%s is not valid UTF-8", key)
               : 0;
}

static void answered(void *ctx, json_t *answer, const struct crl_err *err)
{
    struct crl_req *r = ctx;
    struct fsreq *q = r->state;
    q->call = NULL;
    if (!r->gone)
        crl_req_json_or_error(r, 200, answer, err);
    else
        json_decref(answer);
    crl_req_pending_done(r);
}

static void run(struct crl_req *r, json_t *req, const struct crl_user *u)
{
    struct crl_err err = CRL_ERR_INIT;
    struct fsreq *q = state(r, &err);
    if (q) {
        r->pending++;
        q->call = crl_fs_call(r->sb, req, u->uid, u->gid, answered, r, &err);
        if (!q->call)
            r->pending--;
    }
    if (err.code)
        crl_req_error(r, &err);
}

/* GET .../fs/stat?path=P and .../fs/list?path=P[&depth=N] */
void crl_h_fs_get(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_user u;
    json_auto_t *req = json_pack("{s:s}", "op", r->route.sub);
    const char *depth = crl_req_query(r, "depth");
    if (crl_req_sandbox(r, &err) == 0 && user_of(crl_req_query(r, "user"), &u, &err) == 0 &&
        path_arg(req, "path", crl_req_query(r, "path"), &err) == 0 && depth) {
        char *end;
        long d = strtol(depth, &end, 10);
        if (strcmp(r->route.sub, "list") != 0 || end == depth || *end || d < 1 || d > 64)
            crl_err_set(&err, CRL_E_INVALID, "depth must be 1-64 (a list's), not '%s'", depth);
        else
            json_object_set_new(req, "depth", json_integer(d));
    }
    if (err.code)
        crl_req_error(r, &err);
    else
        run(r, req, &u);
}

/* POST .../fs/mkdir {"path", "parents", "mode", "user"}, .../fs/move
 * {"from", "to", "overwrite", "user"}, .../fs/remove {"path",
 * "recursive", "user"} */
void crl_h_fs_post(struct crl_req *r)
{
    static const struct {
        const char *op, *keys[4], *flag;
    } ops[] = {
        {"mkdir", {"path", "parents", "mode", "user"}, "parents"},
        {"move", {"from", "to", "overwrite", "user"}, "overwrite"},
        {"remove", {"path", "recursive", "user", NULL}, "recursive"},
    };
    struct crl_err err = CRL_ERR_INIT;
    struct crl_user u = {0};
    size_t i = 0;
    while (i < CRL_ARRAY_SIZE(ops) - 1 && strcmp(ops[i].op, r->route.sub) != 0)
        i++;
    size_t nkeys = ops[i].keys[3] ? 4 : 3;
    json_auto_t *body = NULL;
    json_auto_t *req = json_pack("{s:s}", "op", ops[i].op);
    if (crl_req_sandbox(r, &err) < 0 || crl_json_load(r->body.data, r->body.len, &body, &err) < 0 ||
        crl_json_check_keys(body, "", ops[i].keys, nkeys, &err) < 0)
        goto out;
    json_t *f = json_object_get(body, "user");
    const char *user = NULL;
    if (f && crl_json_get_string(f, "user", 32, &user, &err) < 0)
        goto out;
    if (user_of(user, &u, &err) < 0)
        goto out;
    bool move = strcmp(ops[i].op, "move") == 0;
    if (path_arg(req, "path", json_string_value(json_object_get(body, move ? "from" : "path")),
                 &err) < 0 ||
        (move && path_arg(req, "to", json_string_value(json_object_get(body, "to")), &err) < 0))
        goto out;
    if ((f = json_object_get(body, ops[i].flag))) {
        if (!json_is_boolean(f)) {
            crl_err_set(&err, CRL_E_INVALID, "%s must be true or false", ops[i].flag);
            goto out;
        }
        json_object_set(req, ops[i].flag, f);
    }
    if ((f = json_object_get(body, "mode"))) {
        unsigned mode;
        if (crl_json_get_uint(f, "mode", 0, 07777, &mode, &err) < 0)
            goto out;
        json_object_set_new(req, "mode", json_integer(mode));
    }
out:
    if (err.code)
        crl_req_error(r, &err);
    else
        run(r, req, &u);
}

/* ---- watch ---- */

/* The answer starts with the watch's first event, "ready" (its watches in
 * place): a path that cannot be watched is an error answer instead. */
static void watch_event(void *ctx, json_t *ev)
{
    struct crl_req *r = ctx;
    struct fsreq *q = r->state;
    if (r->gone)
        return;
    if (!r->streaming)
        crl_req_respond(r, 200, crl_req_stream_response(r, "application/x-ndjson"));
    json_incref(ev);
    crl_req_stream_json(r, ev);
    if (!q->held && r->out.len > WATCH_HIGH) {
        q->held = true;
        crl_fs_watch_hold(q->watch, true);
    }
}

static void watch_ended(void *ctx, const struct crl_err *err)
{
    struct crl_req *r = ctx;
    struct fsreq *q = r->state;
    q->watch = NULL;
    if (r->gone)
        return;
    if (!r->streaming) { /* it never got ready: an error answer */
        struct crl_err e = CRL_ERR_INIT;
        crl_req_error(r, err ? err : (crl_err_set(&e, CRL_E_INTERNAL, "the watch ended"), &e));
        return;
    }
    json_t *end = json_pack("{s:s}", "type", "end");
    if (err)
        json_object_set_new(end, "error", json_string(err->msg));
    crl_req_stream_end(r, crl_req_stream_json(r, end) < 0);
}

static const struct crl_fs_watch_cbs watch_cbs = {.event = watch_event, .ended = watch_ended};

void crl_h_fs_drained(struct crl_req *r)
{
    struct fsreq *q = r->state;
    if (q && q->watch && q->held && r->out.len < WATCH_HIGH / 4) {
        q->held = false;
        crl_fs_watch_hold(q->watch, false);
    }
}

/* GET .../fs/watch?path=P[&recursive=true][&user=U] */
void crl_h_fs_watch(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_user u;
    struct fsreq *q;
    const char *path = crl_req_query(r, "path");
    bool recursive;
    if (crl_req_query_bool(r, "recursive", false, &recursive, &err) == 0 && !path)
        crl_err_set(&err, CRL_E_INVALID, "path is required (an absolute path)");
    if (err.code || crl_req_sandbox(r, &err) < 0 ||
        user_of(crl_req_query(r, "user"), &u, &err) < 0 || crl_path_check(path, "path", &err) < 0 ||
        !(q = state(r, &err)) ||
        !(q->watch = crl_fs_watch(r->sb, path, recursive, u.uid, u.gid, &watch_cbs, r, &err)))
        crl_req_error(r, &err);
}
