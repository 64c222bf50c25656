/* A trajectory's steps over the API: every step endpoint of a sandbox that
 * records a trajectory (the route table's entries with a step kind: exec,
 * sessions, files, snapshot) passes through here once its body is in.
 *
 * While the sandbox fast-forwards, a call whose canonical request matches
 * the next logged step is answered from the log ("replayed": true) and
 * nothing runs.  The first call that matches none brings the sandbox live:
 * the checkpoint of the step it stands on is restored into it (the backend's
 * restore op), the sessions open at that step are opened again under their
 * ids, and the call runs.  A live call's answer is taken from
 * crl_req_json()/crl_req_error() by the step's capture hook, recorded (with
 * a checkpoint when the step can change state) and synced, and only then
 * sent.  One step at a time per sandbox: a call that comes while a step
 * runs waits its turn, in arrival order (docs/architecture.md,
 * Trajectories, "One step at a time"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/session.h"
#include "../traj/traj.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "request.h"
#include "routes.h"
#include "service_server.h"
#include "traj_step.h"

#define TRAJ_MAX_UPLOAD (64u << 20) /* a file written in a step is held whole, to hash it */
#define TRAJ_MAX_READ (64u << 20)   /* a file read in a step is kept whole, to log it */
#define TRAJ_MAX_WAITING 256        /* calls waiting for a sandbox's step in progress */

/* One request as a step (r->step). */
struct crl_step {
    struct crl_req *r;
    struct crl_traj_sb *s;
    bool waiting; /* in s->waiting, for its turn */
    struct crl_step *next_waiting;
    const char *kind; /* set once its turn came: answered from the log, or run */
    bool changes_state;
    json_t *request; /* canonical */
    char hash[CRL_DIGEST_LEN + 1];
    bool stream;  /* the client asked for NDJSON: the step runs buffered */
    bool running; /* the endpoint runs live: its answer is ours to record */
    double started_at;
    unsigned long long t0;
    /* the answer, while its step is made durable */
    struct crl_traj_record_job record;
    unsigned status;
    json_t *body;
    char *body_text; /* a large answer, stored as a blob */
    /* going live: the state restored, and the sessions open at it */
    struct crl_step_restore restore;
    uint32_t from_step;
    json_t *sessions; /* [[id, body]] to open again */
    size_t next_session;
    /* a file read in a step */
    bool is_file;
    struct crl_buf file;
    char file_mode[8];
};

static bool capture(struct crl_req *r, unsigned status, json_t *body);
static void step_cancel(struct crl_req *r);
static void step_free(struct crl_req *r);

static const struct crl_step_ops step_ops = {
    .capture = capture, .cancel = step_cancel, .free = step_free};

static struct crl_step *step_new(struct crl_req *r, struct crl_traj_sb *s, struct crl_err *err)
{
    struct crl_step *c = calloc(1, sizeof(*c));
    if (!c) {
        crl_err_sys(err, ENOMEM, "a step");
        return NULL;
    }
    c->r = r;
    c->s = s;
    crl_step_restore_init(&c->restore);
    crl_buf_init(&c->file, TRAJ_MAX_READ);
    r->step = c;
    r->step_ops = &step_ops;
    return c;
}

static void step_free(struct crl_req *r)
{
    struct crl_step *c = r->step;
    crl_traj_restore_job_free(&c->restore.prep);
    json_decref(c->request);
    json_decref(c->sessions);
    json_decref(c->record.rec);
    json_decref(c->body);
    free(c->body_text);
    crl_buf_free(&c->file);
    free(c);
    r->step = NULL;
    r->step_ops = NULL;
}

/* ---- one step at a time: the others wait their turn, in order ---- */

static void next_turn(struct crl_traj_sb *s);

static void unqueue(struct crl_traj_sb *s, struct crl_step *c)
{
    for (struct crl_step **p = (struct crl_step **)&s->waiting; *p; p = &(*p)->next_waiting)
        if (*p == c) {
            *p = c->next_waiting;
            s->n_waiting--;
            break;
        }
    c->waiting = false;
    c->r->pending--;
}

/* The sandbox is gone: nobody's turn will come. */
static void waiting_gone(struct crl_traj_sb *s)
{
    while (s->waiting) {
        struct crl_step *c = s->waiting;
        struct crl_req *r = c->r;
        unqueue(s, c);
        r->pending++; /* held across the answer */
        struct crl_err err = CRL_ERR_INIT;
        crl_err_set(&err, CRL_E_CONFLICT, "sandbox %s ended while this call waited for its turn",
                    s->sb->id);
        crl_req_error(r, &err);
        crl_req_pending_done(r);
    }
}

static int wait_turn(struct crl_req *r, struct crl_traj_sb *s, struct crl_err *err)
{
    struct crl_step *c = r->step;
    if (s->n_waiting >= TRAJ_MAX_WAITING)
        return crl_err_set(err, CRL_E_CAPACITY,
                           "%u calls already wait for sandbox %s, which records trajectory %s one "
                           "step at a time",
                           s->n_waiting, s->sb->id, s->traj->id);
    if (!c && !(c = step_new(r, s, err)))
        return -1;
    struct crl_step **p = (struct crl_step **)&s->waiting;
    while (*p)
        p = &(*p)->next_waiting;
    *p = c;
    c->next_waiting = NULL;
    c->waiting = true;
    s->n_waiting++;
    s->gone_hook = waiting_gone;
    r->pending++; /* answered when its turn comes */
    return 0;
}

/* The step in progress has ended: the next waiting call takes its turn
 * (a replayed one answers at once, and the one after it goes on). */
static void step_ended(struct crl_traj_sb *s)
{
    s->busy = false;
    next_turn(s);
}

static void step_cancel(struct crl_req *r)
{
    struct crl_step *c = r->step;
    if (c->waiting)
        unqueue(c->s, c); /* its client left before its turn */
    /* A call cancelled with its client never answers: the sandbox takes
     * the next step.  (What it changed is in the next checkpoint.) */
    if (c->running) {
        c->running = false;
        step_ended(c->s);
    }
}

/* ---- what a step is ---- */

static bool runs_command(const struct crl_step *c)
{
    return strcmp(c->kind, "exec") == 0 || strcmp(c->kind, "session_run") == 0;
}

/* The request as a canonical JSON value, and its hash: what a resumed
 * client's call must equal to be answered from the log. */
static int canonical(struct crl_req *r, struct crl_step *c, struct crl_err *err)
{
    json_t *q = json_pack("{s:s}", "kind", c->kind);
    if (r->route.ep == CRL_EP_SESSION || r->route.ep == CRL_EP_SESSION_RUN)
        json_object_set_new(q, "session", json_string(r->route.sub));
    if (r->route.ep == CRL_EP_FILES || r->route.ep == CRL_EP_FS) {
        json_t *qs = json_object();
        const char *keys[] = {"path", "user", "mode", "depth"};
        for (int i = 0; i < 4; i++) {
            const char *v = crl_req_query(r, keys[i]);
            if (v)
                json_object_set_new(qs, keys[i], json_string(v));
        }
        json_object_set_new(q, "query", qs);
    }
    json_t *body = NULL;
    if (r->route.ep != CRL_EP_FILES && r->body.len) {
        json_error_t je;
        body = json_loadb(r->body.data, r->body.len, 0, &je);
    }
    if (body) {
        json_object_set_new(q, "body", body);
        if (runs_command(c) && json_is_true(json_object_get(body, "stream"))) {
            /* Run it buffered (the answer must be durable before it is
             * sent); it is sent as the stream asked for. */
            c->stream = true;
            json_t *b2 = json_deep_copy(body);
            json_object_set_new(b2, "stream", json_false());
            cleanup_free char *text = json_dumps(b2, JSON_COMPACT);
            json_decref(b2);
            crl_buf_consume(&r->body, r->body.len);
            if (!text || crl_buf_append(&r->body, text, strlen(text)) < 0) {
                json_decref(q);
                return crl_err_sys(err, ENOMEM, "a step's request");
            }
        }
    } else if (r->body.len) {
        char d[CRL_DIGEST_LEN + 1];
        crl_sha256_buf(r->body.data, r->body.len, d);
        json_object_set_new(q, "body_sha256", json_string(d));
    } else {
        json_object_set_new(q, "body", json_null());
    }
    cleanup_free char *text = json_dumps(q, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text) {
        json_decref(q);
        return crl_err_sys(err, ENOMEM, "a step's request");
    }
    crl_sha256_buf(text, strlen(text), c->hash);
    c->request = q;
    return 0;
}

/* ---- answering ---- */

/* A command's result as its client asked for it: JSON, or the NDJSON a
 * stream would have sent (output lines, then the result).  Takes the
 * reference to body. */
static void answer(struct crl_req *r, struct crl_step *c, unsigned status, json_t *body)
{
    if (!c->stream || status != 200 || !json_is_object(body)) {
        crl_req_json(r, status, body);
        return;
    }
    crl_req_respond(r, 200, crl_req_stream_response(r, "application/x-ndjson"));
    const char *enc = json_string_value(json_object_get(body, "encoding"));
    bool b64 = enc && strcmp(enc, "base64") == 0;
    const char *keys[] = {"stdout", "stderr"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(body, keys[i]);
        if (json_is_string(v) && json_string_length(v)) {
            json_t *line = json_pack("{s:O}", keys[i], v);
            if (b64)
                json_object_set_new(line, "encoding", json_string("base64"));
            crl_req_stream_json(r, line);
        }
        json_object_del(body, keys[i]);
    }
    json_object_del(body, "encoding");
    crl_req_stream_json(r, json_pack("{s:o}", "result", body));
    crl_req_stream_end(r, false);
}

static void answer_file(struct crl_req *r, const void *data, size_t len, const char *mode,
                        uint32_t step, bool replayed)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    char n[16];
    snprintf(n, sizeof(n), "%u", step);
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    MHD_add_response_header(resp, "X-Corral-Kind", "file");
    if (mode && mode[0])
        MHD_add_response_header(resp, "X-Corral-Mode", mode);
    MHD_add_response_header(resp, "X-Corral-Step", n);
    MHD_add_response_header(resp, "X-Corral-Replayed", replayed ? "true" : "false");
    crl_req_respond(r, 200, resp);
}

/* Borrows body. */
static void mark(json_t *body, uint32_t n, bool replayed)
{
    if (!json_is_object(body))
        return;
    json_object_set_new(body, "step", json_integer(n));
    json_object_set_new(body, "replayed", json_boolean(replayed));
}

/* Fast-forward: the logged answer, and nothing runs. */
static void replay(struct crl_req *r, struct crl_step *c, const struct crl_traj_step *m)
{
    struct crl_traj_sb *s = c->s;
    struct crl_err err = CRL_ERR_INIT;
    json_t *rec = NULL, *body = NULL;
    struct crl_buf blob;
    crl_buf_init(&blob, CRL_BUF_UNBOUNDED);
    if (crl_traj_step_record(s->traj, m->n, &rec, &err) < 0)
        goto fail;
    unsigned status = (unsigned)json_integer_value(json_object_get(rec, "status"));
    const char *blob_id = json_string_value(json_object_get(rec, "response_blob"));
    if (blob_id) {
        crl_trajs_lock(s->ts);
        int rc = crl_blob_get(crl_trajs_store(s->ts), blob_id, &blob, SIZE_MAX, &err);
        crl_trajs_unlock(s->ts);
        if (rc < 0)
            goto fail;
    }
    s->cursor = m->n;
    s->replayed++;
    crl_trajs_counters(s->ts)->steps_replayed++;
    if (status == 200 && r->h->replayed)
        r->h->replayed(r);
    if (strcmp(c->kind, "file_read") == 0 && status == 200) {
        const char *mode = json_string_value(json_object_get(rec, "file_mode"));
        answer_file(r, blob.data, blob.len, mode, m->n, true);
    } else {
        if (blob_id) {
            json_error_t je;
            body = json_loadb(blob.data, blob.len, 0, &je);
        } else {
            body = json_deep_copy(json_object_get(rec, "response"));
        }
        if (!body) {
            crl_err_set(&err, CRL_E_INTERNAL, "trajectory %s: step %u has no readable answer",
                        s->traj->id, m->n);
            goto fail;
        }
        mark(body, m->n, true);
        answer(r, c, status, body);
    }
    json_decref(rec);
    crl_buf_free(&blob);
    return;
fail:
    json_decref(rec);
    crl_buf_free(&blob);
    crl_req_error(r, &err);
}

static void run_live(struct crl_req *r)
{
    struct crl_step *c = r->step;
    c->running = true;
    c->s->busy = true;
    c->started_at = crl_wall_s();
    c->t0 = crl_now_ns();
    r->h->run(r);
}

static void recorded(struct crl_traj_record_job *rj, const struct crl_err *err)
{
    struct crl_req *r = rj->ctx;
    struct crl_step *c = r->step;
    struct crl_traj_sb *s = c->s;
    if (err) {
        crl_warn(s->sb->id, "trajectory %s: a step could not be recorded: %s", s->traj->id,
                 err->msg);
        struct crl_err e2 = CRL_ERR_INIT;
        crl_err_set(&e2, CRL_E_INTERNAL,
                    "the call ran but could not be recorded in trajectory %s: %s", s->traj->id,
                    err->msg);
        crl_req_error(r, &e2);
    } else if (c->is_file) {
        answer_file(r, c->file.data ? c->file.data : "", c->file.len, c->file_mode, rj->st.n,
                    false);
    } else {
        json_t *body = c->body;
        c->body = NULL;
        mark(body, rj->st.n, false);
        answer(r, c, c->status, body);
    }
    crl_req_pending_done(r);
    step_ended(s);
}

/* The step's capture hook (request.h): a live call's answer, recorded
 * before it is sent.  Takes the reference to body when it returns true
 * (it answers with it once recorded), else leaves it to the caller. */
static bool capture(struct crl_req *r, unsigned status, json_t *body)
{
    struct crl_step *c = r->step;
    if (!c->running)
        return false;
    c->running = false;
    struct crl_traj_sb *s = c->s;
    if (status >= 500) {
        /* The platform failed, not the call: not a step; the answer goes as it is. */
        crl_req_json(r, status, body);
        step_ended(s);
        return true;
    }
    struct crl_err err = CRL_ERR_INIT;
    struct crl_traj_record_job *rj = &c->record;
    c->status = status;
    c->body = body;
    /* The worker fills rec in: nothing in it is shared with the loop. */
    rj->rec =
        json_pack("{s:s, s:o, s:s, s:i, s:f, s:f}", "kind", c->kind, "request",
                  json_deep_copy(c->request), "hash", c->hash, "status", (int)status, "started_at",
                  c->started_at, "duration_s", (double)(crl_now_ns() - c->t0) / 1e9);
    if (!rj->rec) {
        crl_err_sys(&err, ENOMEM, "a step");
        goto fail;
    }
    /* What the record references rather than holds: stored first. */
    if (r->h->begin && !r->body_streamed && r->body.len) /* an upload, held */
        rj->blob[rj->n_blobs++] = (typeof(rj->blob[0])){
            r->body.data, r->body.len, json_object_get(rj->rec, "request"), "body_blob"};
    if (c->is_file) {
        rj->blob[rj->n_blobs++] = (typeof(rj->blob[0])){c->file.data ? c->file.data : "",
                                                        c->file.len, rj->rec, "response_blob"};
        json_object_set_new(rj->rec, "file_mode", json_string(c->file_mode));
    } else {
        char *text = json_dumps(body, JSON_COMPACT);
        if (text && strlen(text) > CRL_TRAJ_INLINE_MAX) {
            c->body_text = text;
            rj->blob[rj->n_blobs++] =
                (typeof(rj->blob[0])){text, strlen(text), rj->rec, "response_blob"};
        } else {
            free(text);
            json_object_set_new(rj->rec, "response", json_deep_copy(body));
        }
    }
    /* What its sandbox's services were asked meanwhile: part of this step. */
    uint64_t dropped;
    json_t *exchanges = crl_service_take_pending(s->sb, &dropped);
    if (json_array_size(exchanges))
        json_object_set(rj->rec, "services", exchanges);
    if (dropped)
        json_object_set_new(rj->rec, "services_dropped", json_integer((json_int_t)dropped));
    json_decref(exchanges);
    if (strcmp(c->kind, "snapshot") == 0 && status == 200)
        snprintf(rj->ckpt_given, sizeof(rj->ckpt_given), "%s",
                 json_string_value(json_object_get(body, "checkpoint")));
    rj->s = s;
    rj->changes_state = c->changes_state && status < 400;
    rj->cb = recorded;
    rj->ctx = r;
    r->pending++;
    if (crl_traj_record_start(rj, &err) < 0) {
        r->pending--;
        goto fail;
    }
    return true; /* answered once durable */
fail:
    crl_warn(s->sb->id, "trajectory %s: a step could not be recorded: %s", s->traj->id, err.msg);
    struct crl_err e2 = CRL_ERR_INIT;
    crl_err_set(&e2, CRL_E_INTERNAL, "the call ran but could not be recorded in trajectory %s: %s",
                s->traj->id, err.msg);
    crl_req_error(r, &e2);
    step_ended(s);
    return true;
}

void crl_step_capture_file(struct crl_req *r, int fd, uint64_t size, const char *path)
{
    struct crl_step *c = r->step;
    struct crl_err err = CRL_ERR_INIT;
    struct stat st;
    if (fstat(fd, &st) == 0)
        snprintf(c->file_mode, sizeof(c->file_mode), "%04o", (unsigned)(st.st_mode & 07777));
    if (size > TRAJ_MAX_READ) {
        close(fd);
        crl_err_set(&err, CRL_E_TOO_LARGE,
                    "%s is %llu bytes; a trajectory records files up to %u MiB", path,
                    (unsigned long long)size, TRAJ_MAX_READ >> 20);
        crl_req_error(r, &err);
        return;
    }
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        if (crl_buf_append(&c->file, buf, (size_t)n) < 0)
            break;
    int e = errno;
    close(fd);
    if (n != 0) {
        crl_err_sys(&err, n < 0 ? e : EFBIG, "reading %s", path);
        crl_req_error(r, &err);
        return;
    }
    c->is_file = true;
    capture(r, 200, NULL);
}

bool crl_step_holds_upload(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0 || !r->sb->traj || !r->sb->traj->traj)
        return false;
    r->body_limit = TRAJ_MAX_UPLOAD;
    return true;
}

/* ---- going live ---- */

static void live_failed(struct crl_req *r, const struct crl_err *err)
{
    struct crl_step *c = r->step;
    struct crl_traj_sb *s = c->s;
    s->broken = true;
    snprintf(s->broken_msg, sizeof(s->broken_msg),
             "sandbox %s could not be brought to step %u of trajectory %s (%s); destroy it and "
             "create another",
             s->sb->id, s->cursor, s->traj->id, err->msg);
    crl_warn(s->sb->id, "%s", s->broken_msg);
    crl_trajs_counters(s->ts)->live_failed++;
    if (!r->gone) {
        struct crl_err e = CRL_ERR_INIT;
        crl_err_set(&e, CRL_E_INTERNAL, "%s", s->broken_msg);
        crl_req_error(r, &e);
    }
    crl_req_pending_done(r);
    step_ended(s); /* the waiting calls hear that it is broken */
}

static void live_ready(struct crl_req *r)
{
    struct crl_step *c = r->step;
    struct crl_traj_sb *s = c->s;
    struct crl_err err = CRL_ERR_INIT;
    s->live = true;
    crl_traj_noted(s);
    crl_trajs_counters(s->ts)->went_live++;
    if (crl_traj_event(s, "live",
                       json_pack("{s:i, s:s*, s:i}", "restored_from_step", (int)c->from_step,
                                 "restored", c->restore.prep.ckpt[0] ? c->restore.prep.ckpt : NULL,
                                 "sessions", (int)json_array_size(c->sessions)),
                       &err) < 0)
        crl_warn(s->sb->id, "trajectory %s: %s", s->traj->id, err.msg);
    crl_info(s->sb->id, "trajectory %s: live at step %u (state of step %u), after %llu replayed",
             s->traj->id, s->cursor, c->from_step, (unsigned long long)s->replayed);
    if (r->gone || r->client_gone) {
        crl_req_pending_done(r);
        step_ended(s);
        return;
    }
    r->pending--;
    run_live(r); /* still busy: its step now */
}

static void next_session(struct crl_req *r);

static void session_reopened(struct crl_session *ss, const struct crl_err *err, void *ctx)
{
    struct crl_req *r = ctx;
    if (err) {
        live_failed(r, err);
        return;
    }
    r->step->next_session++;
    next_session(r);
}

static void next_session(struct crl_req *r)
{
    struct crl_step *c = r->step;
    struct crl_err err = CRL_ERR_INIT;
    if (c->next_session >= json_array_size(c->sessions)) {
        live_ready(r);
        return;
    }
    json_t *e = json_array_get(c->sessions, c->next_session);
    const char *id = json_string_value(json_array_get(e, 0));
    json_t *body = json_array_get(e, 1);
    cleanup_free char *text = json_is_null(body) ? NULL : json_dumps(body, JSON_COMPACT);
    struct crl_session_req req;
    if (crl_session_req_parse(text ? text : "", text ? strlen(text) : 0, &req, &err) < 0) {
        live_failed(r, &err);
        return;
    }
    snprintf(req.id, sizeof(req.id), "%s", id ? id : "");
    int rc = crl_session_open(c->s->sb, &req, session_reopened, r, &err);
    crl_session_req_free(&req);
    if (rc < 0)
        live_failed(r, &err);
}

static void restored(struct crl_restore_req *rq, const struct crl_err *err)
{
    struct crl_req *r = rq->ctx;
    struct crl_step *c = r->step;
    if (err) {
        live_failed(r, err);
        return;
    }
    crl_traj_restored(c->s, &c->restore.prep); /* its state, and the index of it */
    crl_traj_restore_job_free(&c->restore.prep);
    next_session(r);
}

/* The sessions open at the cursor: opened along the path, not closed. */
static int sessions_at_cursor(struct crl_traj_sb *s, json_t **out, struct crl_err *err)
{
    struct crl_traj *t = s->traj;
    json_t *open = json_array();
    cleanup_free uint32_t *path = calloc(s->cursor + 1, sizeof(uint32_t));
    size_t n = 0;
    for (uint32_t k = s->cursor; k && path; k = t->steps[k].parent)
        path[n++] = k;
    while (n--) {
        const struct crl_traj_step *st = &t->steps[path[n]];
        bool opened = strcmp(st->kind, "session_open") == 0;
        if (!opened && strcmp(st->kind, "session_close") != 0)
            continue;
        json_t *rec;
        if (crl_traj_step_record(t, st->n, &rec, err) < 0) {
            json_decref(open);
            return -1;
        }
        json_t *resp = json_object_get(rec, "response");
        const char *id = json_string_value(json_object_get(resp, "session_id"));
        json_int_t status = json_integer_value(json_object_get(rec, "status"));
        if (opened && id && status < 300) {
            json_t *body = json_object_get(json_object_get(rec, "request"), "body");
            json_array_append_new(open, json_pack("[s, O]", id, body ? body : json_null()));
        } else if (!opened) {
            const char *sid =
                json_string_value(json_object_get(json_object_get(rec, "request"), "session"));
            for (size_t i = 0; sid && i < json_array_size(open); i++)
                if (strcmp(json_string_value(json_array_get(json_array_get(open, i), 0)), sid) ==
                    0) {
                    json_array_remove(open, i);
                    break;
                }
        }
        json_decref(rec);
    }
    *out = open;
    return 0;
}

static void go_live(struct crl_req *r)
{
    struct crl_step *c = r->step;
    struct crl_traj_sb *s = c->s;
    struct crl_err err = CRL_ERR_INIT;
    s->busy = true;
    r->pending++;
    snprintf(c->restore.prep.ckpt, sizeof(c->restore.prep.ckpt), "%s",
             crl_traj_live_state(s, &c->from_step));
    c->restore.sb = s->sb;
    c->restore.req.done = restored;
    c->restore.req.ctx = r;
    if (crl_sandbox_check_ready(s->sb, &err) < 0 || sessions_at_cursor(s, &c->sessions, &err) < 0) {
        live_failed(r, &err);
        return;
    }
    crl_step_restore_start(r->api->trajs, &c->restore);
}

static void next_turn(struct crl_traj_sb *s)
{
    while (!s->busy && s->waiting) {
        struct crl_step *c = s->waiting;
        struct crl_req *r = c->r;
        unqueue(s, c);
        r->pending++; /* held while it is taken */
        if (!crl_step_take(r))
            r->h->run(r); /* the sandbox left its trajectory meanwhile */
        crl_req_pending_done(r);
    }
}

bool crl_step_take(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_step *c = r->step;
    if (!r->h->step || (c && c->kind) || crl_req_sandbox(r, &err) < 0)
        return false; /* not a step: the endpoint answers (a 404 too) */
    struct crl_traj_sb *s = r->sb->traj;
    if (!s || !s->traj)
        return false;
    if (s->broken) {
        crl_err_set(&err, CRL_E_CONFLICT, "%s", s->broken_msg);
        crl_req_error(r, &err);
        return true;
    }
    if (s->busy) { /* in order, after the step in progress */
        if (wait_turn(r, s, &err) < 0)
            crl_req_error(r, &err);
        return true;
    }
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    if (r->route.ep == CRL_EP_FILES && ct && strncmp(ct, "application/x-tar", 17) == 0) {
        crl_err_set(&err, CRL_E_UNSUPPORTED,
                    "directories (tar streams) are not recorded in a trajectory; write files one "
                    "at a time");
        crl_req_error(r, &err);
        return true;
    }
    if (!c && !(c = step_new(r, s, &err))) {
        crl_req_error(r, &err);
        return true;
    }
    c->s = s;
    c->kind = r->h->step;
    c->changes_state = r->h->changes;
    if (canonical(r, c, &err) < 0) {
        crl_req_error(r, &err);
        return true;
    }
    if (!s->live) {
        const struct crl_traj_step *m = crl_traj_match(s, c->hash);
        if (m)
            replay(r, c, m);
        else
            go_live(r);
        return true;
    }
    run_live(r);
    return true;
}

/* ---- restoring a checkpoint: going live, and a fork's new sandbox ---- */

void crl_step_restore_init(struct crl_step_restore *rs)
{
    memset(rs, 0, sizeof(*rs));
    rs->prep.tar_fd = -1;
}

/* The restore's material is ready (on the worker): hand it to the backend. */
static void prepared(struct crl_traj_restore_job *rj, const struct crl_err *err)
{
    struct crl_step_restore *rs = rj->ctx;
    struct crl_sandbox *sb = rs->sb;
    struct crl_err e = CRL_ERR_INIT;
    if (!err && !rs->prep.ckpt[0]) {
        rs->req.done(&rs->req, NULL); /* the image is the state: nothing to apply */
        return;
    }
    if (!err && !sb->ops->restore) {
        crl_err_set(&e, CRL_E_UNSUPPORTED, "the %s backend cannot restore checkpoints",
                    sb->ops->name);
        err = &e;
    }
    if (!err && crl_sandbox_check_ready(sb, &e) < 0)
        err = &e;
    if (!err) {
        rs->req.tar_fd = rs->prep.tar_fd;
        if (sb->ops->restore(sb, &rs->req, &e) < 0)
            err = &e;
    }
    if (err)
        rs->req.done(&rs->req, err);
}

void crl_step_restore_start(struct crl_trajs *ts, struct crl_step_restore *rs)
{
    rs->prep.cb = prepared;
    rs->prep.ctx = rs;
    crl_traj_restore_prepare(ts, &rs->prep);
}
