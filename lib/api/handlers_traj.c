/* Trajectories over the API: every step endpoint of a sandbox that records
 * a trajectory (exec, sessions, files, snapshot) passes through here.
 *
 * While the sandbox fast-forwards, a call whose canonical request matches
 * the next logged step is answered from the log ("replayed": true) and
 * nothing runs.  The first call that matches none brings the sandbox live:
 * the checkpoint of the step it stands on is restored into it (the backend's
 * restore op), the sessions open at that step are opened again under their
 * ids, and the call runs.  A live call's answer is taken from
 * crl_req_json()/crl_req_error() by crl_traj_capture(), recorded (with a
 * checkpoint when the step can change state) and synced, and only then
 * sent.  One step at a time per sandbox: a second call meanwhile is 409.
 *
 * Also here: POST .../snapshot, POST .../fork, GET/DELETE /v1/trajectories. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../traj/traj.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "request.h"

#define TRAJ_MAX_UPLOAD (64u << 20) /* a file written in a step is held whole, to hash it */
#define TRAJ_MAX_READ (64u << 20)   /* a file read in a step is kept whole, to log it */
#define TRAJ_MAX_WAITING 256        /* calls waiting for a sandbox's step in progress */

struct crl_traj_call {
    struct crl_traj_sb *s;
    const char *kind;
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
    /* going live, or a fork's new sandbox: the state restored */
    struct crl_traj_restore_job prep;
    struct crl_restore_req restore;
    uint32_t from_step;
    json_t *sessions; /* [[id, body]] to open again */
    size_t next_session;
    /* a checkpoint taken for a snapshot or a fork from now */
    struct crl_traj_ckpt_job ckpt;
    char *snapshot_name;
    /* a file read in a step */
    bool is_file;
    struct crl_buf file;
    char file_mode[8];
    /* POST /v1/trajectories/gc */
    struct crl_traj_gc_job gc;
    /* a fork */
    struct crl_sandbox *source;
    int64_t fork_step;
    json_t *fork_body;
};

static struct crl_traj_call *call_new(void)
{
    struct crl_traj_call *c = calloc(1, sizeof(*c));
    if (c) {
        c->prep.tar_fd = -1;
        crl_buf_init(&c->file, TRAJ_MAX_READ);
    }
    return c;
}

void crl_traj_req_free(struct crl_req *r)
{
    struct crl_traj_call *c = r->tcall;
    if (c) {
        crl_traj_restore_job_free(&c->prep);
        json_decref(c->request);
        json_decref(c->sessions);
        json_decref(c->record.rec);
        json_decref(c->body);
        json_decref(c->fork_body);
        free(c->body_text);
        free(c->snapshot_name);
        crl_buf_free(&c->file);
        if (c->source)
            crl_sandbox_unref(c->source);
        free(c);
        r->tcall = NULL;
    }
    if (r->topen) {
        crl_traj_close(r->topen);
        r->topen = NULL;
    }
}

/* ---- one step at a time: the others wait their turn, in order ---- */

static void next_turn(struct crl_traj_sb *s);

static void unqueue(struct crl_traj_sb *s, struct crl_req *r)
{
    for (struct crl_req **p = (struct crl_req **)&s->waiting; *p; p = &(*p)->twait_next)
        if (*p == r) {
            *p = r->twait_next;
            s->n_waiting--;
            break;
        }
    r->twaiting = false;
    r->pending--;
}

/* The sandbox is gone: nobody's turn will come. */
static void waiting_gone(struct crl_traj_sb *s)
{
    while (s->waiting) {
        struct crl_req *r = s->waiting;
        unqueue(s, r);
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
    if (s->n_waiting >= TRAJ_MAX_WAITING)
        return crl_err_set(err, CRL_E_CAPACITY,
                           "%u calls already wait for sandbox %s, which records trajectory %s one "
                           "step at a time",
                           s->n_waiting, s->sb->id, s->traj->id);
    struct crl_req **p = (struct crl_req **)&s->waiting;
    while (*p)
        p = &(*p)->twait_next;
    *p = r;
    r->twait_next = NULL;
    r->twaiting = true;
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

void crl_h_traj_cleanup(struct crl_req *r)
{
    struct crl_traj_call *c = r->tcall;
    if (r->twaiting && r->sb && r->sb->traj)
        unqueue(r->sb->traj, r); /* its client left before its turn */
    /* A call cancelled with its client never answers: the sandbox takes
     * the next step.  (What it changed is in the next checkpoint.) */
    if (c && c->running) {
        c->running = false;
        step_ended(c->s);
    }
}

static struct crl_trajs *trajs_of(struct crl_req *r)
{
    return crl_api_trajs(r->api);
}

/* ---- what a step is ---- */

static const char *step_kind(struct crl_req *r, bool *changes)
{
    bool post = strcmp(r->method, "POST") == 0;
    *changes = false;
    switch (r->route.ep) {
    case CRL_EP_EXEC: *changes = true; return "exec";
    case CRL_EP_SESSIONS: return post ? "session_open" : NULL;
    case CRL_EP_SESSION: return "session_close";
    case CRL_EP_SESSION_RUN: *changes = true; return "session_run";
    case CRL_EP_FILES:
        if (post || strcmp(r->method, "PUT") == 0) {
            *changes = true;
            return "file_write";
        }
        return "file_read";
    case CRL_EP_SANDBOX_ACTION: return strcmp(r->route.sub, "snapshot") == 0 ? "snapshot" : NULL;
    default: return NULL;
    }
}

static bool runs_command(const struct crl_traj_call *c)
{
    return strcmp(c->kind, "exec") == 0 || strcmp(c->kind, "session_run") == 0;
}

/* The request as a canonical JSON value, and its hash: what a resumed
 * client's call must equal to be answered from the log. */
static int canonical(struct crl_req *r, struct crl_traj_call *c, struct crl_err *err)
{
    json_t *q = json_pack("{s:s}", "kind", c->kind);
    if (r->route.ep == CRL_EP_SESSION || r->route.ep == CRL_EP_SESSION_RUN)
        json_object_set_new(q, "session", json_string(r->route.sub));
    if (r->route.ep == CRL_EP_FILES) {
        json_t *qs = json_object();
        const char *keys[] = {"path", "user", "mode"};
        for (int i = 0; i < 3; i++) {
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
 * stream would have sent (output lines, then the result). */
static void answer(struct crl_req *r, struct crl_traj_call *c, unsigned status, json_t *body)
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

static void mark(json_t *body, uint32_t n, bool replayed)
{
    if (!json_is_object(body))
        return;
    json_object_set_new(body, "step", json_integer(n));
    json_object_set_new(body, "replayed", json_boolean(replayed));
}

/* Fast-forward: the logged answer, and nothing runs. */
static void replay(struct crl_req *r, struct crl_traj_call *c, const struct crl_traj_step *m)
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
    struct crl_traj_call *c = r->tcall;
    c->running = true;
    c->s->busy = true;
    c->started_at = crl_wall_s();
    c->t0 = crl_now_ns();
    crl_req_run_step(r);
}

static void recorded(struct crl_traj_record_job *rj, const struct crl_err *err)
{
    struct crl_req *r = rj->ctx;
    struct crl_traj_call *c = r->tcall;
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

bool crl_traj_capture(struct crl_req *r, unsigned status, json_t *body)
{
    struct crl_traj_call *c = r->tcall;
    if (!c || !c->running)
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
    if (r->body_held && r->body.len)
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

void crl_traj_capture_file(struct crl_req *r, int fd, uint64_t size)
{
    struct crl_traj_call *c = r->tcall;
    struct crl_err err = CRL_ERR_INIT;
    struct stat st;
    if (fstat(fd, &st) == 0)
        snprintf(c->file_mode, sizeof(c->file_mode), "%04o", (unsigned)(st.st_mode & 07777));
    if (size > TRAJ_MAX_READ) {
        close(fd);
        crl_err_set(&err, CRL_E_TOO_LARGE,
                    "%s is %llu bytes; a trajectory records files up to %u MiB", r->path,
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
        crl_err_sys(&err, n < 0 ? e : EFBIG, "reading %s", r->path);
        crl_req_error(r, &err);
        return;
    }
    c->is_file = true;
    crl_traj_capture(r, 200, NULL);
}

bool crl_traj_holds_upload(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0 || !r->sb->traj || !r->sb->traj->traj)
        return false;
    r->body_held = true;
    r->body_limit = TRAJ_MAX_UPLOAD;
    return true;
}

/* ---- going live ---- */

static void live_failed(struct crl_req *r, const struct crl_err *err)
{
    struct crl_traj_call *c = r->tcall;
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
    struct crl_traj_call *c = r->tcall;
    struct crl_traj_sb *s = c->s;
    struct crl_err err = CRL_ERR_INIT;
    s->live = true;
    crl_trajs_counters(s->ts)->went_live++;
    if (crl_traj_event(s, "live",
                       json_pack("{s:i, s:s*, s:i}", "restored_from_step", (int)c->from_step,
                                 "restored", c->prep.ckpt[0] ? c->prep.ckpt : NULL, "sessions",
                                 (int)json_array_size(c->sessions)),
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
    r->tcall->next_session++;
    next_session(r);
}

static void next_session(struct crl_req *r)
{
    struct crl_traj_call *c = r->tcall;
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
    struct crl_traj_call *c = r->tcall;
    if (err) {
        live_failed(r, err);
        return;
    }
    crl_traj_restored(c->s, &c->prep); /* its state, and the index of it */
    crl_traj_restore_job_free(&c->prep);
    next_session(r);
}

/* The restore's material is ready (on the worker): hand it to the backend. */
static void prepared(struct crl_traj_restore_job *rj, const struct crl_err *err)
{
    struct crl_req *r = rj->ctx;
    struct crl_traj_call *c = r->tcall;
    struct crl_sandbox *sb = c->s->sb;
    struct crl_err e = CRL_ERR_INIT;
    if (!err && !c->prep.ckpt[0]) {
        c->restore.done(&c->restore, NULL); /* the image is the state: nothing to apply */
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
        c->restore.tar_fd = c->prep.tar_fd;
        c->restore.ctx = r;
        if (sb->ops->restore(sb, &c->restore, &e) < 0)
            err = &e;
    }
    if (err)
        c->restore.done(&c->restore, err);
}

/* Restore checkpoint c->prep.ckpt into sb: material on the worker, then
 * the backend's restore op; c->restore.done runs at the end either way. */
static void start_restore(struct crl_req *r)
{
    struct crl_traj_call *c = r->tcall;
    c->restore.ctx = r;
    c->prep.cb = prepared;
    c->prep.ctx = r;
    crl_traj_restore_prepare(trajs_of(r), &c->prep);
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
    struct crl_traj_call *c = r->tcall;
    struct crl_traj_sb *s = c->s;
    struct crl_err err = CRL_ERR_INIT;
    s->busy = true;
    r->pending++;
    snprintf(c->prep.ckpt, sizeof(c->prep.ckpt), "%s", crl_traj_live_state(s, &c->from_step));
    c->restore.done = restored;
    c->restore.ctx = r;
    if (crl_sandbox_check_ready(s->sb, &err) < 0 || sessions_at_cursor(s, &c->sessions, &err) < 0) {
        live_failed(r, &err);
        return;
    }
    start_restore(r);
}

static void next_turn(struct crl_traj_sb *s)
{
    while (!s->busy && s->waiting) {
        struct crl_req *r = s->waiting;
        unqueue(s, r);
        r->pending++; /* held while it is taken */
        if (!crl_traj_take(r))
            crl_req_run_step(r); /* the sandbox left its trajectory meanwhile */
        crl_req_pending_done(r);
    }
}

bool crl_traj_take(struct crl_req *r)
{
    bool changes;
    const char *kind = step_kind(r, &changes);
    struct crl_err err = CRL_ERR_INIT;
    if (!kind || r->tcall || crl_req_sandbox(r, &err) < 0)
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
    struct crl_traj_call *c = call_new();
    if (!c) {
        crl_err_sys(&err, ENOMEM, "a step");
        crl_req_error(r, &err);
        return true;
    }
    c->s = s;
    c->kind = kind;
    c->changes_state = changes;
    r->tcall = c;
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

/* ---- create ---- */

int crl_traj_create_begin(struct crl_req *r, const struct crl_spec *spec, struct crl_err *err)
{
    return crl_traj_open(trajs_of(r), spec->trajectory, spec, NULL, false, &r->topen, err);
}

void crl_traj_create_abort(struct crl_req *r)
{
    crl_traj_close(r->topen); /* a new one, never used, is removed */
    r->topen = NULL;
}

int crl_traj_create_end(struct crl_req *r, struct crl_sandbox *sb, struct crl_err *err)
{
    if (!r->topen)
        return 0;
    struct crl_traj_sb *s = crl_traj_sb_get(trajs_of(r), sb, err);
    if (!s)
        return -1;
    struct crl_traj *t = r->topen;
    r->topen = NULL; /* the sandbox's now, closed when it is gone */
    return crl_traj_attach(s, t, err);
}

json_t *crl_traj_sandbox_json(struct crl_sandbox *sb, json_t *o)
{
    struct crl_traj_sb *s = sb->traj;
    if (!s || !json_is_object(o))
        return o;
    json_t *j = json_pack("{s:s*, s:s}", "state", s->state[0] ? s->state : NULL, "mode",
                          crl_checkpoint_mode_name(s->mode));
    if (s->traj) {
        json_object_set_new(j, "trajectory", json_string(s->traj->id));
        json_object_set_new(j, "step", json_integer(s->cursor));
        json_object_set_new(j, "live", json_boolean(s->live));
        json_object_set_new(j, "steps_replayed", json_integer((json_int_t)s->replayed));
        json_object_set_new(j, "steps_recorded", json_integer((json_int_t)s->recorded));
        if (s->broken)
            json_object_set_new(j, "broken", json_string(s->broken_msg));
    }
    json_object_set_new(o, "checkpoints", j);
    return o;
}

/* ---- snapshot ---- */

static void snapshot_taken(struct crl_traj_ckpt_job *cj, const struct crl_err *err)
{
    struct crl_req *r = cj->ctx;
    struct crl_traj_call *c = r->tcall;
    if (err) {
        crl_req_error(r, err);
    } else {
        const struct crl_ckpt_stats *st = &cj->st;
        crl_req_json(r, 200,
                     json_pack("{s:s, s:s, s:s*, s:{s:I, s:I, s:I, s:I, s:f}}", "sandbox",
                               r->sb->id, "checkpoint", cj->id, "name", c->snapshot_name, "stats",
                               "entries", (json_int_t)st->entries, "changed",
                               (json_int_t)st->changed, "removed", (json_int_t)st->removed,
                               "bytes_stored", (json_int_t)st->bytes_stored, "seconds",
                               cj->seconds));
    }
    crl_req_pending_done(r);
}

void crl_h_snapshot(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_t *body = NULL;
    if (crl_req_sandbox(r, &err) < 0 || crl_sandbox_check_ready(r->sb, &err) < 0)
        goto fail;
    if (r->body.len) {
        if (crl_json_load(r->body.data, r->body.len, &body, &err) < 0)
            goto fail;
        json_t *n = json_object_get(body, "name");
        if (!json_is_object(body) || json_object_size(body) > (n ? 1u : 0u) ||
            (n && (!json_is_string(n) || json_string_length(n) > 128))) {
            crl_err_set(&err, CRL_E_INVALID,
                        "a snapshot request is {\"name\": \"...\"} (at most 128 bytes), or empty");
            goto fail;
        }
    }
    struct crl_traj_sb *s = crl_traj_sb_get(trajs_of(r), r->sb, &err);
    if (!s)
        goto fail;
    /* A step of a trajectory has its call already; a plain snapshot not. */
    if (!r->tcall && !(r->tcall = call_new())) {
        crl_err_sys(&err, ENOMEM, "snapshot");
        goto fail;
    }
    struct crl_traj_call *c = r->tcall;
    const char *name = json_string_value(json_object_get(body, "name"));
    if (name && !(c->snapshot_name = strdup(name))) {
        crl_err_sys(&err, ENOMEM, "snapshot");
        goto fail;
    }
    json_decref(body);
    body = NULL;
    c->ckpt.s = s;
    c->ckpt.cb = snapshot_taken;
    c->ckpt.ctx = r;
    r->pending++;
    if (crl_traj_checkpoint_start(&c->ckpt, &err) < 0) {
        r->pending--;
        goto fail;
    }
    return;
fail:
    json_decref(body);
    crl_req_error(r, &err);
}

/* ---- fork ---- */

static void fork_answer(struct crl_req *r, struct crl_sandbox *sb)
{
    struct crl_traj_call *c = r->tcall;
    const char *ck = c->prep.ckpt;
    json_t *o = crl_traj_sandbox_json(sb, crl_sandbox_json(sb));
    json_object_set_new(o, "forked_from",
                        json_pack("{s:s, s:o, s:o}", "sandbox", c->source->id, "step",
                                  c->fork_step >= 0 ? json_integer(c->fork_step) : json_null(),
                                  "checkpoint", ck[0] ? json_string(ck) : json_null()));
    crl_req_json(r, 201, o);
}

static void fork_restored(struct crl_restore_req *rq, const struct crl_err *err)
{
    struct crl_req *r = rq->ctx;
    struct crl_traj_call *c = r->tcall;
    struct crl_sandbox *sb = c->s->sb;
    if (err) {
        crl_host_destroy(sb->host, sb, "restore_failed", NULL, NULL, NULL);
        if (!r->gone)
            crl_req_error(r, err);
    } else {
        crl_traj_restored(c->s, &c->prep);
        c->s->live = true;
        if (r->gone || r->client_gone)
            crl_host_destroy(sb->host, sb, "client_gone", NULL, NULL, NULL);
        else
            fork_answer(r, sb);
    }
    crl_traj_restore_job_free(&c->prep);
    crl_req_pending_done(r);
}

static void fork_created(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    struct crl_req *r = ctx;
    struct crl_traj_call *c = r->tcall;
    struct crl_err e = CRL_ERR_INIT;
    if (err) {
        crl_traj_create_abort(r);
        if (!r->gone)
            crl_req_error(r, err);
        crl_req_pending_done(r);
        return;
    }
    if (crl_traj_create_end(r, sb, &e) < 0 || !(c->s = crl_traj_sb_get(trajs_of(r), sb, &e))) {
        crl_host_destroy(sb->host, sb, "restore_failed", NULL, NULL, NULL);
        if (!r->gone)
            crl_req_error(r, &e);
        crl_req_pending_done(r);
        return;
    }
    c->restore.done = fork_restored;
    start_restore(r);
}

/* The new sandbox: the source's spec, with the trajectory asked for, if any. */
static void fork_create(struct crl_req *r)
{
    struct crl_traj_call *c = r->tcall;
    struct crl_err err = CRL_ERR_INIT;
    struct crl_spec spec;
    crl_spec_init(&spec);
    json_t *spec_json = crl_spec_to_json(&c->source->spec);
    json_t *traj = json_object_get(c->fork_body, "trajectory");
    json_object_del(spec_json, "trajectory");
    if (traj)
        json_object_set(spec_json, "trajectory", traj);
    int rc = crl_spec_from_json(spec_json, &spec, &err);
    json_decref(spec_json);
    if (rc < 0 || (spec.trajectory[0] && crl_traj_open(trajs_of(r), spec.trajectory, &spec,
                                                       c->prep.ckpt, true, &r->topen, &err) < 0)) {
        crl_spec_free(&spec);
        crl_req_error(r, &err);
        return;
    }
    r->pending++;
    if (crl_host_create(r->api->host, &spec, fork_created, r, &err) < 0) {
        r->pending--;
        crl_spec_free(&spec);
        crl_traj_create_abort(r);
        crl_req_error(r, &err);
    }
}

static void fork_checkpointed(struct crl_traj_ckpt_job *cj, const struct crl_err *err)
{
    struct crl_req *r = cj->ctx;
    struct crl_traj_call *c = r->tcall;
    if (err) {
        crl_req_error(r, err);
    } else if (!r->gone && !r->client_gone) {
        snprintf(c->prep.ckpt, sizeof(c->prep.ckpt), "%s", cj->id);
        fork_create(r);
    }
    crl_req_pending_done(r);
}

/* Which state a fork starts from: step N of the sandbox's trajectory, a
 * checkpoint by id, or (neither) its state now, checkpointed on the
 * worker.  0: c->prep.ckpt is set; 1: it will be (fork_checkpointed). */
static int fork_state(struct crl_req *r, json_t *body, struct crl_traj_call *c, struct crl_err *err)
{
    struct crl_sandbox *sb = r->sb;
    json_t *step = json_object_get(body, "step");
    json_t *ck = json_object_get(body, "checkpoint");
    c->fork_step = -1;
    if (step && ck)
        return crl_err_set(err, CRL_E_INVALID, "give step or checkpoint, not both");
    if (step) {
        struct crl_traj_sb *s = sb->traj;
        if (!json_is_integer(step) || json_integer_value(step) < 0)
            return crl_err_set(err, CRL_E_INVALID, "step must be a step number (0 or more)");
        if (!s || !s->traj)
            return crl_err_set(err, CRL_E_INVALID,
                               "sandbox %s records no trajectory: fork it from its state now "
                               "or from a checkpoint",
                               sb->id);
        json_int_t n = json_integer_value(step);
        if ((size_t)n > s->traj->n_steps)
            return crl_err_set(err, CRL_E_NOT_FOUND,
                               "step %lld does not exist in trajectory %s (it has %zu steps)",
                               (long long)n, s->traj->id, s->traj->n_steps);
        uint32_t k = (uint32_t)n;
        while (k && !s->traj->steps[k].known)
            k = s->traj->steps[k].parent;
        if (k != (uint32_t)n)
            return crl_err_set(err, CRL_E_CONFLICT,
                               "the state after step %lld of trajectory %s was not checkpointed "
                               "(checkpoint mode %s); the nearest is step %u",
                               (long long)n, s->traj->id, crl_checkpoint_mode_name(s->mode), k);
        c->fork_step = n;
        snprintf(c->prep.ckpt, sizeof(c->prep.ckpt), "%s", s->traj->steps[k].ckpt);
        return 0;
    }
    if (ck) {
        if (!json_is_string(ck))
            return crl_err_set(err, CRL_E_INVALID, "checkpoint must be a checkpoint id string");
        crl_trajs_lock(trajs_of(r));
        int rc = crl_ckpt_check(crl_trajs_store(trajs_of(r)), json_string_value(ck), err);
        crl_trajs_unlock(trajs_of(r));
        if (rc < 0)
            return -1;
        snprintf(c->prep.ckpt, sizeof(c->prep.ckpt), "%s", json_string_value(ck));
        return 0;
    }
    if (crl_sandbox_check_ready(sb, err) < 0)
        return -1;
    struct crl_traj_sb *s = crl_traj_sb_get(trajs_of(r), sb, err);
    if (!s)
        return -1;
    if (s->traj && !s->live) { /* fast-forwarding: its state is that of the cursor */
        uint32_t from;
        const char *id = crl_traj_live_state(s, &from);
        if (from != s->cursor)
            return crl_err_set(err, CRL_E_CONFLICT,
                               "the state at step %u of trajectory %s was not checkpointed",
                               s->cursor, s->traj->id);
        snprintf(c->prep.ckpt, sizeof(c->prep.ckpt), "%s", id);
        c->fork_step = s->cursor;
        return 0;
    }
    if (s->busy)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is running a step; fork it after",
                           sb->id);
    c->ckpt.s = s;
    c->ckpt.cb = fork_checkpointed;
    c->ckpt.ctx = r;
    r->pending++;
    if (crl_traj_checkpoint_start(&c->ckpt, err) < 0) {
        r->pending--;
        return -1;
    }
    return 1;
}

void crl_h_fork(struct crl_req *r)
{
    static const char *const keys[] = {"step", "checkpoint", "trajectory"};
    struct crl_err err = CRL_ERR_INIT;
    json_t *body = NULL;
    if (crl_req_sandbox(r, &err) < 0)
        goto fail;
    if (r->body.len && crl_json_load(r->body.data, r->body.len, &body, &err) < 0)
        goto fail;
    if (!body)
        body = json_object();
    if (!json_is_object(body)) {
        crl_err_set(&err, CRL_E_INVALID, "a fork request is a JSON object");
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < 3; i++)
            known |= strcmp(key, keys[i]) == 0;
        if (!known) {
            crl_err_set(&err, CRL_E_INVALID,
                        "unknown field '%s' in a fork request (step, checkpoint, trajectory)", key);
            goto fail;
        }
    }
    struct crl_traj_call *c = call_new();
    if (!c) {
        crl_err_sys(&err, ENOMEM, "fork");
        goto fail;
    }
    r->tcall = c;
    c->source = r->sb;
    crl_sandbox_ref(r->sb);
    c->fork_body = body;
    body = NULL;
    int rc = fork_state(r, c->fork_body, c, &err);
    if (rc < 0)
        goto fail;
    if (rc == 0)
        fork_create(r);
    return;
fail:
    json_decref(body);
    crl_req_error(r, &err);
}

/* ---- /v1/trajectories ---- */

static void each_line(json_t *step, void *ctx)
{
    struct crl_req *r = ctx;
    crl_req_stream_json(r, json_incref(step));
}

static void collected(struct crl_traj_gc_job *gj, const struct crl_err *err)
{
    struct crl_req *r = gj->ctx;
    if (err)
        crl_req_error(r, err);
    else
        crl_req_json(r, 200,
                     json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "trajectories",
                               (json_int_t)gj->trajectories, "blobs_removed",
                               (json_int_t)gj->st.blobs_removed, "bytes_removed",
                               (json_int_t)gj->st.bytes_removed, "blobs_kept",
                               (json_int_t)gj->st.blobs_kept, "young_kept",
                               (json_int_t)gj->st.young_kept, "tmp_removed",
                               (json_int_t)gj->st.tmp_removed, "missing", (json_int_t)gj->missing,
                               "grace_s", gj->grace_s, "seconds", gj->seconds));
    crl_req_pending_done(r);
}

/* POST /v1/trajectories/gc {"grace_s": N}: default an hour. */
static void gc(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_t *body = NULL;
    double grace = 3600;
    if (r->body.len) {
        if (crl_json_load(r->body.data, r->body.len, &body, &err) < 0)
            goto fail;
        json_t *g = json_object_get(body, "grace_s");
        if (!json_is_object(body) || json_object_size(body) > (g ? 1u : 0u) ||
            (g && (!json_is_number(g) || json_number_value(g) < 0))) {
            crl_err_set(&err, CRL_E_INVALID,
                        "a gc request is {\"grace_s\": seconds (0 or more)}, or empty");
            goto fail;
        }
        if (g)
            grace = json_number_value(g);
    }
    json_decref(body);
    if (!(r->tcall = call_new())) {
        crl_err_sys(&err, ENOMEM, "gc");
        crl_req_error(r, &err);
        return;
    }
    r->tcall->gc.grace_s = grace;
    r->tcall->gc.cb = collected;
    r->tcall->gc.ctx = r;
    r->pending++;
    crl_trajs_gc_start(trajs_of(r), &r->tcall->gc);
    return;
fail:
    json_decref(body);
    crl_req_error(r, &err);
}

void crl_h_trajectories(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_trajs *ts = trajs_of(r);
    json_t *o = NULL;
    if (r->route.ep == CRL_EP_TRAJECTORY_GC && strcmp(r->method, "POST") == 0) {
        gc(r);
        return;
    }
    if (r->route.ep == CRL_EP_TRAJECTORIES) {
        crl_req_json(r, 200, crl_trajs_list_json(ts, r->api->host));
        return;
    }
    if (strcmp(r->method, "DELETE") == 0) {
        if (crl_traj_remove(ts, r->route.name, &err) < 0)
            crl_req_error(r, &err);
        else
            crl_req_json(r, 200, json_pack("{s:s, s:b}", "id", r->route.name, "removed", 1));
        return;
    }
    if (r->route.ep == CRL_EP_TRAJECTORY_STEPS) {
        /* Read first, so that a missing or corrupt log is an error, not a cut stream. */
        if (crl_traj_read(ts, r->route.name, false, &o, NULL, NULL, &err) < 0) {
            crl_req_error(r, &err);
            return;
        }
        json_decref(o);
        crl_req_respond(r, 200, crl_req_stream_response(r, "application/x-ndjson"));
        int rc = crl_traj_read(ts, r->route.name, true, &o, each_line, r, &err);
        if (rc == 0)
            json_decref(o);
        crl_req_stream_end(r, rc < 0);
        return;
    }
    const char *outputs = crl_req_query(r, "outputs");
    bool with = outputs && (strcmp(outputs, "1") == 0 || strcmp(outputs, "true") == 0);
    if (crl_traj_read(ts, r->route.name, with, &o, NULL, NULL, &err) < 0)
        crl_req_error(r, &err);
    else
        crl_req_json(r, 200, o);
}
