#include "pool.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "host.h"

#define NS_PER_S 1000000000ull
#define TICK_NS (NS_PER_S / 4)   /* how often a pool looks at itself */
#define RETRY_NS (10 * NS_PER_S) /* a failing template is tried again after this */
#define MAX_IN_FLIGHT 2          /* a pool's creates at once: explicit ones come first */

struct crl_pool {
    struct crl_host *h;
    char name[CRL_POOL_NAME_MAX + 1];
    json_t *template; /* as given */
    char *key;        /* what a create must match: template_key() */
    unsigned min, max, target;
    struct crl_sandbox *head, *tail; /* ready, oldest first */
    unsigned n_idle, n_creating;
    double rate;          /* claims per second, smoothed */
    unsigned claims_tick; /* since the last tick */
    uint64_t claims, misses, made, died, failed, shed;
    char error[256];   /* why the template cannot be made, if it cannot */
    char waiting[256]; /* why the host has no room for it now, if it has not */
    unsigned long long retry_at_ns;
    struct crl_timer tick;
    bool removed; /* freed once its last create is back */
    struct crl_pool *next;
};

/* The part of a spec a sandbox is made with: all of it but what a claim
 * sets (labels, TTLs, the execs' env and cwd), as canonical JSON. */
static char *template_key(const struct crl_spec *s)
{
    json_t *j = crl_spec_to_json(s);
    if (!j)
        return NULL;
    static const char *const claim_sets[] = {"labels", "ttl_s", "idle_ttl_s",
                                             "on_ttl", "env",   "cwd"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(claim_sets); i++)
        json_object_del(j, claim_sets[i]);
    char *key = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    return key;
}

static struct crl_pool *find(struct crl_host *h, const char *name)
{
    for (struct crl_pool *p = h->pools; p; p = p->next)
        if (strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

/* ---- the ready list ---- */

static void push(struct crl_pool *p, struct crl_sandbox *sb)
{
    sb->pool_next = NULL;
    if (p->tail)
        p->tail->pool_next = sb;
    else
        p->head = sb;
    p->tail = sb;
    p->n_idle++;
}

static struct crl_sandbox *pop(struct crl_pool *p)
{
    struct crl_sandbox *sb = p->head;
    if (!sb)
        return NULL;
    p->head = sb->pool_next;
    if (!p->head)
        p->tail = NULL;
    sb->pool_next = NULL;
    p->n_idle--;
    return sb;
}

/* Destroy a sandbox the pool held (its reference too). */
static void discard(struct crl_pool *p, struct crl_sandbox *sb, const char *reason)
{
    sb->pool = NULL;
    crl_host_destroy(p->h, sb, reason, NULL, NULL, NULL);
    crl_sandbox_unref(sb);
}

static void drain(struct crl_pool *p, const char *reason)
{
    struct crl_sandbox *sb;
    while ((sb = pop(p)))
        discard(p, sb, reason);
}

/* ---- filling ---- */

static void fill(struct crl_pool *p);

/* How many it keeps ready: a second of recent claims on top of the floor,
 * within the ceiling. */
static unsigned target_of(const struct crl_pool *p)
{
    unsigned want = p->min + (unsigned)ceil(p->rate);
    return want < p->max ? want : p->max;
}

/* Its timer is stopped already (retire()). */
static void pool_free(struct crl_pool *p)
{
    json_decref(p->template);
    free(p->key);
    free(p);
}

static void failing(struct crl_pool *p, const struct crl_err *err)
{
    if (strcmp(p->error, err->msg) != 0)
        crl_warn(NULL, "pool %s: its template cannot be made (retrying every %llus): %s", p->name,
                 RETRY_NS / NS_PER_S, err->msg);
    snprintf(p->error, sizeof(p->error), "%s", err->msg);
    p->failed++;
    p->retry_at_ns = crl_now_ns() + RETRY_NS;
}

static void pool_created(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    struct crl_pool *p = ctx;
    p->n_creating--;
    if (err) {
        if (!p->removed)
            failing(p, err);
    } else if (p->removed) {
        sb->pool = NULL;
        crl_host_destroy(p->h, sb, "pool_removed", NULL, NULL, NULL);
    } else {
        crl_sandbox_ref(sb);
        push(p, sb);
        p->made++;
        if (p->error[0])
            crl_info(NULL, "pool %s: its template can be made again", p->name);
        p->error[0] = p->waiting[0] = 0;
        p->retry_at_ns = 0;
    }
    if (p->removed && p->n_creating == 0)
        pool_free(p);
    else if (!p->removed)
        fill(p);
}

static void fill(struct crl_pool *p)
{
    while (p->n_idle + p->n_creating < p->target && p->n_creating < MAX_IN_FLIGHT &&
           crl_now_ns() >= p->retry_at_ns) {
        struct crl_err err = CRL_ERR_INIT;
        struct crl_spec s;
        if (crl_spec_from_json(p->template, &s, &err) < 0) {
            failing(p, &err);
            return;
        }
        p->n_creating++;
        if (crl_host_create_pooled(p->h, &s, p, pool_created, p, &err) < 0) {
            p->n_creating--;
            crl_spec_free(&s);
            if (err.code != CRL_E_CAPACITY)
                failing(p, &err);
            else /* no room to spare: the next tick tries again */
                snprintf(p->waiting, sizeof(p->waiting), "%s", err.msg);
            return;
        }
    }
}

static void tick(struct crl_timer *t)
{
    struct crl_pool *p = t->data;
    /* The claims' rate, smoothed over a few seconds. */
    p->rate = 0.8 * p->rate + 0.2 * (double)p->claims_tick * (double)NS_PER_S / (double)TICK_NS;
    p->claims_tick = 0;
    p->target = target_of(p);
    /* One that died while it waited is never handed out. */
    for (struct crl_sandbox **pp = &p->head; *pp;) {
        struct crl_sandbox *sb = *pp;
        if (sb->state == CRL_SB_READY) {
            pp = &sb->pool_next;
            continue;
        }
        *pp = sb->pool_next;
        p->n_idle--;
        p->died++;
        crl_warn(sb->id, "pool %s: an idle sandbox ended (%s): replaced", p->name,
                 sb->end_reason[0] ? sb->end_reason : "failed");
        discard(p, sb, "pool_died");
    }
    p->tail = NULL;
    for (struct crl_sandbox *sb = p->head; sb; sb = sb->pool_next)
        p->tail = sb;
    /* Beyond the target (demand fell): give one back per tick. */
    if (p->n_idle > p->target)
        discard(p, pop(p), "pool_shrunk");
    fill(p);
    crl_timer_start(p->h->loop, &p->tick, TICK_NS, tick, p);
}

/* ---- the API's side ---- */

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > CRL_POOL_NAME_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

int crl_pool_set(struct crl_host *h, const char *name, json_t *template, unsigned min, unsigned max,
                 json_t **out, struct crl_err *err)
{
    if (!name_ok(name))
        return crl_err_set(err, CRL_E_INVALID,
                           "pool name '%s': 1-%d of [A-Za-z0-9._-], not . or ..", name,
                           CRL_POOL_NAME_MAX);
    if (max < 1 || max > CRL_POOL_MAX_SIZE || min > max)
        return crl_err_set(err, CRL_E_INVALID,
                           "pool %s: min %u and max %u: max must be 1-%d and at least min", name,
                           min, max, CRL_POOL_MAX_SIZE);
    struct crl_spec s;
    if (crl_spec_from_json(template, &s, err) < 0)
        return crl_err_prefix(err, "pool %s: template", name);
    char *key = NULL;
    int rc = -1;
    if (s.trajectory[0])
        crl_err_set(err, CRL_E_INVALID,
                    "pool %s: a template cannot record a trajectory (each sandbox of a pool is "
                    "made before anyone asks for it)",
                    name);
    else if (crl_host_check_spec(h, &s, err) < 0)
        crl_err_prefix(err, "pool %s: template", name);
    else if (!(key = template_key(&s)))
        crl_err_sys(err, ENOMEM, "pool %s", name);
    else
        rc = 0;
    crl_spec_free(&s);
    if (rc < 0)
        return -1;

    struct crl_pool *p = find(h, name);
    if (!p) {
        if (!(p = calloc(1, sizeof(*p)))) {
            free(key);
            return crl_err_sys(err, ENOMEM, "pool %s", name);
        }
        p->h = h;
        snprintf(p->name, sizeof(p->name), "%s", name);
        p->next = h->pools;
        h->pools = p;
        crl_timer_start(h->loop, &p->tick, TICK_NS, tick, p);
    } else if (strcmp(p->key, key) != 0) {
        drain(p, "pool_changed"); /* made for the old template */
    }
    json_decref(p->template);
    p->template = json_incref(template);
    free(p->key);
    p->key = key;
    p->min = min;
    p->max = max;
    p->target = target_of(p);
    p->error[0] = 0;
    p->retry_at_ns = 0;
    crl_info(NULL, "pool %s: %u to %u ready sandboxes of %s", name, min, max, key);
    fill(p);
    if (out)
        *out = crl_pool_json(h, name, err);
    return 0;
}

int crl_pool_set_flag(struct crl_host *h, const char *flag, struct crl_err *err)
{
    /* NAME:MIN:MAX[:JSON] */
    char name[CRL_POOL_NAME_MAX + 2];
    const char *c1 = strchr(flag, ':');
    char *end;
    if (!c1 || (size_t)(c1 - flag) >= sizeof(name))
        return crl_err_set(err, CRL_E_INVALID, "--pool '%s': needs NAME:MIN:MAX[:SPEC_JSON]", flag);
    snprintf(name, sizeof(name), "%.*s", (int)(c1 - flag), flag);
    errno = 0;
    unsigned long min = strtoul(c1 + 1, &end, 10);
    if (errno || end == c1 + 1 || *end != ':')
        return crl_err_set(err, CRL_E_INVALID, "--pool '%s': MIN is not a number", flag);
    const char *c2 = end;
    unsigned long max = strtoul(c2 + 1, &end, 10);
    if (errno || end == c2 + 1 || (*end && *end != ':') || min > UINT32_MAX || max > UINT32_MAX)
        return crl_err_set(err, CRL_E_INVALID, "--pool '%s': MAX is not a number", flag);
    json_error_t je;
    json_t *t = *end ? json_loads(end + 1, 0, &je) : json_object();
    if (!t)
        return crl_err_set(err, CRL_E_INVALID, "--pool '%s': its spec is not JSON: %s", flag,
                           je.text);
    int rc = crl_pool_set(h, name, t, (unsigned)min, (unsigned)max, NULL, err);
    json_decref(t);
    return rc;
}

/* Off the host's list already: no more ticks, and freed once no create of
 * its is in flight (pool_created() frees it after the last). */
static void retire(struct crl_pool *p)
{
    crl_timer_stop(p->h->loop, &p->tick);
    p->removed = true;
    if (p->n_creating == 0)
        pool_free(p);
}

static void unlink_pool(struct crl_host *h, struct crl_pool *p)
{
    for (struct crl_pool **pp = &h->pools; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    drain(p, "pool_removed");
    retire(p);
}

int crl_pool_remove(struct crl_host *h, const char *name, struct crl_err *err)
{
    struct crl_pool *p = find(h, name);
    if (!p)
        return crl_err_set(err, CRL_E_NOT_FOUND, "pool '%s' not found", name);
    crl_info(NULL, "pool %s: removed", name);
    unlink_pool(h, p);
    return 0;
}

void crl_pools_free(struct crl_host *h)
{
    while (h->pools) {
        struct crl_pool *p = h->pools;
        h->pools = p->next;
        p->next = NULL;
        /* Idle ones stay in the table for the host's close to destroy. */
        struct crl_sandbox *sb;
        while ((sb = pop(p))) {
            sb->pool = NULL;
            crl_sandbox_unref(sb);
        }
        retire(p);
    }
}

static json_t *pool_json(const struct crl_pool *p)
{
    const char *state = p->error[0]              ? "failing"
                        : p->n_idle >= p->target ? "ready"
                        : p->waiting[0]          ? "waiting"
                                                 : "filling";
    return json_pack("{s:s, s:O, s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:I, "
                     "s:s, s:s?, s:s?}",
                     "name", p->name, "template", p->template, "min", (json_int_t)p->min, "max",
                     (json_int_t)p->max, "target", (json_int_t)p->target, "ready",
                     (json_int_t)p->n_idle, "creating", (json_int_t)p->n_creating, "claims_per_s",
                     p->rate, "claims", (json_int_t)p->claims, "misses", (json_int_t)p->misses,
                     "made", (json_int_t)p->made, "died", (json_int_t)p->died, "failed",
                     (json_int_t)p->failed, "shed", (json_int_t)p->shed, "state", state, "error",
                     p->error[0] ? p->error : NULL, "waiting",
                     p->waiting[0] && p->n_idle < p->target ? p->waiting : NULL);
}

json_t *crl_pools_json(struct crl_host *h)
{
    json_t *a = json_array();
    for (struct crl_pool *p = h->pools; p; p = p->next)
        json_array_append_new(a, pool_json(p));
    return json_pack("{s:o}", "pools", a);
}

json_t *crl_pool_json(struct crl_host *h, const char *name, struct crl_err *err)
{
    struct crl_pool *p = find(h, name);
    if (!p) {
        crl_err_set(err, CRL_E_NOT_FOUND, "pool '%s' not found", name);
        return NULL;
    }
    return pool_json(p);
}

/* ---- the host's side ---- */

struct crl_sandbox *crl_pools_claim(struct crl_host *h, const struct crl_spec *spec)
{
    if (!h->pools || spec->trajectory[0])
        return NULL;
    char *key = template_key(spec);
    if (!key)
        return NULL;
    struct crl_sandbox *sb = NULL;
    for (struct crl_pool *p = h->pools; p && !sb; p = p->next) {
        if (strcmp(p->key, key) != 0)
            continue;
        while ((sb = pop(p)) && sb->state != CRL_SB_READY) {
            p->died++;
            discard(p, sb, "pool_died");
        }
        if (sb) {
            sb->pool = NULL;
            p->claims++;
            p->claims_tick++;
        } else {
            p->misses++;
            p->claims_tick++; /* demand all the same */
        }
        fill(p);
        break;
    }
    free(key);
    return sb;
}

unsigned crl_pools_image_users(struct crl_host *h, const struct crl_image *img)
{
    unsigned n = 0;
    for (struct crl_pool *p = h->pools; p; p = p->next)
        for (struct crl_sandbox *sb = p->head; sb; sb = sb->pool_next)
            n += sb->image == img;
    return n;
}

void crl_pools_drain_image(struct crl_host *h, const struct crl_image *img)
{
    for (struct crl_pool *p = h->pools; p; p = p->next) {
        if (!p->head || p->head->image != img)
            continue; /* a pool's ready sandboxes are all of its template's image */
        crl_info(NULL, "pool %s: its image is removed: its ready sandboxes go", p->name);
        drain(p, "image_removed");
    }
}

bool crl_pools_shed(struct crl_host *h)
{
    struct crl_pool *most = NULL;
    for (struct crl_pool *p = h->pools; p; p = p->next)
        if (p->n_idle && (!most || p->n_idle > most->n_idle))
            most = p;
    if (!most)
        return false;
    most->shed++;
    discard(most, pop(most), "pool_shed");
    return true;
}

void crl_pools_metrics(struct crl_host *h, struct crl_buf *b)
{
    if (!h->pools)
        return;
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } series[] = {
        {"pool_ready", "gauge", "Ready sandboxes waiting in a pool.", 0},
        {"pool_claims_total", "counter", "Creates served from a pool.", 1},
        {"pool_misses_total", "counter", "Creates that matched a pool with none ready.", 2},
        {"pool_died_total", "counter", "Pool sandboxes that ended while idle.", 3},
        {"pool_failed_total", "counter", "Pool creates that failed.", 4},
    };
    for (size_t i = 0; i < CRL_ARRAY_SIZE(series); i++) {
        crl_buf_printf(b, "# HELP corral_%s %s\n# TYPE corral_%s %s\n", series[i].name,
                       series[i].help, series[i].name, series[i].type);
        for (struct crl_pool *p = h->pools; p; p = p->next) {
            uint64_t v[] = {p->n_idle, p->claims, p->misses, p->died, p->failed};
            crl_buf_printf(b, "corral_%s{pool=\"%s\"} %" PRIu64 "\n", series[i].name, p->name,
                           v[series[i].off]);
        }
    }
}
