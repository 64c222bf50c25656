#include "traj.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
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
    struct crl_traj *open;   /* every trajectory open in this process */
    struct crl_traj_sb *sbs; /* every sandbox's checkpoint state (changed under lock) */
    struct crl_traj_counters c;
    /* The worker: jobs queued by the loop, done ones handed back through
     * an eventfd.  `lock` is held by the worker for each job and by the
     * loop around its own (short) uses of the store and the logs. */
    struct crl_loop *loop;
    pthread_t thread;
    bool started, stopping;
    pthread_mutex_t lock, qlock;
    pthread_cond_t qcond;
    struct crl_traj_job *queue, *queue_tail, *finished;
    int efd;
    struct crl_watch w;
    /* the periodic collector */
    unsigned gc_period_s;
    struct crl_timer gc_timer;
    struct crl_traj_gc_job gc;
    bool gc_running;
};

void crl_trajs_lock(struct crl_trajs *ts)
{
    pthread_mutex_lock(&ts->lock);
}

void crl_trajs_unlock(struct crl_trajs *ts)
{
    pthread_mutex_unlock(&ts->lock);
}

static void *worker(void *arg)
{
    struct crl_trajs *ts = arg;
    pthread_mutex_lock(&ts->qlock);
    for (;;) {
        while (!ts->queue && !ts->stopping)
            pthread_cond_wait(&ts->qcond, &ts->qlock);
        struct crl_traj_job *j = ts->queue;
        if (!j)
            break; /* stopping, and nothing left to do */
        ts->queue = j->next;
        if (!ts->queue)
            ts->queue_tail = NULL;
        pthread_mutex_unlock(&ts->qlock);
        j->err = (struct crl_err)CRL_ERR_INIT;
        pthread_mutex_lock(&ts->lock);
        j->rc = j->work(j, &j->err);
        pthread_mutex_unlock(&ts->lock);
        pthread_mutex_lock(&ts->qlock);
        j->next = ts->finished;
        ts->finished = j;
        uint64_t one = 1;
        if (write(ts->efd, &one, sizeof(one)) < 0) { /* the loop reads it; it cannot fill */
        }
    }
    pthread_mutex_unlock(&ts->qlock);
    return NULL;
}

/* On the loop: hand finished jobs back, oldest first. */
static void run_finished(struct crl_trajs *ts)
{
    pthread_mutex_lock(&ts->qlock);
    struct crl_traj_job *j = ts->finished, *rev = NULL;
    ts->finished = NULL;
    pthread_mutex_unlock(&ts->qlock);
    while (j) {
        struct crl_traj_job *next = j->next;
        j->next = rev;
        rev = j;
        j = next;
    }
    while (rev) {
        struct crl_traj_job *next = rev->next;
        rev->done(rev, rev->rc < 0 ? &rev->err : NULL);
        rev = next;
    }
}

static void on_finished(struct crl_watch *w, uint32_t ev)
{
    struct crl_trajs *ts = w->data;
    uint64_t n;
    if (read(ts->efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        crl_warn(NULL, "trajectories: reading the worker's eventfd: %s", strerror(errno));
    run_finished(ts);
}

void crl_trajs_submit(struct crl_trajs *ts, struct crl_traj_job *j)
{
    j->ts = ts;
    j->next = NULL;
    pthread_mutex_lock(&ts->qlock);
    if (ts->queue_tail)
        ts->queue_tail->next = j;
    else
        ts->queue = j;
    ts->queue_tail = j;
    pthread_cond_signal(&ts->qcond);
    pthread_mutex_unlock(&ts->qlock);
}

int crl_trajs_open(const char *dir, struct crl_loop *loop, struct crl_trajs **out,
                   struct crl_err *err)
{
    struct crl_trajs *ts = calloc(1, sizeof(*ts));
    if (!ts)
        return crl_err_sys(err, ENOMEM, "trajectories");
    ts->dir_fd = -1;
    ts->loop = loop;
    pthread_mutex_init(&ts->lock, NULL);
    pthread_mutex_init(&ts->qlock, NULL);
    pthread_cond_init(&ts->qcond, NULL);
    ts->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ts->efd < 0) {
        crl_err_sys(err, errno, "eventfd");
        goto fail;
    }
    snprintf(ts->dir, sizeof(ts->dir), "%s/trajectories", dir);
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
    int e = pthread_create(&ts->thread, NULL, worker, ts);
    if (e) {
        crl_err_sys(err, e, "starting the trajectory worker");
        goto fail;
    }
    ts->started = true;
    if (crl_watch_start(loop, &ts->w, ts->efd, EPOLLIN, on_finished, ts) < 0) {
        crl_err_sys(err, errno, "watching the trajectory worker");
        goto fail;
    }
    *out = ts;
    return 0;
fail:
    crl_trajs_close(ts);
    return -1;
}

void crl_trajs_close(struct crl_trajs *ts)
{
    if (!ts)
        return;
    if (ts->started) {
        /* Jobs queued are steps being made durable: they finish. */
        pthread_mutex_lock(&ts->qlock);
        ts->stopping = true;
        pthread_cond_signal(&ts->qcond);
        pthread_mutex_unlock(&ts->qlock);
        pthread_join(ts->thread, NULL);
        run_finished(ts);
    }
    if (ts->w.active)
        crl_watch_stop(ts->loop, &ts->w);
    crl_timer_stop(ts->loop, &ts->gc_timer);
    while (ts->open)
        crl_traj_close(ts->open);
    crl_ckpt_store_close(ts->store);
    if (ts->dir_fd >= 0)
        close(ts->dir_fd);
    if (ts->efd >= 0)
        close(ts->efd);
    pthread_mutex_destroy(&ts->lock);
    pthread_mutex_destroy(&ts->qlock);
    pthread_cond_destroy(&ts->qcond);
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
                   c->record_seconds, (unsigned long long)crl_journal_torn_tails_total());
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
static int parse_step(struct crl_traj *t, const struct crl_journal_record *rec, struct crl_err *err)
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
    struct crl_journal_reader *rd;
    if (crl_journal_reader_open(t->log_path, NULL, &rd, err) < 0)
        return -1;
    struct crl_journal_record rec;
    int r;
    while ((r = crl_journal_reader_next(rd, &rec, err)) == 1) {
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
    crl_journal_reader_close(rd);
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
    if (crl_journal_append(t->log, CRL_TRAJ_BEGIN, text, strlen(text), NULL, err) < 0 ||
        crl_journal_sync(t->log, err) < 0)
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
    if (crl_journal_open(t->log_path, &t->log, err) < 0) {
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
    crl_journal_close(t->log);
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
    crl_journal_close(t->log);
    crl_journal_reader_close(t->reader);
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
    struct crl_journal *log = NULL;
    if (crl_journal_open(path, &log, err) < 0 && err->code == CRL_E_CONFLICT)
        return -1;
    int r = crl_rm_rf_at(ts->dir_fd, id);
    crl_journal_close(log);
    if (r < 0)
        return crl_err_sys(err, errno, "removing %s/%s", ts->dir, id);
    fsync(ts->dir_fd);
    return 0;
}

/* ---- a sandbox's checkpoints and trajectory ---- */

/* What a sandbox's state is now, for the collector: set under the lock. */
static void pin(struct crl_traj_sb *s, const char *id)
{
    snprintf(s->pinned, sizeof(s->pinned), "%s", id);
}

static void sb_free(struct crl_traj_sb *s)
{
    crl_trajs_lock(s->ts);
    for (struct crl_traj_sb **p = &s->ts->sbs; *p; p = &(*p)->next_in_ts)
        if (*p == s) {
            *p = s->next_in_ts;
            break;
        }
    crl_trajs_unlock(s->ts);
    if (s->traj) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_traj_event(s, "detach", NULL, &err) < 0)
            crl_warn(s->sb->id, "trajectory %s: %s", s->traj->id, err.msg);
        crl_traj_close(s->traj);
    }
    crl_ckpt_index_free(s->idx);
    free(s);
}

static void sb_gone(struct crl_sandbox *sb)
{
    struct crl_traj_sb *s = sb->traj;
    if (!s)
        return;
    sb->traj = NULL;
    if (s->gone_hook)
        s->gone_hook(s);
    if (s->jobs)
        s->gone = true; /* the last job's end frees it */
    else
        sb_free(s);
}

/* A job on s is queued: s and its sandbox stay until it is done. */
static void job_hold(struct crl_traj_sb *s)
{
    s->jobs++;
    crl_sandbox_ref(s->sb);
}

static void job_release(struct crl_traj_sb *s)
{
    struct crl_sandbox *sb = s->sb;
    if (--s->jobs == 0 && s->gone)
        sb_free(s);
    crl_sandbox_unref(sb);
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
    crl_trajs_lock(ts);
    s->next_in_ts = ts->sbs;
    ts->sbs = s;
    crl_trajs_unlock(ts);
    sb->traj = s;
    sb->on_gone = sb_gone;
    return s;
}

void crl_traj_noted(struct crl_traj_sb *s)
{
    if (!s->traj)
        return;
    json_t *o = json_pack("{s:s, s:i, s:i, s:b}", "id", s->traj->id, "cursor", (int)s->cursor,
                          "steps", (int)s->traj->n_steps, "live", s->live);
    crl_sandbox_note(s->sb, "trajectory", o);
    json_decref(o);
}

int crl_traj_reattach(struct crl_traj_sb *s, struct crl_traj *t, json_t *note, struct crl_err *err)
{
    json_int_t cursor = json_integer_value(json_object_get(note, "cursor"));
    json_int_t steps = json_integer_value(json_object_get(note, "steps"));
    if (!json_is_true(json_object_get(note, "live")) || cursor < 0 || cursor > steps ||
        steps != (json_int_t)t->n_steps)
        return crl_err_set(err, CRL_E_CONFLICT,
                           "trajectory %s has %zu steps, and its sandbox stood at step %lld of "
                           "%lld%s: it went on without it",
                           t->id, (size_t)t->n_steps, (long long)cursor, (long long)steps,
                           json_is_true(json_object_get(note, "live")) ? "" : " (fast-forwarding)");
    s->traj = t;
    t->attached = true;
    snprintf(t->holder, sizeof(t->holder), "%s", s->sb->id);
    s->cursor = (uint32_t)cursor;
    s->live = true;
    /* Its state is its writable layer as it is: the next checkpoint walks
     * all of it (the index of the last one went with corrald). */
    s->state[0] = 0;
    crl_traj_noted(s);
    /* A call in flight at the crash may have changed the sandbox and left
     * no step: said so in the log. */
    return crl_traj_event(
        s, "adopt",
        json_pack("{s:s, s:b}", "host", s->sb->host->cfg.host_id, "in_flight_unrecorded", 1), err);
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
    crl_traj_noted(s);
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
    const struct crl_journal_pos *want = &t->steps[n].pos;
    /* Fast-forward reads steps in order: one reader, reopened on a jump. */
    if (t->reader) {
        struct crl_journal_pos at = crl_journal_reader_pos(t->reader);
        if (at.offset != want->offset) {
            crl_journal_reader_close(t->reader);
            t->reader = NULL;
        }
    }
    if (!t->reader && crl_journal_reader_open(t->log_path, want, &t->reader, err) < 0)
        return -1;
    struct crl_journal_record rec;
    int r = crl_journal_reader_next(t->reader, &rec, err);
    if (r <= 0) {
        crl_journal_reader_close(t->reader);
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

/* ---- the work that waits on disks, on the worker ---- */

static int ckpt_work(struct crl_traj_job *j, struct crl_err *err)
{
    struct crl_traj_ckpt_job *cj = (struct crl_traj_ckpt_job *)j;
    unsigned long long t0 = crl_now_ns();
    int r = crl_ckpt_take(j->ts->store, cj->s->idx, cj->parent[0] ? cj->parent : NULL, &cj->view,
                          cj->id, &cj->st, err);
    close(cj->view.dir_fd);
    cj->view.dir_fd = -1;
    if (r == 0)
        pin(cj->s, cj->id);
    cj->seconds = (double)(crl_now_ns() - t0) / 1e9;
    return r;
}

static void ckpt_done(struct crl_traj_job *j, const struct crl_err *err)
{
    struct crl_traj_ckpt_job *cj = (struct crl_traj_ckpt_job *)j;
    struct crl_traj_sb *s = cj->s;
    if (!err) {
        snprintf(s->state, sizeof(s->state), "%s", cj->id);
        s->ts->c.checkpoints++;
        s->ts->c.checkpoint_bytes_stored += cj->st.bytes_stored;
        s->ts->c.checkpoint_seconds += cj->seconds;
    }
    cj->cb(cj, err);
    job_release(s);
}

static void view_fetched(struct crl_snapshot_req *rq, const struct crl_snapshot_view *v,
                         const struct crl_err *err)
{
    struct crl_traj_job *j = rq->ctx;
    if (err) {
        j->done(j, err); /* as if the job had failed: it releases its hold */
        return;
    }
    *j->view = *v;
    crl_trajs_submit(j->ts, j);
}

/* Open the sandbox's writable layer into *v for job j, then queue j: at
 * once where the backend opens it on the loop (cheap), once the backend
 * has fetched it where it must (snapshot_start).  s is held for j from
 * here; -1 if it cannot even start, with nothing held or queued. */
static int submit_with_view(struct crl_traj_sb *s, struct crl_traj_job *j,
                            struct crl_snapshot_view *v, struct crl_err *err)
{
    struct crl_sandbox *sb = s->sb;
    *v = (struct crl_snapshot_view){.dir_fd = -1};
    if (sb->ops->snapshot_start) {
        j->ts = s->ts;
        j->view = v;
        j->snap = (struct crl_snapshot_req){.done = view_fetched, .ctx = j};
        job_hold(s);
        if (sb->ops->snapshot_start(sb, &j->snap, err) < 0) {
            job_release(s);
            return -1;
        }
        return 0;
    }
    if (!sb->ops->snapshot)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "the %s backend cannot take checkpoints",
                           sb->ops->name);
    if (sb->ops->snapshot(sb, v, err) < 0)
        return -1;
    job_hold(s);
    crl_trajs_submit(s->ts, j);
    return 0;
}

int crl_traj_checkpoint_start(struct crl_traj_ckpt_job *cj, struct crl_err *err)
{
    struct crl_traj_sb *s = cj->s;
    memcpy(cj->parent, s->state, sizeof(cj->parent));
    cj->job.work = ckpt_work;
    cj->job.done = ckpt_done;
    return submit_with_view(s, &cj->job, &cj->view, err);
}

static int restore_work(struct crl_traj_job *j, struct crl_err *err)
{
    struct crl_traj_restore_job *rj = (struct crl_traj_restore_job *)j;
    rj->tar_fd = memfd_create("corral-restore", MFD_CLOEXEC);
    if (rj->tar_fd < 0)
        return crl_err_sys(err, errno, "memfd_create");
    if (crl_ckpt_write_tar(j->ts->store, rj->ckpt, rj->tar_fd, &rj->st, err) < 0)
        return -1;
    if (lseek(rj->tar_fd, 0, SEEK_SET) < 0)
        return crl_err_sys(err, errno, "lseek");
    if (!rj->ckpt[0]) {
        if (!(rj->idx = crl_ckpt_index_new()))
            return crl_err_sys(err, ENOMEM, "checkpoint index");
        return 0;
    }
    return crl_ckpt_index_load(j->ts->store, rj->ckpt, &rj->idx, err);
}

static void restore_done(struct crl_traj_job *j, const struct crl_err *err)
{
    struct crl_traj_restore_job *rj = (struct crl_traj_restore_job *)j;
    rj->cb(rj, err);
}

void crl_traj_restore_prepare(struct crl_trajs *ts, struct crl_traj_restore_job *rj)
{
    rj->tar_fd = -1;
    rj->idx = NULL;
    rj->job.work = restore_work;
    rj->job.done = restore_done;
    crl_trajs_submit(ts, &rj->job);
}

void crl_traj_restore_job_free(struct crl_traj_restore_job *rj)
{
    if (rj->tar_fd >= 0)
        close(rj->tar_fd);
    rj->tar_fd = -1;
    crl_ckpt_index_free(rj->idx);
    rj->idx = NULL;
}

void crl_traj_restored(struct crl_traj_sb *s, struct crl_traj_restore_job *rj)
{
    crl_ckpt_index_free(s->idx);
    s->idx = rj->idx;
    rj->idx = NULL;
    snprintf(s->state, sizeof(s->state), "%s", rj->ckpt);
    crl_trajs_lock(s->ts);
    pin(s, rj->ckpt);
    crl_trajs_unlock(s->ts);
}

static int append_synced(struct crl_traj *t, uint8_t type, json_t *rec, struct crl_journal_pos *pos,
                         struct crl_err *err)
{
    cleanup_free char *text = json_dumps(rec, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text)
        return crl_err_sys(err, ENOMEM, "trajectory %s: a record", t->id);
    if (crl_journal_append(t->log, type, text, strlen(text), pos, err) < 0 ||
        crl_journal_sync(t->log, err) < 0)
        return -1;
    return 0;
}

static int record_work(struct crl_traj_job *j, struct crl_err *err)
{
    struct crl_traj_record_job *rj = (struct crl_traj_record_job *)j;
    struct crl_trajs *ts = j->ts;
    struct crl_traj_step *st = &rj->st;
    for (int i = 0; i < rj->n_blobs; i++) {
        char id[CRL_CKPT_ID_MAX];
        if (crl_blob_put(ts->store, rj->blob[i].data, rj->blob[i].len, id, err) < 0)
            return -1;
        json_object_set_new(rj->blob[i].obj, rj->blob[i].key, json_string(id));
    }
    if (rj->n_blobs && crl_ckpt_store_sync(ts->store, err) < 0)
        return -1;
    if (rj->take) {
        unsigned long long t0 = crl_now_ns();
        int r = crl_ckpt_take(ts->store, rj->s->idx, rj->parent_state[0] ? rj->parent_state : NULL,
                              &rj->view, st->ckpt, &rj->cs, err);
        close(rj->view.dir_fd);
        rj->view.dir_fd = -1;
        if (r < 0)
            return -1;
        pin(rj->s, st->ckpt);
        rj->took = true; /* the sandbox is at st->ckpt, even if the record fails */
        rj->ckpt_s = (double)(crl_now_ns() - t0) / 1e9;
        json_object_set_new(rj->rec, "checkpoint_stats",
                            json_pack("{s:I, s:I, s:I, s:f}", "changed", (json_int_t)rj->cs.changed,
                                      "removed", (json_int_t)rj->cs.removed, "bytes_stored",
                                      (json_int_t)rj->cs.bytes_stored, "seconds", rj->ckpt_s));
    }
    json_object_set_new(rj->rec, "checkpoint", st->ckpt[0] ? json_string(st->ckpt) : json_null());
    unsigned long long t0 = crl_now_ns();
    if (append_synced(rj->s->traj, CRL_TRAJ_STEP, rj->rec, &st->pos, err) < 0)
        return -1;
    rj->record_s = (double)(crl_now_ns() - t0) / 1e9;
    return 0;
}

static void record_done(struct crl_traj_job *j, const struct crl_err *err)
{
    struct crl_traj_record_job *rj = (struct crl_traj_record_job *)j;
    struct crl_traj_sb *s = rj->s;
    struct crl_err e2 = CRL_ERR_INIT;
    if (rj->view.dir_fd >= 0) /* the job failed before the checkpoint */
        close(rj->view.dir_fd);
    rj->view.dir_fd = -1;
    if (rj->took)
        snprintf(s->state, sizeof(s->state), "%s", rj->st.ckpt);
    if (!err && push_step(s->traj, &rj->st, &e2) < 0)
        err = &e2;
    if (!err) {
        if (rj->take) {
            s->ts->c.checkpoints++;
            s->ts->c.checkpoint_bytes_stored += rj->cs.bytes_stored;
            s->ts->c.checkpoint_seconds += rj->ckpt_s;
        }
        s->ts->c.record_seconds += rj->record_s;
        s->ts->c.steps_recorded++;
        s->cursor = rj->st.n;
        s->recorded++;
        crl_traj_noted(s);
    }
    rj->cb(rj, err);
    job_release(s);
}

int crl_traj_record_start(struct crl_traj_record_job *rj, struct crl_err *err)
{
    struct crl_traj_sb *s = rj->s;
    struct crl_traj *t = s->traj;
    struct crl_traj_step *st = &rj->st;
    const struct crl_traj_step *par = &t->steps[s->cursor];
    *st = (struct crl_traj_step){.n = (uint32_t)t->n_steps + 1, .parent = s->cursor};
    rj->view.dir_fd = -1;
    rj->take = rj->took = false;
    if (rj->ckpt_given[0]) {
        snprintf(st->ckpt, sizeof(st->ckpt), "%s", rj->ckpt_given);
        st->known = true;
    } else if (rj->changes_state && s->mode == CRL_CKPT_EVERY_STEP) {
        rj->take = true; /* the view is opened last, below */
        memcpy(rj->parent_state, s->state, sizeof(rj->parent_state));
        st->known = true;
    } else if (rj->changes_state) {
        st->known = false;
    } else {
        memcpy(st->ckpt, par->ckpt, sizeof(st->ckpt));
        st->known = par->known;
    }
    const char *hash = json_string_value(json_object_get(rj->rec, "hash"));
    const char *kind = json_string_value(json_object_get(rj->rec, "kind"));
    snprintf(st->hash, sizeof(st->hash), "%s", hash ? hash : "");
    snprintf(st->kind, sizeof(st->kind), "%s", kind ? kind : "");
    json_object_set_new(rj->rec, "n", json_integer(st->n));
    json_object_set_new(rj->rec, "parent", json_integer(st->parent));
    json_object_set_new(rj->rec, "known", json_boolean(st->known));
    json_object_set_new(rj->rec, "sandbox", json_string(s->sb->id));
    json_object_set_new(rj->rec, "recorded_at", json_real(crl_wall_s()));
    rj->job.work = record_work;
    rj->job.done = record_done;
    if (rj->take)
        return submit_with_view(s, &rj->job, &rj->view, err);
    job_hold(s);
    crl_trajs_submit(s->ts, &rj->job);
    return 0;
}

int crl_traj_event(struct crl_traj_sb *s, const char *event, json_t *extra, struct crl_err *err)
{
    json_t *rec = extra ? extra : json_object();
    json_object_set_new(rec, "event", json_string(event));
    json_object_set_new(rec, "sandbox", json_string(s->sb->id));
    json_object_set_new(rec, "at", json_integer(s->cursor));
    json_object_set_new(rec, "time", json_real(crl_wall_s()));
    crl_trajs_lock(s->ts); /* the worker may be appending a step */
    int r = append_synced(s->traj, CRL_TRAJ_EVENT, rec, NULL, err);
    crl_trajs_unlock(s->ts);
    json_decref(rec);
    return r;
}

/* ---- garbage collection ---- */

static int gc_mark_log(struct crl_trajs *ts, const char *id, struct crl_ckpt_marks *m,
                       uint64_t *missing, struct crl_err *err)
{
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s/log", ts->dir, id);
    struct crl_journal_reader *rd;
    if (crl_journal_reader_open(path, NULL, &rd, err) < 0)
        return -1;
    struct crl_journal_record rec;
    int r;
    while ((r = crl_journal_reader_next(rd, &rec, err)) == 1) {
        if (rec.type != CRL_TRAJ_BEGIN && rec.type != CRL_TRAJ_STEP)
            continue;
        json_error_t je;
        json_t *j = json_loadb((const char *)rec.payload, rec.len, 0, &je);
        if (!j) {
            crl_err_set(err, CRL_E_INTERNAL, "%s: the record at byte offset %llu is not JSON", path,
                        (unsigned long long)rec.pos.offset);
            r = -1;
            break;
        }
        const char *ck = json_string_value(
            json_object_get(j, rec.type == CRL_TRAJ_BEGIN ? "base" : "checkpoint"));
        const char *resp = json_string_value(json_object_get(j, "response_blob"));
        const char *body =
            json_string_value(json_object_get(json_object_get(j, "request"), "body_blob"));
        r = (ck ? crl_ckpt_mark_checkpoint(ts->store, m, ck, missing, err) : 0) < 0 ||
                    crl_ckpt_mark_blob(m, resp, err) < 0 || crl_ckpt_mark_blob(m, body, err) < 0
                ? -1
                : 1;
        json_decref(j);
        if (r < 0)
            break;
    }
    crl_journal_reader_close(rd);
    return r < 0 ? -1 : 0;
}

static int gc_work(struct crl_traj_job *j, struct crl_err *err)
{
    struct crl_traj_gc_job *gj = (struct crl_traj_gc_job *)j;
    struct crl_trajs *ts = j->ts;
    unsigned long long t0 = crl_now_ns();
    struct crl_ckpt_marks *m = crl_ckpt_marks_new();
    if (!m)
        return crl_err_sys(err, ENOMEM, "checkpoint gc");
    /* Under the lock, as every job: the sandboxes' states are settled. */
    int r = 0;
    for (struct crl_traj_sb *s = ts->sbs; s && r == 0; s = s->next_in_ts)
        if (s->pinned[0])
            r = crl_ckpt_mark_checkpoint(ts->store, m, s->pinned, &gj->missing, err);
    int fd = r == 0 ? dup(ts->dir_fd) : -1;
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (r == 0 && !d) {
        if (fd >= 0)
            close(fd);
        r = crl_err_sys(err, errno, "reading %s", ts->dir);
    }
    if (d) {
        rewinddir(d);
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
            if (e->d_name[0] == '.' || !crl_traj_id_ok(e->d_name))
                continue;
            gj->trajectories++;
            if (gc_mark_log(ts, e->d_name, m, &gj->missing, err) < 0) {
                char msg[sizeof(err->msg)];
                snprintf(msg, sizeof(msg), "%s", err->msg);
                r = crl_err_set(err, err->code,
                                "nothing was removed: trajectory %s cannot be read (%s)", e->d_name,
                                msg);
            }
        }
        closedir(d);
    }
    if (r == 0)
        r = crl_ckpt_sweep(ts->store, m, gj->grace_s, &gj->st, err);
    crl_ckpt_marks_free(m);
    gj->seconds = (double)(crl_now_ns() - t0) / 1e9;
    return r;
}

static void gc_done(struct crl_traj_job *j, const struct crl_err *err)
{
    struct crl_traj_gc_job *gj = (struct crl_traj_gc_job *)j;
    if (!err)
        crl_info(NULL,
                 "checkpoint gc: %llu trajectories, %llu blobs removed (%llu bytes), %llu kept, "
                 "%llu young kept, %.3fs",
                 (unsigned long long)gj->trajectories, (unsigned long long)gj->st.blobs_removed,
                 (unsigned long long)gj->st.bytes_removed, (unsigned long long)gj->st.blobs_kept,
                 (unsigned long long)gj->st.young_kept, gj->seconds);
    gj->cb(gj, err);
}

void crl_trajs_gc_start(struct crl_trajs *ts, struct crl_traj_gc_job *gj)
{
    gj->trajectories = gj->missing = 0;
    memset(&gj->st, 0, sizeof(gj->st));
    gj->job.work = gc_work;
    gj->job.done = gc_done;
    crl_trajs_submit(ts, &gj->job);
}

static void periodic_gc(struct crl_timer *t);

static void periodic_done(struct crl_traj_gc_job *gj, const struct crl_err *err)
{
    struct crl_trajs *ts = gj->ctx;
    ts->gc_running = false;
    if (err)
        crl_warn(NULL, "checkpoint gc: %s", err->msg);
    if (!ts->stopping)
        crl_timer_start(ts->loop, &ts->gc_timer, (uint64_t)ts->gc_period_s * 1000000000ull,
                        periodic_gc, ts);
}

static void periodic_gc(struct crl_timer *t)
{
    struct crl_trajs *ts = t->data;
    if (ts->gc_running)
        return;
    ts->gc_running = true;
    ts->gc.grace_s = ts->gc_period_s;
    ts->gc.cb = periodic_done;
    ts->gc.ctx = ts;
    crl_trajs_gc_start(ts, &ts->gc);
}

void crl_trajs_gc_every(struct crl_trajs *ts, unsigned period_s)
{
    ts->gc_period_s = period_s;
    crl_timer_stop(ts->loop, &ts->gc_timer);
    if (period_s)
        crl_timer_start(ts->loop, &ts->gc_timer, (uint64_t)period_s * 1000000000ull, periodic_gc,
                        ts);
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

/* The times a record stores as seconds, which the API gives as RFC 3339. */
static const char *const record_times[] = {"created_at", "started_at", "recorded_at", "time"};

int crl_traj_read(struct crl_trajs *ts, const char *id, bool outputs, json_t **out,
                  void (*each)(json_t *step, void *ctx), void *ctx, struct crl_err *err)
{
    if (!crl_traj_id_ok(id))
        return crl_err_set(err, CRL_E_INVALID, "'%s' is not a valid trajectory id", id);
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s/log", ts->dir, id);
    if (access(path, F_OK) < 0)
        return crl_err_set(err, CRL_E_NOT_FOUND, "trajectory %s not found", id);
    struct crl_journal_reader *rd;
    if (crl_journal_reader_open(path, NULL, &rd, err) < 0)
        return -1;
    json_t *o = json_pack("{s:s, s:o, s:o, s:o, s:o}", "id", id, "spec", json_null(), "base",
                          json_null(), "steps", json_array(), "events", json_array());
    json_t *steps = json_object_get(o, "steps");
    size_t n = 0, cap = 0;
    cleanup_free uint32_t *parents = NULL;
    struct crl_journal_record rec;
    int r;
    while ((r = crl_journal_reader_next(rd, &rec, err)) == 1) {
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
            crl_json_times(o, record_times, CRL_ARRAY_SIZE(record_times));
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
            if (outputs) {
                crl_trajs_lock(ts);
                inline_blobs(ts, j);
                crl_trajs_unlock(ts);
            }
            crl_json_times(j, record_times, CRL_ARRAY_SIZE(record_times));
            json_t *s = outputs ? json_incref(j) : step_summary(j);
            if (each) {
                each(s, ctx);
                json_decref(s);
            } else {
                json_array_append_new(steps, s);
            }
        } else if (rec.type == CRL_TRAJ_EVENT) {
            crl_json_times(j, record_times, CRL_ARRAY_SIZE(record_times));
            json_array_append(json_object_get(o, "events"), j);
        }
        json_decref(j);
    }
    crl_journal_reader_close(rd);
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
