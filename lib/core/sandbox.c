#include "sandbox.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"

#define NS_PER_S 1000000000ull

static const char *const state_names[] = {
    [CRL_SB_CREATING] = "creating",     [CRL_SB_READY] = "ready",
    [CRL_SB_PAUSED] = "paused",         [CRL_SB_FAILED] = "failed",
    [CRL_SB_DESTROYING] = "destroying", [CRL_SB_DESTROYED] = "destroyed",
};

const char *crl_sb_state_name(enum crl_sb_state s)
{
    return state_names[s];
}

void crl_sandbox_ref(struct crl_sandbox *sb)
{
    sb->refs++;
}

void crl_sandbox_unref(struct crl_sandbox *sb)
{
    if (--sb->refs == 0) {
        json_decref(sb->svc_log);
        json_decref(sb->svc_pending);
        json_decref(sb->children);
        json_decref(sb->notes);
        json_decref(sb->lost_children);
        crl_spec_free(&sb->spec);
        free(sb);
    }
}

/* ---- waiters and hooks ---- */

static void notify(struct crl_sb_waiter **list, struct crl_sandbox *sb, const struct crl_err *err)
{
    struct crl_sb_waiter *w = *list;
    *list = NULL;
    while (w) {
        struct crl_sb_waiter *next = w->next;
        w->cb(sb, err, w->ctx);
        free(w);
        w = next;
    }
}

static int add_waiter(struct crl_sb_waiter **list, crl_sandbox_cb cb, void *ctx,
                      struct crl_err *err)
{
    if (!cb)
        return 0;
    struct crl_sb_waiter *w = malloc(sizeof(*w));
    if (!w)
        return crl_err_sys(err, ENOMEM, "waiter");
    w->cb = cb;
    w->ctx = ctx;
    w->next = *list;
    *list = w;
    return 0;
}

int crl_sandbox_on_end(struct crl_sandbox *sb, crl_sandbox_hook hook, struct crl_err *err)
{
    for (size_t i = 0; i < CRL_ARRAY_SIZE(sb->end_hooks); i++) {
        if (sb->end_hooks[i] == hook)
            return 0;
        if (!sb->end_hooks[i]) {
            sb->end_hooks[i] = hook;
            return 0;
        }
    }
    return crl_err_set(err, CRL_E_INTERNAL, "sandbox %s: more than %d end hooks", sb->id,
                       CRL_SB_END_HOOKS);
}

/* End every process of a sandbox that is going away: what the layers
 * above run in it first (sessions answer their clients), then the rest. */
static void end_processes(struct crl_sandbox *sb)
{
    crl_sandbox_hook hooks[CRL_SB_END_HOOKS];
    memcpy(hooks, sb->end_hooks, sizeof(hooks));
    memset(sb->end_hooks, 0, sizeof(sb->end_hooks));
    for (size_t i = 0; i < CRL_ARRAY_SIZE(hooks) && hooks[i]; i++)
        hooks[i](sb);
    for (struct crl_proc *p = sb->procs; p; p = p->next_in_sb)
        if (p->started && !p->exited && !(sb->handed_over && p->outlives))
            sb->ops->kill(sb, p, CRL_KILL_TREE);
}

void crl_sandbox_hand_over(struct crl_sandbox *sb)
{
    crl_timer_stop(sb->owner->loop, &sb->ttl_timer);
    crl_timer_stop(sb->owner->loop, &sb->idle_timer);
    end_processes(sb);
}

/* Ready or paused -> `to` (destroying, failed): a paused sandbox is thawed
 * first (a frozen process can neither act on its end nor, on cgroup v1,
 * die of SIGKILL), what runs in it ends, and the backend releases what is
 * its (asynchronously: crl_sandbox_destroyed). */
static void teardown(struct crl_sandbox *sb, enum crl_sb_state to)
{
    if (sb->state == CRL_SB_PAUSED) {
        struct crl_err err = CRL_ERR_INIT;
        if (sb->ops->resume(sb, &err) < 0)
            crl_warn(sb->id, "thawing it to end it: %s", err.msg);
    }
    crl_sandbox_usage(sb, &sb->usage); /* the final figures */
    sb->state = to;
    end_processes(sb);
    crl_sandbox_ref(sb);
    sb->tearing_down = true;
    sb->ops->destroy(sb);
}

/* What the host keeps of it (its record) is out of date. */
static void changed(struct crl_sandbox *sb)
{
    if (sb->owner->changed)
        sb->owner->changed(sb);
}

/* ---- timers ---- */

static void ttl_expired(struct crl_timer *t);

/* Its ttl runs `secs` from now (0: it has none). */
static void arm_ttl(struct crl_sandbox *sb, unsigned secs)
{
    crl_timer_stop(sb->owner->loop, &sb->ttl_timer);
    sb->expires_at = secs ? crl_wall_s() + secs : 0;
    if (secs)
        crl_timer_start(sb->owner->loop, &sb->ttl_timer, (uint64_t)secs * NS_PER_S, ttl_expired,
                        sb);
}

/* Its time is up (`why`: "ttl" or "idle_ttl"): destroyed, or with on_ttl
 * pause, paused until the next call (or a resume) starts it again. */
static void expire(struct crl_sandbox *sb, const char *why, unsigned secs)
{
    struct crl_err err = CRL_ERR_INIT;
    if (sb->spec.pause_on_ttl && sb->state == CRL_SB_PAUSED) {
        sb->ttl_paused = true; /* paused already: a resume starts its time again */
        sb->expires_at = 0;
        changed(sb);
        return;
    }
    if (sb->spec.pause_on_ttl && crl_sandbox_pause(sb, &err) == 0) {
        crl_info(sb->id, "%s of %us reached: paused", why, secs);
        sb->ttl_paused = true;
        sb->expires_at = 0;
        changed(sb);
        return;
    }
    if (sb->spec.pause_on_ttl)
        crl_warn(sb->id, "%s of %us reached and it cannot pause (%s): destroying", why, secs,
                 err.msg);
    else
        crl_info(sb->id, "%s of %us reached: destroying", why, secs);
    crl_sandbox_destroy(sb, why, NULL, NULL, NULL);
}

static void ttl_expired(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    expire(sb, "ttl", sb->timeout_s);
}

static void idle_check(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    uint64_t idle_ns = (uint64_t)sb->spec.idle_ttl_s * NS_PER_S;
    uint64_t now = crl_now_ns();
    if (now - sb->last_active_ns >= idle_ns) {
        expire(sb, "idle_ttl", sb->spec.idle_ttl_s);
        return;
    }
    crl_timer_start(sb->owner->loop, &sb->idle_timer, idle_ns - (now - sb->last_active_ns),
                    idle_check, sb);
}

void crl_sandbox_child_is(struct crl_sandbox *sb, const char *kind, const char *id, json_t *what)
{
    if (!sb->children && !(sb->children = json_object())) {
        json_decref(what);
        return;
    }
    json_t *k = json_object_get(sb->children, kind);
    if (!k && what && json_object_set_new(sb->children, kind, k = json_object()) < 0) {
        json_decref(what);
        return;
    }
    if (what)
        json_object_set_new(k, id, what);
    else if (json_object_del(k, id) < 0)
        return; /* not recorded: nothing changed */
    changed(sb);
}

void crl_sandbox_child(struct crl_sandbox *sb, const char *kind, const char *id, bool live)
{
    crl_sandbox_child_is(sb, kind, id, live ? json_true() : NULL);
}

void crl_sandbox_note(struct crl_sandbox *sb, const char *name, json_t *value)
{
    if (!value || (!sb->notes && !(sb->notes = json_object())))
        return;
    json_object_set(sb->notes, name, value);
    changed(sb);
}

const char *crl_sandbox_child_lost(const struct crl_sandbox *sb, const char *kind, const char *id)
{
    json_t *why = json_object_get(json_object_get(sb->lost_children, kind), id);
    if (!why)
        return NULL;
    if (json_is_string(why))
        return json_string_value(why);
    return "corrald was restarted while it ran, and its input and output were that daemon's: "
           "the new one ended it when it adopted the sandbox";
}

void crl_sandbox_touch(struct crl_sandbox *sb)
{
    sb->last_active_ns = crl_now_ns();
}

/* ---- lifecycle ---- */

static void start_ttls(struct crl_sandbox *sb)
{
    struct crl_loop *loop = sb->owner->loop;
    sb->timeout_s = sb->spec.ttl_s;
    arm_ttl(sb, sb->timeout_s);
    if (sb->spec.idle_ttl_s)
        crl_timer_start(loop, &sb->idle_timer, (uint64_t)sb->spec.idle_ttl_s * NS_PER_S, idle_check,
                        sb);
}

static const struct crl_err claim_lost = {.code = CRL_E_UNAVAILABLE,
                                          .msg = "the sandbox ended before it was handed over"};

/* Give back everything held for a sandbox that has ended. */
/* What a sandbox that runs nothing any more has no use for: its timers,
 * and its image (which may then be removed: what the kernel still holds of
 * its layers goes when the sandbox's mounts do). */
static void let_go(struct crl_sandbox *sb)
{
    crl_timer_stop(sb->owner->loop, &sb->ttl_timer);
    crl_timer_stop(sb->owner->loop, &sb->idle_timer);
    sb->expires_at = 0;
    if (sb->claim_timer.heap_idx) { /* ended between its claim and the answer */
        crl_timer_stop(sb->owner->loop, &sb->claim_timer);
        notify(&sb->create_waiters, sb, &claim_lost);
        crl_sandbox_unref(sb);
    }
    if (sb->image) {
        crl_image_put(sb->image);
        sb->image = NULL;
    }
}

static void release(struct crl_sandbox *sb)
{
    let_go(sb);
    sb->owner->release(sb);
}

int crl_sandbox_build(struct crl_sandbox *sb, crl_sandbox_cb cb, void *ctx, struct crl_err *err)
{
    /* Said first: a create that fails at once may have freed sb before
     * ops->create returns (crl_sandbox_created with an error). */
    crl_info(sb->id, "creating backend=%s image=%s memory_mb=%u cpus=%.2f pids=%u disk_mb=%u",
             sb->spec.backend, sb->spec.image, sb->spec.memory_mb, sb->spec.cpus, sb->spec.pids,
             sb->spec.disk_mb);
    if (add_waiter(&sb->create_waiters, cb, ctx, err) < 0 || sb->ops->create(sb, err) < 0) {
        crl_err_prefix(err, "creating %s", sb->id);
        crl_warn(sb->id, "create failed: %s", err->msg);
        sb->owner->counters->create_failed++;
        free(sb->create_waiters);
        sb->create_waiters = NULL;
        release(sb);
        sb->owner->retire(sb, false);
        return -1;
    }
    return 0;
}

void crl_sandbox_created(struct crl_sandbox *sb, const struct crl_err *err)
{
    crl_sandbox_ref(sb);
    if (err) {
        /* The backend has already undone its part: nothing of it remains. */
        crl_warn(sb->id, "create failed: %s", err->msg);
        sb->owner->counters->create_failed++;
        release(sb);
        sb->state = CRL_SB_DESTROYED;
        sb->owner->retire(sb, false);
        notify(&sb->create_waiters, sb, err);
        notify(&sb->destroy_waiters, sb, NULL);
        crl_sandbox_unref(sb);
        return;
    }
    sb->state = CRL_SB_READY;
    sb->ready_at = crl_wall_s();
    sb->owner->counters->created++;
    crl_info(sb->id, "ready in %.1f ms", (sb->ready_at - sb->created_at) * 1e3);
    start_ttls(sb); /* first: its record says when its ttl ends */
    if (sb->owner->ready)
        sb->owner->ready(sb);
    notify(&sb->create_waiters, sb, NULL);
    if (sb->destroy_requested) /* its reason and waiters are in place */
        teardown(sb, CRL_SB_DESTROYING);
    crl_sandbox_unref(sb);
}

void crl_sandbox_adopted(struct crl_sandbox *sb, bool paused, double expires_at, unsigned timeout_s,
                         bool ttl_paused)
{
    sb->state = paused ? CRL_SB_PAUSED : CRL_SB_READY;
    sb->last_active_ns = crl_now_ns();
    sb->timeout_s = timeout_s;
    sb->ttl_paused = ttl_paused;
    /* Its ttl ends when it would have (wall clock); one already past ends
     * on the loop's next turn, as it would have then. */
    if (expires_at > 0) {
        double left = expires_at - crl_wall_s();
        sb->expires_at = expires_at;
        crl_timer_start(sb->owner->loop, &sb->ttl_timer, left > 0 ? (uint64_t)(left * 1e9) : 0,
                        ttl_expired, sb);
    }
    /* Its idle time starts now: when it was last used died with corrald. */
    if (sb->spec.idle_ttl_s && !paused)
        crl_timer_start(sb->owner->loop, &sb->idle_timer, (uint64_t)sb->spec.idle_ttl_s * NS_PER_S,
                        idle_check, sb);
    crl_info(sb->id, "adopted: %s, ttl %s", crl_sb_state_name(sb->state),
             expires_at > 0 ? "as it was" : "none running");
}

static void claim_done(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    notify(&sb->create_waiters, sb, NULL);
    crl_sandbox_unref(sb);
}

int crl_sandbox_claim(struct crl_sandbox *sb, struct crl_spec *spec, crl_sandbox_cb cb, void *ctx,
                      struct crl_err *err)
{
    if (add_waiter(&sb->create_waiters, cb, ctx, err) < 0)
        return -1;
    struct crl_kv labels[CRL_SPEC_MAX_LABELS];
    memcpy(labels, sb->spec.labels, sizeof(labels));
    memcpy(sb->spec.labels, spec->labels, sizeof(labels));
    memcpy(spec->labels, labels, sizeof(labels));
    size_t n = sb->spec.n_labels;
    sb->spec.n_labels = spec->n_labels;
    spec->n_labels = n;
    char **env = sb->spec.env, *cwd = sb->spec.cwd;
    sb->spec.env = spec->env;
    sb->spec.cwd = spec->cwd;
    spec->env = env;
    spec->cwd = cwd;
    sb->spec.ttl_s = spec->ttl_s;
    sb->spec.idle_ttl_s = spec->idle_ttl_s;
    sb->spec.pause_on_ttl = spec->pause_on_ttl;
    sb->created_at = sb->ready_at = crl_wall_s();
    sb->last_active_ns = crl_now_ns();
    start_ttls(sb);
    crl_sandbox_ref(sb); /* until the answer */
    crl_timer_start(sb->owner->loop, &sb->claim_timer, 0, claim_done, sb);
    return 0;
}

void crl_sandbox_failed(struct crl_sandbox *sb, const char *reason, const char *fmt, ...)
{
    if (sb->state != CRL_SB_READY && sb->state != CRL_SB_PAUSED)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sb->message, sizeof(sb->message), fmt, ap);
    va_end(ap);
    snprintf(sb->end_reason, sizeof(sb->end_reason), "%s", reason);
    crl_warn(sb->id, "failed (%s): %s", reason, sb->message);
    sb->owner->counters->failed++;
    sb->ended_at = crl_wall_s();
    teardown(sb, CRL_SB_FAILED); /* the backend's resources go; the record stays */
}

/* Destroyed as far as its user can tell: the end is logged and answered. */
static void destroyed_now(struct crl_sandbox *sb)
{
    sb->state = CRL_SB_DESTROYED;
    sb->ended_at = crl_wall_s();
    sb->owner->counters->destroyed++;
    crl_info(sb->id,
             "destroyed reason=%s lifetime_s=%.3f cpu_s=%.3f memory_peak_bytes=%" PRIu64
             " disk_bytes=%" PRIu64,
             sb->end_reason, sb->ended_at - sb->created_at, sb->usage.cpu_s,
             sb->usage.memory_peak_bytes, sb->usage.disk_bytes);
    notify(&sb->destroy_waiters, sb, NULL);
}

/* The layers above let go of it (a trajectory detaches). */
static void run_on_gone(struct crl_sandbox *sb)
{
    if (sb->on_gone) {
        void (*gone)(struct crl_sandbox *) = sb->on_gone;
        sb->on_gone = NULL;
        gone(sb);
    }
}

void crl_sandbox_stopped(struct crl_sandbox *sb)
{
    if (sb->state != CRL_SB_DESTROYING || !sb->tearing_down || sb->stopped)
        return;
    sb->stopped = true;
    let_go(sb);
    run_on_gone(sb);
    sb->owner->stopped(sb);
    destroyed_now(sb);
    sb->owner->retire(sb, true); /* the teardown's reference keeps it until released */
}

void crl_sandbox_destroyed(struct crl_sandbox *sb)
{
    /* A failed sandbox ended when it failed (and may have been destroyed,
     * as far as its user knows, meanwhile); a stopped one when it stopped. */
    bool ended = sb->state == CRL_SB_FAILED || sb->state == CRL_SB_DESTROYED;
    sb->tearing_down = false;
    release(sb);
    run_on_gone(sb);
    if (!ended)
        destroyed_now(sb);
    if (!sb->stopped) /* else retired when it stopped */
        sb->owner->retire(sb, true);
    crl_sandbox_unref(sb); /* the one taken when the teardown began */
}

int crl_sandbox_destroy(struct crl_sandbox *sb, const char *reason, crl_sandbox_cb cb, void *ctx,
                        struct crl_err *err)
{
    switch (sb->state) {
    case CRL_SB_DESTROYED:
        if (cb)
            cb(sb, NULL, ctx);
        return 0;
    case CRL_SB_FAILED:
        /* Its resources are released, or being released: its end buries it. */
        sb->state = CRL_SB_DESTROYED;
        crl_sandbox_ref(sb);
        if (cb)
            cb(sb, NULL, ctx);
        if (!sb->tearing_down)
            sb->owner->retire(sb, true);
        crl_sandbox_unref(sb);
        return 0;
    case CRL_SB_CREATING:
        sb->destroy_requested = true;
        snprintf(sb->end_reason, sizeof(sb->end_reason), "%s", reason);
        return add_waiter(&sb->destroy_waiters, cb, ctx, err);
    case CRL_SB_DESTROYING: return add_waiter(&sb->destroy_waiters, cb, ctx, err);
    case CRL_SB_READY:
    case CRL_SB_PAUSED: break;
    }
    if (add_waiter(&sb->destroy_waiters, cb, ctx, err) < 0)
        return -1;
    snprintf(sb->end_reason, sizeof(sb->end_reason), "%s", reason);
    teardown(sb, CRL_SB_DESTROYING);
    return 0;
}

/* ---- running things ---- */

/* CRL_E_CONFLICT: the sandbox is in no state for what was asked. */
static int not_ready(struct crl_sandbox *sb, struct crl_err *err)
{
    if (sb->state == CRL_SB_FAILED)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s has failed (%s): %s", sb->id,
                           sb->end_reason, sb->message);
    return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is %s", sb->id,
                       crl_sb_state_name(sb->state));
}

int crl_sandbox_check_ready(struct crl_sandbox *sb, struct crl_err *err)
{
    /* A paused sandbox wakes for whatever is asked of it. */
    if (sb->state == CRL_SB_PAUSED && crl_sandbox_resume(sb, err) < 0)
        return -1;
    if (sb->state == CRL_SB_READY)
        return 0;
    return not_ready(sb, err);
}

int crl_sandbox_pause(struct crl_sandbox *sb, struct crl_err *err)
{
    if (!sb->ops->pause || !sb->ops->resume)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "pause is not available for %s sandboxes",
                           sb->ops->name);
    if (sb->state == CRL_SB_PAUSED)
        return 0;
    if (sb->state != CRL_SB_READY)
        return not_ready(sb, err);
    if (sb->ops->pause(sb, err) < 0)
        return crl_err_prefix(err, "pausing %s", sb->id);
    sb->state = CRL_SB_PAUSED;
    /* Idle time does not count while paused (the ttl does): a paused
     * sandbox ends by its ttl or a destroy, and resuming starts its idle
     * time afresh. */
    crl_timer_stop(sb->owner->loop, &sb->idle_timer);
    crl_info(sb->id, "paused");
    return 0;
}

int crl_sandbox_resume(struct crl_sandbox *sb, struct crl_err *err)
{
    if (!sb->ops->pause || !sb->ops->resume)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "resume is not available for %s sandboxes",
                           sb->ops->name);
    if (sb->state == CRL_SB_READY)
        return 0;
    if (sb->state != CRL_SB_PAUSED)
        return not_ready(sb, err);
    if (sb->ops->resume(sb, err) < 0)
        return crl_err_prefix(err, "resuming %s", sb->id);
    sb->state = CRL_SB_READY;
    crl_sandbox_touch(sb);
    if (sb->spec.idle_ttl_s)
        crl_timer_start(sb->owner->loop, &sb->idle_timer, (uint64_t)sb->spec.idle_ttl_s * NS_PER_S,
                        idle_check, sb);
    if (sb->ttl_paused) { /* its time was up: it starts again */
        sb->ttl_paused = false;
        arm_ttl(sb, sb->timeout_s);
        changed(sb);
    }
    crl_info(sb->id, "resumed");
    return 0;
}

int crl_sandbox_set_timeout(struct crl_sandbox *sb, unsigned timeout_s, struct crl_err *err)
{
    if (sb->state != CRL_SB_READY && sb->state != CRL_SB_PAUSED)
        return not_ready(sb, err);
    sb->timeout_s = timeout_s;
    sb->ttl_paused = false;
    arm_ttl(sb, timeout_s);
    changed(sb);
    crl_info(sb->id, "ttl set to %us from now", timeout_s);
    return 0;
}

int crl_sandbox_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err)
{
    if (crl_sandbox_check_ready(sb, err) < 0)
        return -1;
    p->sb = sb;
    p->seq = ++sb->next_seq;
    p->in_fd = p->out_fd = p->err_fd = p->pidfd = -1;
    if (sb->ops->spawn(sb, p, err) < 0)
        return -1;
    crl_sandbox_ref(sb);
    p->next_in_sb = sb->procs;
    sb->procs = p;
    return 0;
}

json_t *crl_sandbox_proc_record(struct crl_sandbox *sb, struct crl_proc *p)
{
    json_t *be = sb->ops->proc_record ? sb->ops->proc_record(sb, p) : NULL;
    if (!be)
        return NULL;
    return json_pack("{s:i, s:i, s:I, s:o}", "pid", (int)p->pid, "ns_pid", (int)p->ns_pid, "seq",
                     (json_int_t)p->seq, "backend", be);
}

int crl_sandbox_adopt_proc(struct crl_sandbox *sb, struct crl_proc *p, json_t *rec,
                           struct crl_err *err)
{
    p->sb = sb;
    p->pid = (pid_t)json_integer_value(json_object_get(rec, "pid"));
    p->ns_pid = (pid_t)json_integer_value(json_object_get(rec, "ns_pid"));
    p->seq = (uint64_t)json_integer_value(json_object_get(rec, "seq"));
    p->in_fd = p->out_fd = p->err_fd = p->pidfd = -1;
    if (!sb->ops->adopt_proc)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "the %s backend cannot take a process back",
                           sb->ops->name);
    if (p->pid <= 0 || p->ns_pid <= 0 || !p->seq)
        return crl_err_set(err, CRL_E_INVALID, "its record names no process");
    if (sb->ops->adopt_proc(sb, p, json_object_get(rec, "backend"), err) < 0)
        return -1;
    if (sb->next_seq < p->seq)
        sb->next_seq = p->seq; /* what comes next is named after it */
    p->started = true;
    crl_sandbox_ref(sb);
    p->next_in_sb = sb->procs;
    sb->procs = p;
    return 0;
}

void crl_sandbox_release_proc(struct crl_sandbox *sb, struct crl_proc *p)
{
    sb->ops->release_proc(sb, p);
    crl_sandbox_proc_done(sb, p);
}

void crl_sandbox_proc_done(struct crl_sandbox *sb, struct crl_proc *p)
{
    for (struct crl_proc **pp = &sb->procs; *pp; pp = &(*pp)->next_in_sb)
        if (*pp == p) {
            *pp = p->next_in_sb;
            crl_sandbox_unref(sb);
            return;
        }
}

/* ---- what it reports ---- */

void crl_sandbox_usage(struct crl_sandbox *sb, struct crl_usage *u)
{
    if (sb->state == CRL_SB_READY || sb->state == CRL_SB_PAUSED ||
        (sb->state == CRL_SB_CREATING && sb->priv)) {
        if (sb->ops->stats(sb, u) == 0)
            return;
    }
    *u = sb->usage;
}

json_t *crl_sandbox_json(struct crl_sandbox *sb)
{
    struct crl_usage u;
    crl_sandbox_usage(sb, &u);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(sb->id));
    json_object_set_new(o, "backend", json_string(sb->spec.backend));
    json_object_set_new(o, "image", json_string(sb->spec.image));
    json_object_set_new(o, "state", json_string(crl_sb_state_name(sb->state)));
    json_object_set_new(o, "spec", crl_spec_to_json(&sb->spec));
    json_object_set_new(o, "created_at", crl_json_time(sb->created_at));
    json_object_set_new(o, "ready_at", crl_json_time(sb->ready_at));
    json_object_set_new(o, "ended_at", crl_json_time(sb->ended_at));
    json_object_set_new(o, "expires_at", crl_json_time(sb->expires_at));
    json_t *labels = json_object();
    for (size_t i = 0; i < sb->spec.n_labels; i++)
        json_object_set_new(labels, sb->spec.labels[i].key, json_string(sb->spec.labels[i].value));
    json_object_set_new(o, "labels", labels);
    json_object_set_new(o, "usage",
                        json_pack("{s:f, s:I, s:I, s:i, s:I, s:I, s:I}", "cpu_s", u.cpu_s,
                                  "memory_bytes", (json_int_t)u.memory_bytes, "memory_peak_bytes",
                                  (json_int_t)u.memory_peak_bytes, "pids", (json_int_t)u.pids,
                                  "disk_bytes", (json_int_t)u.disk_bytes, "disk_limit_bytes",
                                  (json_int_t)u.disk_limit_bytes, "oom_kills",
                                  (json_int_t)u.oom_kills));
    if (sb->end_reason[0])
        json_object_set_new(o, "end_reason", json_string(sb->end_reason));
    if (sb->message[0])
        json_object_set_new(o, "message", json_string(sb->message));
    json_object_set_new(o, "sessions", json_integer((json_int_t)sb->n_sessions));
    json_t *info = sb->ops->info ? sb->ops->info(sb) : NULL;
    if (info)
        json_object_set_new(o, sb->ops->name, info);
    return o;
}
