#include "traj.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/host.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"

struct crl_trajs {
    char dir[4096];
    int dir_fd;
    struct crl_ckpt_store *store;
    struct crl_traj *open; /* every trajectory open in this process */
    struct crl_traj_counters c;
};

int crl_trajs_open(const char *state_dir, struct crl_trajs **out, struct crl_err *err)
{
    struct crl_trajs *ts = calloc(1, sizeof(*ts));
    if (!ts)
        return crl_err_sys(err, ENOMEM, "trajectories");
    ts->dir_fd = -1;
    snprintf(ts->dir, sizeof(ts->dir), "%s/trajectories", state_dir);
    char blobs[4200];
    snprintf(blobs, sizeof(blobs), "%s/blobs", ts->dir);
    if (mkdir(ts->dir, 0700) < 0 && errno != EEXIST) {
        crl_err_sys(err, errno, "mkdir %s", ts->dir);
        goto fail;
    }
    ts->dir_fd = open(ts->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (ts->dir_fd < 0) {
        crl_err_sys(err, errno, "open %s", ts->dir);
        goto fail;
    }
    if (crl_ckpt_store_open(blobs, &ts->store, err) < 0)
        goto fail;
    *out = ts;
    return 0;
fail:
    if (ts->dir_fd >= 0)
        close(ts->dir_fd);
    free(ts);
    return -1;
}

void crl_trajs_close(struct crl_trajs *ts)
{
    if (!ts)
        return;
    while (ts->open)
        crl_traj_close(ts->open);
    crl_ckpt_store_close(ts->store);
    close(ts->dir_fd);
    free(ts);
}

struct crl_ckpt_store *crl_trajs_store(struct crl_trajs *ts)
{
    return ts->store;
}

struct crl_traj_counters *crl_trajs_counters(struct crl_trajs *ts)
{
    return &ts->c;
}

void crl_trajs_metrics(struct crl_trajs *ts, struct crl_buf *b)
{
    const struct crl_traj_counters *c = &ts->c;
    size_t open = 0;
    for (struct crl_traj *t = ts->open; t; t = t->next)
        open++;
    crl_buf_printf(b,
                   "# TYPE corral_trajectories_open gauge\ncorral_trajectories_open %zu\n"
                   "# TYPE corral_trajectory_steps_total counter\n"
                   "corral_trajectory_steps_total{how=\"recorded\"} %llu\n"
                   "corral_trajectory_steps_total{how=\"replayed\"} %llu\n"
                   "# TYPE corral_trajectory_went_live_total counter\n"
                   "corral_trajectory_went_live_total{result=\"ok\"} %llu\n"
                   "corral_trajectory_went_live_total{result=\"failed\"} %llu\n"
                   "# TYPE corral_checkpoints_total counter\ncorral_checkpoints_total %llu\n"
                   "# TYPE corral_checkpoint_bytes_stored_total counter\n"
                   "corral_checkpoint_bytes_stored_total %llu\n"
                   "# TYPE corral_checkpoint_seconds_total counter\n"
                   "corral_checkpoint_seconds_total %.6f\n"
                   "# TYPE corral_trajectory_record_seconds_total counter\n"
                   "corral_trajectory_record_seconds_total %.6f\n"
                   "# TYPE corral_trajectory_torn_tails_total counter\n"
                   "corral_trajectory_torn_tails_total %llu\n",
                   open, (unsigned long long)c->steps_recorded,
                   (unsigned long long)c->steps_replayed, (unsigned long long)c->went_live,
                   (unsigned long long)c->live_failed, (unsigned long long)c->checkpoints,
                   (unsigned long long)c->checkpoint_bytes_stored, c->checkpoint_seconds,
                   c->record_seconds, (unsigned long long)crl_traj_torn_tails_total());
}

const char *crl_trajs_dir(const struct crl_trajs *ts)
{
    return ts->dir;
}

/* ---- one trajectory ---- */

static struct crl_traj *find_open(struct crl_trajs *ts, const char *id)
{
    for (struct crl_traj *t = ts->open; t; t = t->next)
        if (strcmp(t->id, id) == 0)
            return t;
    return NULL;
}

static int push_step(struct crl_traj *t, const struct crl_traj_step *s, struct crl_err *err)
{
    if (t->n_steps + 1 >= t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        struct crl_traj_step *n = realloc(t->steps, cap * sizeof(*n));
        if (!n)
            return crl_err_sys(err, ENOMEM, "trajectory %s", t->id);
        t->steps = n;
        t->cap = cap;
    }
    t->steps[++t->n_steps] = *s;
    return 0;
}

/* A STEP record's payload into the in-memory tree. */
static int parse_step(struct crl_traj *t, const struct crl_traj_record *rec, struct crl_err *err)
{
    json_error_t je;
    json_t *j = json_loadb((const char *)rec->payload, rec->len, 0, &je);
    struct crl_traj_step s = {.pos = rec->pos};
    json_int_t n = 0, parent = -1;
    const char *hash = NULL, *kind = NULL;
    json_t *ck = NULL;
    int known = 1;
    if (!j ||
        json_unpack(j, "{s:I, s:I, s:s, s:s, s?o, s?b}", "n", &n, "parent", &parent, "hash", &hash,
                    "kind", &kind, "checkpoint", &ck, "known", &known) < 0 ||
        n != (json_int_t)t->n_steps + 1 || parent < 0 || parent >= n ||
        strlen(hash) > CRL_DIGEST_LEN || (ck && !json_is_null(ck) && !json_is_string(ck))) {
        json_decref(j);
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s: the step record at byte offset %llu is not a valid step %zu",
                           t->log_path, (unsigned long long)rec->pos.offset, t->n_steps + 1);
    }
    s.n = (uint32_t)n;
    s.parent = (uint32_t)parent;
    snprintf(s.hash, sizeof(s.hash), "%s", hash);
    snprintf(s.kind, sizeof(s.kind), "%s", kind);
    s.known = known;
    if (ck && json_is_string(ck))
        snprintf(s.ckpt, sizeof(s.ckpt), "%s", json_string_value(ck));
    json_decref(j);
    return push_step(t, &s, err);
}

static int read_log(struct crl_traj *t, struct crl_err *err)
{
    struct crl_traj_reader *rd;
    if (crl_traj_reader_open(t->log_path, NULL, &rd, err) < 0)
        return -1;
    struct crl_traj_record rec;
    int r;
    while ((r = crl_traj_reader_next(rd, &rec, err)) == 1) {
        if (rec.type == CRL_TRAJ_BEGIN && !t->spec) {
            json_error_t je;
            json_t *b = json_loadb((const char *)rec.payload, rec.len, 0, &je);
            json_t *spec = b ? json_object_get(b, "spec") : NULL;
            json_t *base = b ? json_object_get(b, "base") : NULL;
            if (!json_is_object(spec)) {
                json_decref(b);
                crl_err_set(err, CRL_E_INTERNAL, "%s: the first record is not a valid beginning",
                            t->log_path);
                r = -1;
                break;
            }
            t->spec = json_incref(spec);
            if (json_is_string(base))
                snprintf(t->base, sizeof(t->base), "%s", json_string_value(base));
            json_decref(b);
        } else if (rec.type == CRL_TRAJ_STEP) {
            if (!t->spec) {
                crl_err_set(err, CRL_E_INTERNAL, "%s: a step at byte offset %llu before the start",
                            t->log_path, (unsigned long long)rec.pos.offset);
                r = -1;
                break;
            }
            if (parse_step(t, &rec, err) < 0) {
                r = -1;
                break;
            }
        }
    }
    crl_traj_reader_close(rd);
    return r < 0 ? -1 : 0;
}

static const char *spec_str(json_t *spec, const char *key)
{
    const char *s = json_string_value(json_object_get(spec, key));
    return s ? s : "";
}

/* A trajectory resumes on what it was recorded on. */
static int check_spec(struct crl_traj *t, const struct crl_spec *spec, struct crl_err *err)
{
    const char *keys[] = {"backend", "runtime", "image"};
    const char *now[] = {spec->backend, spec->runtime, spec->image};
    for (int i = 0; i < 3; i++)
        if (strcmp(spec_str(t->spec, keys[i]), now[i]) != 0)
            return crl_err_set(err, CRL_E_CONFLICT,
                               "trajectory %s was recorded with %s '%s', not '%s'", t->id, keys[i],
                               spec_str(t->spec, keys[i]), now[i]);
    return 0;
}

static int write_begin(struct crl_traj *t, const struct crl_spec *spec, struct crl_err *err)
{
    json_t *js = crl_spec_to_json(spec);
    json_t *b =
        json_pack("{s:i, s:s, s:o, s:o, s:f}", "v", 1, "trajectory", t->id, "spec", js, "base",
                  t->base[0] ? json_string(t->base) : json_null(), "created_at", crl_wall_s());
    cleanup_free char *text = b ? json_dumps(b, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (!text) {
        json_decref(b);
        return crl_err_sys(err, ENOMEM, "trajectory %s", t->id);
    }
    t->spec = json_incref(json_object_get(b, "spec"));
    json_decref(b);
    if (crl_traj_log_append(t->log, CRL_TRAJ_BEGIN, text, strlen(text), NULL, err) < 0 ||
        crl_traj_log_sync(t->log, err) < 0)
        return -1;
    /* the log's name, too, must survive a crash */
    int fd = openat(t->ts->dir_fd, t->id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    fsync(t->ts->dir_fd);
    return 0;
}

int crl_traj_open(struct crl_trajs *ts, const char *id, const struct crl_spec *spec,
                  const char *base, bool must_be_new, struct crl_traj **out, struct crl_err *err)
{
    struct crl_traj *o = find_open(ts, id);
    if (o)
        return crl_err_set(err, CRL_E_CONFLICT, "trajectory %s is live in sandbox %s", id,
                           o->holder[0] ? o->holder : "(being created)");
    struct crl_traj *t = calloc(1, sizeof(*t));
    if (!t)
        return crl_err_sys(err, ENOMEM, "trajectory %s", id);
    t->ts = ts;
    snprintf(t->id, sizeof(t->id), "%s", id);
    snprintf(t->log_path, sizeof(t->log_path), "%s/%s/log", ts->dir, id);
    if (base)
        snprintf(t->base, sizeof(t->base), "%s", base);
    bool exists = faccessat(ts->dir_fd, t->id, F_OK, 0) == 0;
    if (exists && must_be_new) {
        crl_err_set(err, CRL_E_CONFLICT, "trajectory %s exists already", id);
        goto fail;
    }
    if (!exists) {
        if (mkdirat(ts->dir_fd, t->id, 0700) < 0) {
            crl_err_sys(err, errno, "mkdir %s/%s", ts->dir, t->id);
            goto fail;
        }
        t->created = true;
    }
    if (crl_traj_log_open(t->log_path, &t->log, err) < 0) {
        if (err->code == CRL_E_CONFLICT)
            crl_err_set(err, CRL_E_CONFLICT, "trajectory %s is held by another corrald (%s)", id,
                        t->log_path);
        goto fail;
    }
    if (!t->created && read_log(t, err) < 0)
        goto fail;
    if (!t->spec) { /* new, or a log whose beginning never became durable */
        if (write_begin(t, spec, err) < 0)
            goto fail;
    } else if (check_spec(t, spec, err) < 0) {
        goto fail;
    }
    if (!t->steps && !(t->steps = calloc(t->cap = 64, sizeof(*t->steps)))) {
        crl_err_sys(err, ENOMEM, "trajectory %s", id);
        goto fail;
    }
    /* steps[0] is the start: the base state, known */
    memset(&t->steps[0], 0, sizeof(t->steps[0]));
    snprintf(t->steps[0].ckpt, sizeof(t->steps[0].ckpt), "%s", t->base);
    t->steps[0].known = true;
    t->next = ts->open;
    ts->open = t;
    *out = t;
    return 0;
fail:
    crl_traj_log_close(t->log);
    if (t->created)
        crl_rm_rf_at(ts->dir_fd, t->id);
    json_decref(t->spec);
    free(t->steps);
    free(t);
    return -1;
}

void crl_traj_close(struct crl_traj *t)
{
    if (!t)
        return;
    struct crl_trajs *ts = t->ts;
    for (struct crl_traj **p = &ts->open; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    crl_traj_log_close(t->log);
    crl_traj_reader_close(t->reader);
    /* A create that failed leaves no trajectory behind. */
    if (t->created && t->n_steps == 0 && !t->attached)
        crl_rm_rf_at(ts->dir_fd, t->id);
    json_decref(t->spec);
    free(t->steps);
    free(t);
}

int crl_traj_remove(struct crl_trajs *ts, const char *id, struct crl_err *err)
{
    if (!crl_traj_id_ok(id))
        return crl_err_set(err, CRL_E_INVALID, "'%s' is not a valid trajectory id", id);
    if (find_open(ts, id))
        return crl_err_set(err, CRL_E_CONFLICT, "trajectory %s is live in sandbox %s", id,
                           crl_traj_holder(ts, id) ? crl_traj_holder(ts, id) : "(being created)");
    if (faccessat(ts->dir_fd, id, F_OK, 0) < 0)
        return crl_err_set(err, CRL_E_NOT_FOUND, "trajectory %s not found", id);
    /* Hold it while removing: another corrald may have it open. */
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s/log", ts->dir, id);
    struct crl_traj_log *log = NULL;
    if (crl_traj_log_open(path, &log, err) < 0 && err->code == CRL_E_CONFLICT)
        return -1;
    int r = crl_rm_rf_at(ts->dir_fd, id);
    crl_traj_log_close(log);
    if (r < 0)
        return crl_err_sys(err, errno, "removing %s/%s", ts->dir, id);
    fsync(ts->dir_fd);
    return 0;
}

/* ---- a sandbox's checkpoints and trajectory ---- */

static void sb_gone(struct crl_sandbox *sb)
{
    struct crl_traj_sb *s = sb->traj;
    if (!s)
        return;
    if (s->traj) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_traj_event(s, "detach", NULL, &err) < 0)
            crl_warn(sb->id, "trajectory %s: %s", s->traj->id, err.msg);
        crl_traj_close(s->traj);
    }
    crl_ckpt_index_free(s->idx);
    sb->traj = NULL;
    free(s);
}

struct crl_traj_sb *crl_traj_sb_get(struct crl_trajs *ts, struct crl_sandbox *sb,
                                    struct crl_err *err)
{
    if (sb->traj)
        return sb->traj;
    struct crl_traj_sb *s = calloc(1, sizeof(*s));
    if (!s || !(s->idx = crl_ckpt_index_new())) {
        free(s);
        crl_err_sys(err, ENOMEM, "checkpoint state of %s", sb->id);
        return NULL;
    }
    s->sb = sb;
    s->ts = ts;
    s->mode = sb->spec.checkpoint;
    s->live = true;
    sb->traj = s;
    sb->on_gone = sb_gone;
    return s;
}

int crl_traj_attach(struct crl_traj_sb *s, struct crl_traj *t, struct crl_err *err)
{
    s->traj = t;
    t->attached = true;
    snprintf(t->holder, sizeof(t->holder), "%s", s->sb->id);
    s->cursor = 0;
    /* A trajectory with a past fast-forwards through it; a new one runs. */
    s->live = t->created && !t->base[0];
    snprintf(s->state, sizeof(s->state), "%s", t->created ? t->base : "");
    return crl_traj_event(
        s, "attach",
        json_pack("{s:s, s:b}", "host", s->sb->host->cfg.host_id, "resumed", !t->created), err);
}

const char *crl_traj_holder(struct crl_trajs *ts, const char *id)
{
    struct crl_traj *t = find_open(ts, id);
    return t && t->holder[0] ? t->holder : NULL;
}

const struct crl_traj_step *crl_traj_match(const struct crl_traj_sb *s, const char *hash)
{
    const struct crl_traj *t = s->traj;
    for (size_t i = t->n_steps; i > s->cursor; i--)
        if (t->steps[i].parent == s->cursor && strcmp(t->steps[i].hash, hash) == 0)
            return &t->steps[i];
    return NULL;
}

const char *crl_traj_live_state(const struct crl_traj_sb *s, uint32_t *from_step)
{
    const struct crl_traj *t = s->traj;
    uint32_t k = s->cursor;
    while (k && !t->steps[k].known)
        k = t->steps[k].parent;
    *from_step = k;
    return t->steps[k].ckpt;
}

int crl_traj_step_record(struct crl_traj *t, uint32_t n, json_t **out, struct crl_err *err)
{
    if (n == 0 || n > t->n_steps)
        return crl_err_set(err, CRL_E_NOT_FOUND, "step %u does not exist in trajectory %s", n,
                           t->id);
    const struct crl_traj_pos *want = &t->steps[n].pos;
    /* Fast-forward reads steps in order: one reader, reopened on a jump. */
    if (t->reader) {
        struct crl_traj_pos at = crl_traj_reader_pos(t->reader);
        if (at.offset != want->offset) {
            crl_traj_reader_close(t->reader);
            t->reader = NULL;
        }
    }
    if (!t->reader && crl_traj_reader_open(t->log_path, want, &t->reader, err) < 0)
        return -1;
    struct crl_traj_record rec;
    int r = crl_traj_reader_next(t->reader, &rec, err);
    if (r <= 0) {
        crl_traj_reader_close(t->reader);
        t->reader = NULL;
        if (r == 0)
            crl_err_set(err, CRL_E_INTERNAL, "%s: step %u is missing at byte offset %llu",
                        t->log_path, n, (unsigned long long)want->offset);
        return -1;
    }
    json_error_t je;
    *out = json_loadb((const char *)rec.payload, rec.len, 0, &je);
    if (!*out)
        return crl_err_set(err, CRL_E_INTERNAL, "%s: step %u at byte offset %llu: %s", t->log_path,
                           n, (unsigned long long)want->offset, je.text);
    return 0;
}

int crl_traj_checkpoint(struct crl_traj_sb *s, char id[CRL_CKPT_ID_MAX], struct crl_ckpt_stats *st,
                        struct crl_err *err)
{
    struct crl_sandbox *sb = s->sb;
    if (!sb->ops->snapshot)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "the %s backend cannot take checkpoints",
                           sb->ops->name);
    struct crl_snapshot_view v = {.dir_fd = -1};
    if (sb->ops->snapshot(sb, &v, err) < 0)
        return -1;
    struct crl_ckpt_stats local = {0};
    if (!st)
        st = &local;
    unsigned long long t0 = crl_now_ns();
    int r = crl_ckpt_take(s->ts->store, s->idx, s->state[0] ? s->state : NULL, &v, id, st, err);
    close(v.dir_fd);
    if (r == 0) {
        snprintf(s->state, sizeof(s->state), "%s", id);
        s->ts->c.checkpoints++;
        s->ts->c.checkpoint_bytes_stored += st->bytes_stored;
        s->ts->c.checkpoint_seconds += (double)(crl_now_ns() - t0) / 1e9;
    }
    return r;
}

int crl_traj_restored(struct crl_traj_sb *s, const char *id, struct crl_err *err)
{
    struct crl_ckpt_index *idx;
    if (!id || !id[0]) {
        idx = crl_ckpt_index_new();
        if (!idx)
            return crl_err_sys(err, ENOMEM, "checkpoint index");
    } else if (crl_ckpt_index_load(s->ts->store, id, &idx, err) < 0) {
        return -1;
    }
    crl_ckpt_index_free(s->idx);
    s->idx = idx;
    snprintf(s->state, sizeof(s->state), "%s", id ? id : "");
    return 0;
}

static int append_synced(struct crl_traj *t, uint8_t type, json_t *rec, struct crl_traj_pos *pos,
                         struct crl_err *err)
{
    cleanup_free char *text = json_dumps(rec, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text)
        return crl_err_sys(err, ENOMEM, "trajectory %s: a record", t->id);
    if (crl_traj_log_append(t->log, type, text, strlen(text), pos, err) < 0 ||
        crl_traj_log_sync(t->log, err) < 0)
        return -1;
    return 0;
}

int crl_traj_record(struct crl_traj_sb *s, json_t *rec, bool changes_state, const char *ckpt,
                    uint32_t *n_out, struct crl_err *err)
{
    struct crl_traj *t = s->traj;
    struct crl_traj_step st = {.n = (uint32_t)t->n_steps + 1, .parent = s->cursor};
    const struct crl_traj_step *par = &t->steps[s->cursor];
    if (ckpt) {
        snprintf(st.ckpt, sizeof(st.ckpt), "%s", ckpt);
        st.known = true;
    } else if (changes_state && s->mode == CRL_CKPT_EVERY_STEP) {
        struct crl_ckpt_stats cs = {0};
        unsigned long long t0 = crl_now_ns();
        if (crl_traj_checkpoint(s, st.ckpt, &cs, err) < 0)
            return -1;
        st.known = true;
        json_object_set_new(rec, "checkpoint_stats",
                            json_pack("{s:I, s:I, s:I, s:f}", "changed", (json_int_t)cs.changed,
                                      "removed", (json_int_t)cs.removed, "bytes_stored",
                                      (json_int_t)cs.bytes_stored, "seconds",
                                      (double)(crl_now_ns() - t0) / 1e9));
    } else if (changes_state) {
        st.known = false;
    } else {
        memcpy(st.ckpt, par->ckpt, sizeof(st.ckpt));
        st.known = par->known;
    }
    const char *hash = json_string_value(json_object_get(rec, "hash"));
    const char *kind = json_string_value(json_object_get(rec, "kind"));
    snprintf(st.hash, sizeof(st.hash), "%s", hash ? hash : "");
    snprintf(st.kind, sizeof(st.kind), "%s", kind ? kind : "");
    json_object_set_new(rec, "n", json_integer(st.n));
    json_object_set_new(rec, "parent", json_integer(st.parent));
    json_object_set_new(rec, "checkpoint", st.ckpt[0] ? json_string(st.ckpt) : json_null());
    json_object_set_new(rec, "known", json_boolean(st.known));
    json_object_set_new(rec, "sandbox", json_string(s->sb->id));
    json_object_set_new(rec, "recorded_at", json_real(crl_wall_s()));
    unsigned long long t0 = crl_now_ns();
    if (append_synced(t, CRL_TRAJ_STEP, rec, &st.pos, err) < 0)
        return -1;
    s->ts->c.record_seconds += (double)(crl_now_ns() - t0) / 1e9;
    if (push_step(t, &st, err) < 0)
        return -1;
    s->cursor = st.n;
    s->recorded++;
    s->ts->c.steps_recorded++;
    *n_out = st.n;
    return 0;
}

int crl_traj_event(struct crl_traj_sb *s, const char *event, json_t *extra, struct crl_err *err)
{
    json_t *rec = extra ? extra : json_object();
    json_object_set_new(rec, "event", json_string(event));
    json_object_set_new(rec, "sandbox", json_string(s->sb->id));
    json_object_set_new(rec, "at", json_integer(s->cursor));
    json_object_set_new(rec, "time", json_real(crl_wall_s()));
    int r = append_synced(s->traj, CRL_TRAJ_EVENT, rec, NULL, err);
    json_decref(rec);
    return r;
}

/* ---- reading, for the API ---- */

/* The export carries what the record only references: a large answer, a
 * file read's bytes and a file write's (base64). */
static void inline_blobs(struct crl_trajs *ts, json_t *rec)
{
    struct crl_err err = CRL_ERR_INIT;
    const char *kind = json_string_value(json_object_get(rec, "kind"));
    const char *resp = json_string_value(json_object_get(rec, "response_blob"));
    json_t *req = json_object_get(rec, "request");
    const char *body = json_string_value(json_object_get(req, "body_blob"));
    struct crl_buf b;
    if (resp) {
        crl_buf_init(&b, CRL_BUF_UNBOUNDED);
        if (crl_blob_get(ts->store, resp, &b, SIZE_MAX, &err) < 0) {
            json_object_set_new(rec, "blob_error", json_string(err.msg));
        } else if (kind && strcmp(kind, "file_read") == 0) {
            char *b64 = crl_base64_encode(b.data ? b.data : "", b.len, NULL);
            json_object_set_new(rec, "content_base64", json_string(b64 ? b64 : ""));
            free(b64);
        } else {
            json_error_t je;
            json_t *j = json_loadb(b.data ? b.data : "", b.len, 0, &je);
            if (j)
                json_object_set_new(rec, "response", j);
        }
        crl_buf_free(&b);
    }
    if (body && json_is_object(req)) {
        crl_buf_init(&b, CRL_BUF_UNBOUNDED);
        if (crl_blob_get(ts->store, body, &b, SIZE_MAX, &err) < 0) {
            json_object_set_new(rec, "blob_error", json_string(err.msg));
        } else {
            char *b64 = crl_base64_encode(b.data ? b.data : "", b.len, NULL);
            json_object_set_new(req, "body_base64", json_string(b64 ? b64 : ""));
            free(b64);
        }
        crl_buf_free(&b);
    }
}

/* What a step looks like without its outputs. */
static json_t *step_summary(json_t *rec)
{
    json_t *o = json_deep_copy(rec);
    json_t *resp = json_object_get(o, "response");
    if (json_is_object(resp)) {
        json_object_del(resp, "stdout");
        json_object_del(resp, "stderr");
    }
    json_t *req = json_object_get(o, "request");
    if (json_is_object(req)) {
        json_t *body = json_object_get(req, "body");
        if (json_is_object(body))
            json_object_del(body, "stdin");
    }
    return o;
}

int crl_traj_read(struct crl_trajs *ts, const char *id, bool outputs, json_t **out,
                  void (*each)(json_t *step, void *ctx), void *ctx, struct crl_err *err)
{
    if (!crl_traj_id_ok(id))
        return crl_err_set(err, CRL_E_INVALID, "'%s' is not a valid trajectory id", id);
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s/log", ts->dir, id);
    if (access(path, F_OK) < 0)
        return crl_err_set(err, CRL_E_NOT_FOUND, "trajectory %s not found", id);
    struct crl_traj_reader *rd;
    if (crl_traj_reader_open(path, NULL, &rd, err) < 0)
        return -1;
    json_t *o = json_pack("{s:s, s:o, s:o, s:o, s:o}", "id", id, "spec", json_null(), "base",
                          json_null(), "steps", json_array(), "events", json_array());
    json_t *steps = json_object_get(o, "steps");
    size_t n = 0, cap = 0;
    cleanup_free uint32_t *parents = NULL;
    struct crl_traj_record rec;
    int r;
    while ((r = crl_traj_reader_next(rd, &rec, err)) == 1) {
        json_error_t je;
        json_t *j = json_loadb((const char *)rec.payload, rec.len, 0, &je);
        if (!j) {
            crl_err_set(err, CRL_E_INTERNAL, "%s: the record at byte offset %llu is not JSON: %s",
                        path, (unsigned long long)rec.pos.offset, je.text);
            r = -1;
            break;
        }
        if (rec.type == CRL_TRAJ_BEGIN) {
            json_object_set(o, "spec", json_object_get(j, "spec"));
            json_object_set(o, "base", json_object_get(j, "base"));
            json_object_set(o, "created_at", json_object_get(j, "created_at"));
        } else if (rec.type == CRL_TRAJ_STEP) {
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                uint32_t *p = realloc(parents, cap * sizeof(*p));
                if (!p) {
                    json_decref(j);
                    crl_err_sys(err, ENOMEM, "reading %s", path);
                    r = -1;
                    break;
                }
                parents = p;
            }
            parents[n++] = (uint32_t)json_integer_value(json_object_get(j, "parent"));
            if (outputs)
                inline_blobs(ts, j);
            json_t *s = outputs ? json_incref(j) : step_summary(j);
            if (each) {
                each(s, ctx);
                json_decref(s);
            } else {
                json_array_append_new(steps, s);
            }
        } else if (rec.type == CRL_TRAJ_EVENT) {
            json_array_append(json_object_get(o, "events"), j);
        }
        json_decref(j);
    }
    crl_traj_reader_close(rd);
    if (r < 0) {
        json_decref(o);
        return -1;
    }
    /* heads: steps no other step continues */
    cleanup_free bool *has_child = calloc(n + 1, sizeof(bool));
    json_t *heads = json_array();
    for (size_t i = 0; i < n && has_child; i++)
        if (parents[i] <= n)
            has_child[parents[i]] = true;
    for (size_t i = 1; i <= n && has_child; i++)
        if (!has_child[i])
            json_array_append_new(heads, json_integer((json_int_t)i));
    json_object_set_new(o, "n_steps", json_integer((json_int_t)n));
    json_object_set_new(o, "heads", heads);
    const char *holder = crl_traj_holder(ts, id);
    json_object_set_new(o, "live_sandbox", holder ? json_string(holder) : json_null());
    *out = o;
    return 0;
}

json_t *crl_trajs_list_json(struct crl_trajs *ts, struct crl_host *h)
{
    json_t *a = json_array();
    int fd = dup(ts->dir_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return json_pack("{s:o}", "trajectories", a);
    }
    rewinddir(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !crl_traj_id_ok(e->d_name))
            continue;
        struct crl_err err = CRL_ERR_INIT;
        json_t *t;
        if (crl_traj_read(ts, e->d_name, false, &t, NULL, NULL, &err) < 0) {
            json_array_append_new(a, json_pack("{s:s, s:s}", "id", e->d_name, "error", err.msg));
            continue;
        }
        json_object_del(t, "steps");
        json_object_del(t, "events");
        json_array_append_new(a, t);
    }
    closedir(d);
    return json_pack("{s:o}", "trajectories", a);
}
