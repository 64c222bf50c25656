#include "host.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "../os/proc.h"
#include "../util/worker.h"
#include "etc.h"
#include "netlog.h"
#include "pool.h"
#include "records.h"
#include "resolver.h"
#include "services.h"
#include "session.h"
#include "volume.h"

#define NS_PER_S 1000000000ull

static const struct crl_backend_ops *backend_find(struct crl_host *h, const char *name)
{
    for (size_t i = 0; i < h->cfg.n_backends; i++)
        if (strcmp(h->cfg.backends[i]->name, name) == 0)
            return h->cfg.backends[i];
    return NULL;
}

void crl_host_config_defaults(struct crl_host_config *c)
{
    memset(c, 0, sizeof(*c));
    c->state_dir = "/var/lib/corral";
    c->admission = CRL_ADMIT_MEASURED;
    c->max_sandboxes = 32768;
    c->overcommit = 1.0;
    c->cpu_overcommit = 16.0;
    c->reserve_mb = CRL_HOST_RESERVE_AUTO;
    c->retry_after_s = 1;
    c->cgroup_parent = "corral";
    c->lock_dir = "/run/corral";
    c->uid_base = 1u << 30; /* far above any uid a distribution hands out */
    c->uid_slots = 32768;   /* 2^30 + 32768 x 65536 ids stay below 2^32 */
    c->spawners = 0;        /* one per CPU, at most 4 */
    c->netns_pool = 256;
    c->network_range = "10.213.0.0/16";
    c->resolver_port = 10053;
    c->service_port = 10054;
    c->function_pool = 4;
    c->tombstone_s = 600;
    c->max_tombstones = 10000;
}

/* ---- the sandboxes' network ---- */

/* The tag keeps this daemon's links and table apart from another's on the
 * host: its cgroup parent is already one corrald's alone. */
static uint32_t vnet_tag(const struct crl_host *h)
{
    uint32_t tag = 2166136261u; /* FNV-1a */
    for (const char *c = h->cfg.cgroup_parent; *c; c++)
        tag = (tag ^ (unsigned char)*c) * 16777619u;
    return (tag ^ (tag >> 24)) & 0xffffff;
}

struct crl_vnet *crl_host_vnet(struct crl_host *h, struct crl_err *err)
{
    if (h->vnet)
        return h->vnet;
    struct crl_vnet_config vc = {.tag = vnet_tag(h),
                                 .dns_port = h->cfg.resolver_port,
                                 .service_port = h->cfg.service_port,
                                 .service_net = CRL_SERVICE_NET,
                                 .max_conns = h->cfg.network_max_conns};
    /* The denials' NFLOG group: from the tag, so that two daemons in one
     * network namespace seldom ask for the same one; the next free is
     * taken if another holds it (lib/os/nflog.c). */
    if (crl_netlog_new(h->loop, (uint16_t)(1024 + vc.tag % 64000), &h->netlog, err) < 0)
        return NULL;
    vc.log_group = crl_netlog_group(h->netlog);
    if (crl_vnet_parse_range(h->cfg.network_range, &vc, err) < 0 ||
        crl_worker_new(h->loop, "corrald-net", &h->net_worker, err) < 0 ||
        crl_vnet_new(&vc, &h->vnet, err) < 0 ||
        crl_resolver_new(h->loop, h->vnet, h->cfg.resolver_port, h->nameservers, &h->resolver,
                         err) < 0 ||
        crl_netlog_bind(h->netlog, h->vnet, h->resolver, err) < 0) {
        crl_resolver_free(h->resolver);
        h->resolver = NULL;
        crl_worker_free(h->net_worker);
        h->net_worker = NULL;
        crl_vnet_free(h->vnet);
        h->vnet = NULL;
        crl_netlog_free(h->netlog);
        h->netlog = NULL;
        return NULL;
    }
    crl_info(NULL, "network: range %s, nftables table inet %s", h->cfg.network_range,
             crl_vnet_table(h->vnet));
    struct crl_err perr = CRL_ERR_INIT;
    if (h->peers && crl_vnet_set_peers(h->vnet, h->peers, &perr) < 0)
        crl_warn(NULL, "network: the cluster's hosts are not kept from sandboxes: %s", perr.msg);
    return h->vnet;
}

void crl_host_set_peers(struct crl_host *h, const char *addrs)
{
    if (h->peers && strcmp(h->peers, addrs) == 0)
        return;
    free(h->peers);
    h->peers = strdup(addrs);
    struct crl_err err = CRL_ERR_INIT;
    if (h->vnet && crl_vnet_set_peers(h->vnet, addrs, &err) < 0)
        crl_warn(NULL, "network: the cluster's hosts are not kept from sandboxes: %s", err.msg);
}

/* ---- ids and slots ---- */

void crl_host_new_id(struct crl_host *h, char *out, size_t cap)
{
    unsigned char r[6];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        uint64_t t = crl_now_ns();
        memcpy(r, &t, sizeof(r));
    }
    snprintf(out, cap, "sb-%s-%02x%02x%02x%02x%02x%02x", h->cfg.host_id, r[0], r[1], r[2], r[3],
             r[4], r[5]);
}

static int slot_alloc(struct crl_host *h, unsigned *slot)
{
    /* Lowest free first, so cgroups of low slots are the ones reused. */
    unsigned char *free_slot = memchr(h->slots, 0, h->cfg.uid_slots);
    if (!free_slot)
        return -1;
    *free_slot = 1;
    *slot = (unsigned)(free_slot - h->slots);
    return 0;
}

/* ---- the table ---- */

static unsigned id_bucket(const char *id)
{
    uint32_t x = 2166136261u; /* FNV-1a */
    for (; *id; id++)
        x = (x ^ (unsigned char)*id) * 16777619u;
    return x % CRL_HOST_BUCKETS;
}

static void table_add(struct crl_host *h, struct crl_sandbox *sb)
{
    sb->prev = NULL;
    sb->next = h->sandboxes;
    if (h->sandboxes)
        h->sandboxes->prev = sb;
    h->sandboxes = sb;
    unsigned b = id_bucket(sb->id);
    sb->next_hash = h->by_id[b];
    h->by_id[b] = sb;
    h->n_sandboxes++;
}

static void table_remove(struct crl_host *h, struct crl_sandbox *sb)
{
    for (struct crl_sandbox **pp = &h->by_id[id_bucket(sb->id)]; *pp; pp = &(*pp)->next_hash)
        if (*pp == sb) {
            *pp = sb->next_hash;
            if (sb->prev)
                sb->prev->next = sb->next;
            else
                h->sandboxes = sb->next;
            if (sb->next)
                sb->next->prev = sb->prev;
            sb->next = sb->prev = sb->next_hash = NULL;
            h->n_sandboxes--;
            return;
        }
}

struct crl_sandbox *crl_host_find(struct crl_host *h, const char *id, struct crl_err *err)
{
    for (struct crl_sandbox *sb = h->by_id[id_bucket(id)]; sb; sb = sb->next_hash)
        if (strcmp(sb->id, id) == 0 && !sb->pool) /* a pool's is nobody's yet */
            return sb;
    json_t *lost = crl_records_lost(h, id);
    if (lost)
        crl_err_set(err, CRL_E_CONFLICT, "sandbox '%s' is lost: %s", id,
                    json_string_value(json_object_get(lost, "message")));
    else
        crl_err_set(err, CRL_E_NOT_FOUND, "sandbox '%s' not found", id);
    return NULL;
}

/* ---- capacity ---- */

/* Memory the host can give out to sandboxes in reserved admission. */
static uint64_t mem_cap_mb(const struct crl_host *h)
{
    uint64_t cap = h->mem_total_mb > h->reserve_mb ? h->mem_total_mb - h->reserve_mb : 0;
    return (uint64_t)((double)cap * h->cfg.overcommit);
}

/* A meminfo field in MiB, or -1. */
static int64_t meminfo_mb(const char *path, const char *field)
{
    char buf[8192];
    if (crl_read_file_at(AT_FDCWD, path, buf, sizeof(buf)) < 0)
        return -1;
    size_t n = strlen(field);
    for (char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, field, n) == 0 && p[n] == ':')
            return (int64_t)(strtoull(p + n + 1, NULL, 10) / 1024);
    return -1;
}

#define MEM_READ_NS (100 * 1000000ull) /* MemAvailable is read at most this often */

/* What measured admission may still give out: MemAvailable, read at most
 * every MEM_READ_NS (a read costs tens of microseconds, a create less than
 * a millisecond), less what the creates admitted since are expected to
 * take.  Those in flight when it is read are not in it yet; the reserve
 * covers them. */
static uint64_t mem_available_mb(struct crl_host *h)
{
    unsigned long long now = crl_now_ns();
    if (!h->mem_read_ns || now - h->mem_read_ns >= MEM_READ_NS) {
        int64_t v =
            meminfo_mb(h->cfg.meminfo_path ? h->cfg.meminfo_path : "/proc/meminfo", "MemAvailable");
        h->mem_avail_mb = v > 0 ? (uint64_t)v : 0;
        h->mem_since_mb = 0;
        h->mem_read_ns = now;
    }
    return h->mem_avail_mb > h->mem_since_mb ? h->mem_avail_mb - h->mem_since_mb : 0;
}

static unsigned admit_mb(const struct crl_backend_ops *ops)
{
    return ops->admit_mb ? ops->admit_mb : 1;
}

/* The descriptors corrald keeps for itself whatever its sandboxes hold:
 * connections, pipes of running commands, image imports. */
#define FDS_SPARE 1024

/* Admit a create; a pool's (`pool`) must leave room for explicit ones: a
 * reserve's worth of memory more, and descriptors and slots to spare. */
static int admit(struct crl_host *h, const struct crl_backend_ops *ops, const struct crl_spec *s,
                 bool pool, struct crl_err *err)
{
    if (h->shutting_down)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "corrald is shutting down");
    if (pool && (h->live + 1 >= h->cfg.max_sandboxes ||
                 (h->nofile && h->fds_held + ops->fds_held + 2 * FDS_SPARE > h->nofile)))
        return crl_err_set(err, CRL_E_CAPACITY,
                           "no room to spare for a pool: %u of %u sandboxes are running, corrald "
                           "holds %" PRIu64 " of %" PRIu64 " files",
                           h->live, h->cfg.max_sandboxes, h->fds_held, h->nofile);
    if (pool && h->cfg.admission == CRL_ADMIT_MEASURED &&
        mem_available_mb(h) < 2 * h->reserve_mb + admit_mb(ops))
        return crl_err_set(err, CRL_E_CAPACITY,
                           "no room to spare for a pool: %" PRIu64
                           " MiB available, and a pool leaves twice the reserve (%" PRIu64
                           " MiB) to explicit creates",
                           mem_available_mb(h), 2 * h->reserve_mb);
    if (h->live >= h->cfg.max_sandboxes)
        return crl_err_set(err, CRL_E_CAPACITY, "host is full: %u of %u sandboxes are running",
                           h->live, h->cfg.max_sandboxes);
    if (h->nofile && h->fds_held + ops->fds_held + FDS_SPARE > h->nofile)
        return crl_err_set(err, CRL_E_CAPACITY,
                           "host is full: corrald may open %" PRIu64
                           " files (RLIMIT_NOFILE) and its %u sandboxes hold %" PRIu64
                           " of them; raise its limit (systemd: LimitNOFILE=) for more",
                           h->nofile, h->live, h->fds_held);
    if (h->cfg.admission == CRL_ADMIT_MEASURED) {
        uint64_t avail = mem_available_mb(h), want = admit_mb(ops);
        if (avail < h->reserve_mb + want)
            return crl_err_set(err, CRL_E_CAPACITY,
                               "host is under memory pressure: %" PRIu64 " MiB available, %" PRIu64
                               " MiB kept for the host (--reserve-mb), and a new %s sandbox "
                               "takes about %" PRIu64 " MiB",
                               avail, h->reserve_mb, ops->name, want);
        uint64_t room = h->mem_total_mb > h->reserve_mb ? h->mem_total_mb - h->reserve_mb : 0;
        if (s->memory_mb > room)
            return crl_err_set(err, CRL_E_CAPACITY,
                               "host is too small: the sandbox asks for %u MiB of memory and the "
                               "host has %" PRIu64 " MiB for sandboxes",
                               s->memory_mb, room);
        return 0;
    }
    uint64_t mem_cap = mem_cap_mb(h);
    double cpu_cap = h->ncpus * h->cfg.cpu_overcommit;
    if (h->reserved_mb + s->memory_mb + (pool ? h->reserve_mb : 0) > mem_cap)
        return crl_err_set(err, CRL_E_CAPACITY,
                           "host is full: %" PRIu64 " of %" PRIu64
                           " MiB of sandbox memory are reserved and %u more were asked for",
                           h->reserved_mb, mem_cap, s->memory_mb);
    if (h->reserved_cpus + s->cpus > cpu_cap + 1e-9)
        return crl_err_set(err, CRL_E_CAPACITY,
                           "host is full: %.2f of %.2f CPUs are reserved and %.2f more were asked "
                           "for",
                           h->reserved_cpus, cpu_cap, s->cpus);
    return 0;
}

static void reserve(struct crl_host *h, struct crl_sandbox *sb, bool on)
{
    if (on) {
        h->reserved_mb += sb->spec.memory_mb;
        h->reserved_cpus += sb->spec.cpus;
        h->fds_held += sb->ops->fds_held;
        h->mem_since_mb += admit_mb(sb->ops);
        h->live++;
    } else {
        h->reserved_mb -= sb->spec.memory_mb;
        h->reserved_cpus -= sb->spec.cpus;
        h->fds_held -= sb->ops->fds_held;
        if (sb->stopped)
            h->releasing--; /* no longer live since it stopped */
        else
            h->live--;
    }
}

/* ---- ended sandboxes ---- */

/* Take an ended sandbox off the list of tombstones (and its timer). */
static void unlink_tomb(struct crl_host *h, struct crl_sandbox *sb)
{
    if (!sb->buried)
        return;
    if (sb->tomb_prev)
        sb->tomb_prev->tomb_next = sb->tomb_next;
    else
        h->tomb_head = sb->tomb_next;
    if (sb->tomb_next)
        sb->tomb_next->tomb_prev = sb->tomb_prev;
    else
        h->tomb_tail = sb->tomb_prev;
    sb->tomb_next = sb->tomb_prev = NULL;
    sb->buried = false;
    h->n_tombs--;
    crl_timer_stop(h->loop, &sb->tombstone_timer);
}

/* Forget a sandbox: out of the table, the table's reference dropped (the
 * caller holds its own if it goes on using sb). */
static void forget(struct crl_host *h, struct crl_sandbox *sb)
{
    unlink_tomb(h, sb);
    table_remove(h, sb);
    crl_sandbox_unref(sb);
}

static void tombstone_expired(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    forget(sb->host, sb);
}

/* An ended sandbox stays visible (state, final usage) for tombstone_s, and
 * at most max_tombstones of them: at thousands of sandboxes a second, the
 * oldest go first.  Without a tombstone time it is forgotten at once.  The
 * caller holds a reference. */
static void bury(struct crl_host *h, struct crl_sandbox *sb)
{
    if (h->cfg.tombstone_s <= 0 || h->shutting_down || !h->cfg.max_tombstones) {
        forget(h, sb);
        return;
    }
    unlink_tomb(h, sb); /* failed, then destroyed: its time starts again */
    crl_timer_start(h->loop, &sb->tombstone_timer, (uint64_t)(h->cfg.tombstone_s * 1e9),
                    tombstone_expired, sb);
    sb->buried = true;
    sb->tomb_prev = h->tomb_tail;
    if (h->tomb_tail)
        h->tomb_tail->tomb_next = sb;
    else
        h->tomb_head = sb;
    h->tomb_tail = sb;
    if (++h->n_tombs > h->cfg.max_tombstones)
        forget(h, h->tomb_head);
}

/* The host's part of a sandbox's end (struct crl_sb_owner). */
static void owner_release(struct crl_sandbox *sb)
{
    struct crl_host *h = sb->host;
    if (sb->has_slot) {
        if (!sb->slot_quarantined) /* else it stays taken until a restart reconciles it */
            h->slots[sb->slot] = 0;
        sb->has_slot = false;
    }
    reserve(h, sb, false);
    if (sb->spec.n_volumes)
        crl_volumes_release(h->volumes, sb->id); /* a create that failed, or the above */
}

static void owner_stopped(struct crl_sandbox *sb)
{
    sb->host->live--;
    sb->host->releasing++;
    /* Its processes are gone, and with them its mount namespace: the next
     * sandbox may mount its volumes now, before the rest of it is released. */
    if (sb->spec.n_volumes)
        crl_volumes_release(sb->host->volumes, sb->id);
}

/* A ready sandbox has its record, an ended one none (records.h). */
static void owner_ready(struct crl_sandbox *sb)
{
    if (!sb->pool) /* a pool's is nobody's yet: its claim writes it */
        crl_record_write(sb->host, sb);
}

static void owner_changed(struct crl_sandbox *sb)
{
    /* A handover's record stays as it was: what the handover ends is lost
     * at the adoption, and sessions' shells, let go, are taken back. */
    if (!sb->pool && sb->ready_at > 0 && sb->state <= CRL_SB_PAUSED && !sb->handed_over)
        crl_record_write(sb->host, sb);
}

static void owner_retire(struct crl_sandbox *sb, bool keep)
{
    if (sb->ready_at > 0)
        crl_record_remove(sb->host, sb);
    if (keep)
        bury(sb->host, sb);
    else
        forget(sb->host, sb);
}

/* ---- creating and destroying ---- */

/* "container, function": the names of the backends this host serves. */
static void backend_names(struct crl_host *h, char *out, size_t cap)
{
    size_t off = 0;
    out[0] = 0;
    for (size_t i = 0; i < h->cfg.n_backends && off < cap; i++)
        off +=
            (size_t)snprintf(out + off, cap - off, "%s%s", i ? ", " : "", h->cfg.backends[i]->name);
}

/* A sandbox service must name a sandbox of this host that can take
 * connections.  (One owner per host for now: tenants will compare theirs.) */
static int check_services(struct crl_host *h, const struct crl_spec *spec, struct crl_err *err)
{
    for (size_t i = 0; spec->services && i < spec->services->n; i++) {
        const struct crl_service *svc = &spec->services->v[i];
        if (svc->kind != CRL_SERVICE_SANDBOX)
            continue;
        struct crl_err e = CRL_ERR_INIT;
        struct crl_sandbox *t = crl_host_find(h, svc->sandbox, &e);
        if (!t)
            return crl_err_set(err, CRL_E_INVALID, "services[%zu] (%s): %s", i, svc->name, e.msg);
        if (t->state > CRL_SB_PAUSED)
            return crl_err_set(err, CRL_E_INVALID, "services[%zu] (%s): sandbox %s is %s", i,
                               svc->name, t->id, crl_sb_state_name(t->state));
        if (!t->ops->netns || !t->ops->ports_on_netns)
            return crl_err_set(err, CRL_E_UNSUPPORTED,
                               "services[%zu] (%s): sandbox %s is a %s sandbox, which has no "
                               "port another can reach in this version",
                               i, svc->name, t->id, t->ops->name);
    }
    return 0;
}

/* The backend of a spec, once its services' targets are checked. */
static const struct crl_backend_ops *spec_backend(struct crl_host *h, const struct crl_spec *spec,
                                                  struct crl_err *err)
{
    if (check_services(h, spec, err) < 0)
        return NULL;
    const struct crl_backend_ops *ops = backend_find(h, spec->backend);
    if (!ops) {
        char names[256];
        backend_names(h, names, sizeof(names));
        crl_err_set(err, CRL_E_UNSUPPORTED,
                    "backend '%s' is not available on this host (available: %s)", spec->backend,
                    names[0] ? names : "none");
    }
    return ops;
}

int crl_host_check_spec(struct crl_host *h, const struct crl_spec *spec, struct crl_err *err)
{
    if (!spec_backend(h, spec, err))
        return -1;
    struct crl_image *img = h->images ? crl_image_get(h->images, spec->image, err) : NULL;
    if (h->images && !img)
        return -1;
    crl_image_put(img);
    return 0;
}

/* Hand a pool's ready sandbox over to a create of `spec`: it takes what a
 * claim sets; the spec's rest is the template's and goes. */
static int claim(struct crl_host *h, struct crl_sandbox *sb, struct crl_spec *spec,
                 crl_sandbox_cb cb, void *ctx, struct crl_err *err)
{
    int rc = crl_sandbox_claim(sb, spec, cb, ctx, err);
    if (rc == 0) {
        crl_spec_free(spec); /* ownership moved in, as for a create */
        memset(spec, 0, sizeof(*spec));
        owner_ready(sb);
        h->counters.claimed++;
        crl_info(sb->id, "claimed from a pool");
    } else {
        crl_host_destroy(h, sb, "claim_failed", NULL, NULL, NULL);
    }
    crl_sandbox_unref(sb); /* the pool's */
    return rc;
}

/* Refused for capacity: counted, and a pool gives up an idle sandbox so
 * that the next create is admitted. */
static void refused(struct crl_host *h, const struct crl_pool *pool)
{
    if (pool)
        return;
    h->counters.rejected_capacity++;
    crl_pools_shed(h);
}

/* A sandbox of this host, being made (or adopted), with the table's
 * reference. */
static struct crl_sandbox *sandbox_new(struct crl_host *h, const struct crl_backend_ops *ops,
                                       struct crl_err *err)
{
    struct crl_sandbox *sb = calloc(1, sizeof(*sb));
    if (!sb) {
        crl_err_sys(err, ENOMEM, "sandbox");
        return NULL;
    }
    sb->host = h;
    sb->owner = &h->owner;
    sb->ops = ops;
    sb->refs = 1;
    sb->state = CRL_SB_CREATING;
    return sb;
}

static int create(struct crl_host *h, struct crl_spec *spec, struct crl_pool *pool,
                  crl_sandbox_cb cb, void *ctx, struct crl_err *err)
{
    const struct crl_backend_ops *ops = spec_backend(h, spec, err);
    if (!ops)
        return -1;
    if (spec->n_volumes && !ops->volumes)
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "volumes: a %s sandbox mounts none in this version (a container "
                           "sandbox does)",
                           ops->name);
    /* A pool's sandboxes were made without volumes: a create with some is
     * made afresh. */
    struct crl_sandbox *claimed = pool || spec->n_volumes ? NULL : crl_pools_claim(h, spec);
    if (claimed)
        return claim(h, claimed, spec, cb, ctx, err);
    if (admit(h, ops, spec, pool != NULL, err) < 0) {
        if (err->code == CRL_E_CAPACITY)
            refused(h, pool);
        return -1;
    }
    struct crl_sandbox *sb = sandbox_new(h, ops, err);
    if (!sb)
        return -1;
    sb->pool = pool;
    sb->spec = *spec;
    memset(spec, 0, sizeof(*spec)); /* ownership moved */
    sb->created_at = crl_wall_s();
    sb->last_active_ns = crl_now_ns();
    crl_host_new_id(h, sb->id, sizeof(sb->id));
    if (h->images && !(sb->image = crl_image_get(h->images, sb->spec.image, err))) {
        crl_sandbox_unref(sb);
        return -1;
    }
    if (sb->spec.n_volumes &&
        crl_volumes_take(h->volumes, sb->id, &sb->spec, ops->volumes, sb->volume_fds, err) < 0) {
        crl_image_put(sb->image);
        crl_sandbox_unref(sb);
        return -1;
    }
    if (slot_alloc(h, &sb->slot) < 0) {
        crl_volumes_release(h->volumes, sb->id);
        crl_image_put(sb->image);
        crl_sandbox_unref(sb);
        refused(h, pool);
        return crl_err_set(err, CRL_E_CAPACITY, "host is full: all %u sandbox slots are in use",
                           h->cfg.uid_slots);
    }
    sb->has_slot = true;
    reserve(h, sb, true);
    table_add(h, sb);
    return crl_sandbox_build(sb, cb, ctx, err); /* on failure, sb is gone */
}

int crl_host_create(struct crl_host *h, struct crl_spec *spec, crl_sandbox_cb cb, void *ctx,
                    struct crl_err *err)
{
    return create(h, spec, NULL, cb, ctx, err);
}

int crl_host_create_pooled(struct crl_host *h, struct crl_spec *spec, struct crl_pool *pool,
                           crl_sandbox_cb cb, void *ctx, struct crl_err *err)
{
    return create(h, spec, pool, cb, ctx, err);
}

int crl_host_destroy(struct crl_host *h, struct crl_sandbox *sb, const char *reason,
                     crl_sandbox_cb cb, void *ctx, struct crl_err *err)
{
    return crl_sandbox_destroy(sb, reason, cb, ctx, err);
}

/* ---- host ---- */

/* Mounts below the state dir in the host's namespace: none are made there
 * today, but a crashed corrald must never leave one behind, so look. */
static void unmount_leftovers(const char *state_dir)
{
    char *mi = NULL;
    size_t len;
    if (crl_read_file_alloc("/proc/self/mountinfo", 1 << 22, &mi, &len, NULL) < 0)
        return;
    size_t sl = strlen(state_dir);
    for (char *line = mi; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        /* field 5 is the mount point */
        char *f = line;
        for (int i = 0; i < 4 && f; i++) {
            f = strchr(f, ' ');
            if (f)
                f++;
        }
        if (f) {
            char *end = strchr(f, ' ');
            if (end)
                *end = 0;
            if (strncmp(f, state_dir, sl) == 0 && (f[sl] == '/' || f[sl] == 0)) {
                if (umount2(f, MNT_DETACH) == 0)
                    crl_warn(NULL, "reconcile: unmounted leftover %s", f);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(mi);
}

/* A new sandbox's root is an unprivileged host uid that must walk down to
 * run/mnt to mount over it: every directory above must be searchable by
 * others.  Say so at start, not as a failed create later. */
static int check_searchable(const char *path, struct crl_err *err)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s", path);
    for (char *slash = p + strlen(p); slash > p; slash = strrchr(p, '/')) {
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode) && !(st.st_mode & S_IXOTH))
            return crl_err_set(err, CRL_E_INVALID,
                               "sandboxes cannot reach %s: %s is not searchable by others "
                               "(mode %04o); chmod o+x it or choose another --state",
                               path, p, st.st_mode & 07777);
        *slash = 0;
    }
    return 0;
}

/* An exclusive, non-blocking flock on path (created): the fd, or -1. */
static int take_lock(const char *path, struct crl_err *err)
{
    int fd = crl_openat(AT_FDCWD, path, O_RDWR | O_CREAT, 0600);
    if (fd < 0)
        return crl_err_sys(err, errno, "open %s", path);
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        crl_err_set(err, CRL_E_UNAVAILABLE, "%s is locked", path);
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- adopting what a corrald before this one left running ---- */

/* Its record's cgroup name, if its backend keeps one ("" if not). */
static const char *record_cgroup(json_t *rec)
{
    const char *cg = json_string_value(
        json_object_get(json_object_get(json_object_get(rec, "adopt"), "backend"), "cgroup"));
    return cg && cg[0] == 's' && strlen(cg) < 16 && strspn(cg + 1, "0123456789") == strlen(cg) - 1
               ? cg
               : "";
}

/* Why a sandbox, as its record says it runs, cannot be adopted by a
 * corrald started anew (a word, its lost_reason, and `msg`); NULL if it
 * can, as far as the host can tell and then its backend's check. */
static const char *not_adoptable(struct crl_host *h, json_t *rec, char *msg, size_t cap)
{
    const char *backend = json_string_value(json_object_get(rec, "backend"));
    const struct crl_backend_ops *ops = backend ? backend_find(h, backend) : NULL;
    json_t *ad = json_object_get(rec, "adopt");
    json_t *spec = json_object_get(rec, "spec");
    json_int_t slot = json_integer_value(json_object_get(ad, "slot"));
    const char *traj =
        json_string_value(json_object_get(json_object_get(spec, "trajectory"), "id"));
    const char *boot = json_string_value(json_object_get(ad, "boot_id"));
    const char *why = NULL;
    struct crl_err err = CRL_ERR_INIT;
    if (!ops || !ops->adopt) {
        snprintf(msg, cap,
                 "a %s sandbox does not outlive its corrald: its processes ended with the one "
                 "that was restarted",
                 backend ? backend : "?");
        return "backend_not_adoptable";
    }
    if (!json_is_object(ad) || json_integer_value(json_object_get(ad, "v")) != CRL_RECORD_ADOPT_V) {
        snprintf(msg, cap, "its record says nothing a corrald can adopt it by");
        return "not_recorded";
    }
    if (!boot || strcmp(boot, h->boot_id) != 0) {
        snprintf(msg, cap, "the host was rebooted since it ran");
        return "host_rebooted";
    }
    if (slot < 0 || slot >= h->cfg.uid_slots ||
        json_integer_value(json_object_get(ad, "uid_base")) !=
            (json_int_t)h->cfg.uid_base + slot * 65536 ||
        !record_cgroup(rec)[0]) {
        snprintf(msg, cap, "its slot %lld does not fit this corrald's --uid-base and --uid-slots",
                 (long long)slot);
        return "config_changed";
    }
    const char *range = json_string_value(json_object_get(ad, "network_range"));
    if (json_is_true(json_object_get(ad, "net_linked")) &&
        (!range || strcmp(range, h->cfg.network_range) != 0)) {
        snprintf(msg, cap, "its network link was in range %s, this corrald's is %s",
                 range ? range : "?", h->cfg.network_range);
        return "config_changed";
    }
    /* A trajectory's sandbox is taken over where it stood, live; one that
     * was fast-forwarding, or had sessions (a trajectory's are steps: one
     * that ran at the crash would have changed the sandbox unrecorded),
     * resumes by a fast-forward on a new create. */
    json_t *be = json_object_get(ad, "backend");
    json_t *children = json_object_get(be, "children");
    if (traj && traj[0] &&
        (!json_is_true(json_object_get(json_object_get(json_object_get(be, "notes"), "trajectory"),
                                       "live")) ||
         json_object_size(json_object_get(children, "session")) ||
         json_object_size(json_object_get(children, "process")))) {
        snprintf(msg, cap,
                 "it recorded trajectory %s and was fast-forwarding or had sessions: a create "
                 "naming the trajectory resumes it (its steps replay)",
                 traj);
        return "trajectory_resumes";
    }
    if (ops->adopt_check(h, json_object_get(ad, "backend"), &why, &err) < 0) {
        snprintf(msg, cap, "%s", err.msg);
        return why;
    }
    return NULL;
}

/* At start: may a record left be adopted?  If not, it is reported lost
 * (and taken out of `left` by the caller); the reconcile then removes what
 * is left of it. */
static bool adoptable(struct crl_host *h, json_t *rec, unsigned char *slots_seen)
{
    char msg[300];
    json_int_t slot = json_integer_value(json_object_get(json_object_get(rec, "adopt"), "slot"));
    const char *why = not_adoptable(h, rec, msg, sizeof(msg));
    if (!why && slots_seen[slot]) {
        why = "config_changed";
        snprintf(msg, sizeof(msg), "another sandbox's record has its slot %lld", (long long)slot);
    }
    if (why) {
        crl_records_lost_add(h, rec, why, "%s", msg);
        return false;
    }
    slots_seen[slot] = 1;
    return true;
}

/* Kill what runs in a cgroup an adoption kept, and remove it. */
static void discard_cgroup(struct crl_host *h, const char *name)
{
    struct crl_cgroup *cg = NULL;
    if (crl_cgroup_adopt(h->cgroups, name, 0, 0, &cg, NULL) < 0)
        return;
    crl_cgroup_kill_all(cg, NULL);
    for (int i = 0; i < 100 && crl_cgroup_tidy(cg, true) < 0; i++) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    crl_cgroup_release(cg, true, NULL);
}

/* The sessions an adopted sandbox's record names: each taken back, or
 * lost with why. */
static void adopt_sessions(struct crl_sandbox *sb, json_t *sessions)
{
    json_t *lost = json_object_get(sb->lost_children, "session");
    const char *id;
    json_t *rec;
    json_object_foreach(sessions, id, rec)
    {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_session_adopt(sb, id, rec, &err) == 0) {
            json_object_del(lost, id);
            continue;
        }
        crl_warn(sb->id, "session %s is lost: %s", id, err.msg);
        json_object_set_new(
            lost, id,
            json_sprintf("corrald was restarted while it ran, and the new one could not take "
                         "its shell back (%s): it ended it when it adopted the sandbox",
                         err.msg));
    }
}

/* Build the sandbox a record describes and have its backend take it over. */
static int adopt_one(struct crl_host *h, const char *id, json_t *rec, const char **why,
                     struct crl_err *err)
{
    const struct crl_backend_ops *ops =
        backend_find(h, json_string_value(json_object_get(rec, "backend")));
    json_t *ad = json_object_get(rec, "adopt");
    struct crl_sandbox *sb = sandbox_new(h, ops, err);
    if (!sb)
        return -1;
    snprintf(sb->id, sizeof(sb->id), "%s", id);
    bool listed = false, paused = false;
    *why = "record_unreadable";
    if (crl_spec_from_json(json_object_get(rec, "spec"), &sb->spec, err) < 0) {
        crl_err_prefix(err, "its recorded spec");
        goto fail;
    }
    const char *image = json_string_value(json_object_get(ad, "image_id"));
    *why = "image_gone";
    if (h->images && !(sb->image = crl_image_get(h->images, image ? image : sb->spec.image, err)))
        goto fail;
    *why = "volumes_changed";
    if (sb->spec.n_volumes && crl_volumes_adopt(h->volumes, sb->id, &sb->spec, err) < 0)
        goto fail;
    sb->slot = (unsigned)json_integer_value(json_object_get(ad, "slot"));
    sb->has_slot = true;
    h->slots[sb->slot] = 1;
    sb->created_at = json_real_value(json_object_get(ad, "created_s"));
    reserve(h, sb, true);
    table_add(h, sb);
    listed = true;
    if (ops->adopt(sb, json_object_get(ad, "backend"), &paused, why, err) < 0)
        goto fail;
    if (json_is_true(json_object_get(ad, "net_linked")) && crl_backend_net_relink(sb, err) < 0) {
        *why = "network_changed";
        crl_err_prefix(err, "linking it to the network again");
        ops->leave(sb);
        goto fail;
    }
    /* What ran through the dead daemon's pipes is lost (the backend ended
     * it); sessions whose shells the backend kept are taken back. */
    json_t *be = json_object_get(ad, "backend");
    sb->notes = json_deep_copy(json_object_get(be, "notes"));
    sb->lost_children = json_deep_copy(json_object_get(be, "lost_children"));
    if (!sb->lost_children)
        sb->lost_children = json_object();
    json_t *children = json_deep_copy(json_object_get(be, "children"));
    if (children)
        json_object_update_recursive(sb->lost_children, children); /* its own copies */
    json_decref(children);
    crl_sandbox_adopted(sb, paused, json_real_value(json_object_get(ad, "expires_at")),
                        (unsigned)json_integer_value(json_object_get(ad, "timeout_s")),
                        json_is_true(json_object_get(ad, "ttl_paused")));
    adopt_sessions(sb, json_object_get(json_object_get(be, "children"), "session"));
    /* Set last: a record is rewritten at each change once it is ready, and
     * this one write has them all. */
    sb->ready_at = json_real_value(json_object_get(ad, "ready_s"));
    crl_record_write(h, sb); /* as it runs now (its PID 1's new pidfd says the same) */
    h->counters.adopted++;
    return 0;
fail:
    crl_image_put(sb->image);
    sb->image = NULL;
    if (listed) {
        owner_release(sb); /* its slot, reservation and volumes */
        forget(h, sb);
    } else {
        crl_sandbox_unref(sb); /* nothing held yet */
    }
    return -1;
}

static void adopt_left(struct crl_host *h, json_t *left)
{
    const char *id;
    json_t *rec;
    json_object_foreach(left, id, rec)
    {
        const char *why = "adopt_failed";
        struct crl_err err = CRL_ERR_INIT;
        if (adopt_one(h, id, rec, &why, &err) == 0)
            continue;
        char cg[16];
        snprintf(cg, sizeof(cg), "%s", record_cgroup(rec));
        crl_records_lost_add(h, rec, why, "%s", err.msg);
        discard_cgroup(h, cg);
    }
}

int crl_host_open(const struct crl_host_config *cfg, struct crl_loop *loop, struct crl_host **out,
                  struct crl_err *err)
{
    struct crl_host *h = calloc(1, sizeof(*h));
    if (!h)
        return crl_err_sys(err, ENOMEM, "host");
    json_t *left = NULL;      /* the records the last run left */
    const char **keep = NULL; /* the cgroups of those that may be adopted */
    size_t n_keep = 0;
    unsigned char *slots_seen = NULL;
    h->cfg = *cfg;
    h->loop = loop;
    h->lock_fd = h->cgroup_lock_fd = h->records_fd = -1;
    h->started_at = crl_wall_s();
    if (!realpath(cfg->state_dir, h->state_dir)) {
        if (crl_mkdir_p(cfg->state_dir, 0700) < 0 || !realpath(cfg->state_dir, h->state_dir)) {
            crl_err_sys(err, errno, "state dir %s", cfg->state_dir);
            goto fail;
        }
    }
    h->cfg.state_dir = h->state_dir;
    /* Searchable, not readable, by others: a new sandbox's root (an
     * unprivileged host uid) must reach run/mnt to mount over it.  Every
     * directory below that holds anything is 0700. */
    chmod(h->state_dir, 0711);
    if (!h->cfg.host_id[0]) {
        char hn[64] = "";
        gethostname(hn, sizeof(hn) - 1);
        uint32_t x = 2166136261u;
        for (char *p = hn; *p; p++)
            x = (x ^ (unsigned char)*p) * 16777619u;
        snprintf(h->cfg.host_id, sizeof(h->cfg.host_id), "%06x", x & 0xffffff);
    }

    /* A second daemon on this state dir would remove the first one's work;
     * two sharing a cgroup parent would reconcile each other's sandboxes
     * away.  Both locks are held for our lifetime (O_CLOEXEC: not by children). */
    char lock[4200];
    snprintf(lock, sizeof(lock), "%s/corrald.lock", h->state_dir);
    if ((h->lock_fd = take_lock(lock, err)) < 0) {
        crl_err_prefix(err, "another corrald is using the state dir %s", h->state_dir);
        goto fail;
    }
    const char *lock_dir = cfg->lock_dir;
    if (crl_mkdir_p(lock_dir, 0755) < 0) {
        crl_err_sys(err, errno, "mkdir %s", lock_dir);
        goto fail;
    }
    snprintf(lock, sizeof(lock), "%s/cgroup-%s.lock", lock_dir, cfg->cgroup_parent);
    if ((h->cgroup_lock_fd = take_lock(lock, err)) < 0) {
        crl_err_prefix(err,
                       "another corrald owns the cgroup parent '%s'; give this one its own "
                       "--cgroup-parent",
                       cfg->cgroup_parent);
        goto fail;
    }

    snprintf(h->run_dir, sizeof(h->run_dir), "%s/run", h->state_dir);
    unmount_leftovers(h->state_dir);
    crl_rm_rf_at(AT_FDCWD, h->run_dir);
    char sbdir[4200];
    snprintf(sbdir, sizeof(sbdir), "%s/sandboxes", h->state_dir);
    crl_rm_rf_at(AT_FDCWD, sbdir);
    if (crl_mkdir_p(h->run_dir, 0711) < 0 || crl_mkdir_p(sbdir, 0700) < 0) {
        crl_err_sys(err, errno, "mkdir %s", h->run_dir);
        goto fail;
    }
    if (check_searchable(h->run_dir, err) < 0)
        goto fail;

    if (!cfg->no_images &&
        crl_image_store_open(h->state_dir, cfg->images_dir, cfg->images_from, cfg->n_images_from,
                             cfg->busybox_bin, &h->images, err) < 0)
        goto fail;
    struct crl_cgroup_config cgc = {.version = cfg->cgroup_version,
                                    .mount_root = cfg->cgroup_root,
                                    .allow_missing_controllers = cfg->cgroup_no_limits,
                                    .parent = cfg->cgroup_parent};
    if (crl_cgroup_mgr_open(&cgc, &h->cgroups, err) < 0)
        goto fail;
    /* What the last run left: the sandboxes that still run as recorded
     * are adopted below, once the backends are up; the reconcile spares
     * their cgroups, and removes everything else of that run. */
    crl_boot_id(h->boot_id, sizeof(h->boot_id));
    if (crl_records_open(h, &left, err) < 0)
        goto fail;
    if (json_object_size(left) && (!(slots_seen = calloc(cfg->uid_slots ? cfg->uid_slots : 1, 1)) ||
                                   !(keep = calloc(json_object_size(left), sizeof(*keep))))) {
        crl_err_sys(err, ENOMEM, "records");
        goto fail;
    }
    const char *left_id;
    json_t *left_rec;
    void *tmp;
    json_object_foreach_safe(left, tmp, left_id, left_rec)
    {
        if (adoptable(h, left_rec, slots_seen))
            keep[n_keep++] = record_cgroup(left_rec);
        else
            json_object_del(left, left_id);
    }
    int n = crl_cgroup_mgr_reconcile(h->cgroups, keep, n_keep, err);
    if (n < 0)
        goto fail;
    if (n > 0)
        crl_warn(NULL, "reconcile: removed %d leftover sandbox cgroup(s) and their processes", n);
    crl_vnet_reconcile(vnet_tag(h));
    if (cfg->dns_upstream)
        snprintf(h->nameservers, sizeof(h->nameservers), "%s", cfg->dns_upstream);
    else
        crl_etc_nameservers("/etc/resolv.conf", h->nameservers, sizeof(h->nameservers));
    if (crl_netns_pool_new(cfg->netns_pool, &h->netns, err) < 0)
        goto fail;
    /* After the reconcile: a volume a leftover sandbox held is free now. */
    char voldir[4200];
    snprintf(voldir, sizeof(voldir), "%s/volumes", h->state_dir);
    if (crl_volumes_open(cfg->volume_dir ? cfg->volume_dir : voldir, &h->volumes, err) < 0)
        goto fail;
    int64_t total = meminfo_mb(cfg->meminfo_path ? cfg->meminfo_path : "/proc/meminfo", "MemTotal");
    h->mem_total_mb = total > 0 ? (uint64_t)total : 0;
    h->reserve_mb = cfg->reserve_mb;
    if (cfg->reserve_mb == CRL_HOST_RESERVE_AUTO)
        h->reserve_mb = h->mem_total_mb / 20 > 512 ? h->mem_total_mb / 20 : 512;
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
        h->nofile = nofile.rlim_cur;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    h->ncpus = nc > 0 ? (unsigned)nc : 1;
    if (!h->cfg.uid_slots ||
        (uint64_t)h->cfg.uid_base + (uint64_t)h->cfg.uid_slots * 65536 > UINT32_MAX) {
        crl_err_set(err, CRL_E_INVALID, "uid range %u + %u x 65536 does not fit in 32 bits",
                    h->cfg.uid_base, h->cfg.uid_slots);
        goto fail;
    }
    h->slots = calloc(h->cfg.uid_slots, 1);
    h->by_id = calloc(CRL_HOST_BUCKETS, sizeof(*h->by_id));
    h->backend_state = calloc(cfg->n_backends + 1, sizeof(*h->backend_state));
    if (!h->slots || !h->by_id || !h->backend_state) {
        crl_err_sys(err, ENOMEM, "slots");
        goto fail;
    }
    h->owner = (struct crl_sb_owner){.loop = loop,
                                     .counters = &h->counters,
                                     .release = owner_release,
                                     .retire = owner_retire,
                                     .stopped = owner_stopped,
                                     .ready = owner_ready,
                                     .changed = owner_changed};
    for (size_t i = 0; i < cfg->n_backends; i++) {
        const struct crl_backend_ops *ops = cfg->backends[i];
        if (ops->init(h, &h->backend_state[i], err) < 0 ||
            ops->reconcile(h, h->backend_state[i], err) < 0) {
            crl_err_prefix(err, "backend %s", ops->name);
            goto fail;
        }
    }
    adopt_left(h, left);
    if (json_object_size(h->lost) || json_object_size(left))
        crl_warn(NULL,
                 "reconcile: of %zu sandbox(es) the previous run left, %zu adopted, %zu lost "
                 "(each answers state lost for %.0f s)",
                 json_object_size(h->lost) + json_object_size(left), (size_t)h->counters.adopted,
                 json_object_size(h->lost), h->cfg.tombstone_s);
    json_decref(left);
    free(keep);
    free(slots_seen);
    crl_info(NULL, "host %s: state %s, %" PRIu64 " MiB, %u CPUs, cgroup %s", h->cfg.host_id,
             h->state_dir, h->mem_total_mb, h->ncpus, crl_cgroup_mgr_describe(h->cgroups));
    *out = h;
    return 0;
fail:
    json_decref(left);
    free(keep);
    free(slots_seen);
    crl_host_close(h);
    return -1;
}

static void drain_destroyed(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    (*(unsigned *)ctx)--;
}

static bool tearing_down(struct crl_host *h)
{
    if (h->releasing) /* stopped, perhaps forgotten already, not yet released */
        return true;
    for (struct crl_sandbox *sb = h->sandboxes; sb; sb = sb->next)
        if (sb->tearing_down)
            return true;
    return false;
}

/* A handover: which sandboxes run on for the next corrald to adopt (those
 * it could adopt, and no pool's: a pool's has no record). */
static unsigned choose_handed_over(struct crl_host *h)
{
    unsigned n = 0;
    for (struct crl_sandbox *sb = h->sandboxes; sb; sb = sb->next) {
        if (sb->pool || (sb->state != CRL_SB_READY && sb->state != CRL_SB_PAUSED))
            continue;
        char msg[300];
        json_t *rec = crl_record_json(sb);
        const char *why = rec ? not_adoptable(h, rec, msg, sizeof(msg)) : "not_recorded";
        json_decref(rec);
        if (why)
            crl_info(sb->id, "handover: destroyed, the next corrald could not adopt it (%s)", why);
        else
            n++;
        sb->handed_over = !why;
    }
    return n;
}

/* Do handed-over sandboxes still run commands of ours (which end)? */
static bool handing_over(struct crl_host *h)
{
    for (struct crl_sandbox *sb = h->sandboxes; sb; sb = sb->next)
        for (struct crl_proc *p = sb->handed_over ? sb->procs : NULL; p; p = p->next_in_sb)
            if (!p->outlives)
                return true;
    return false;
}

void crl_host_close(struct crl_host *h)
{
    if (!h)
        return;
    h->shutting_down = true;
    unsigned handed = h->handover ? choose_handed_over(h) : 0;
    crl_pools_free(h);
    /* Destroy what is live (what a handover keeps, its commands end: their
     * stdio is ours) and wait for the backends to finish. */
    unsigned pending = 0;
    for (struct crl_sandbox *sb = h->sandboxes; sb; sb = sb->next)
        if (sb->handed_over) {
            crl_sandbox_hand_over(sb);
        } else if (sb->state == CRL_SB_READY || sb->state == CRL_SB_PAUSED ||
                   sb->state == CRL_SB_CREATING) {
            pending++;
            if (crl_host_destroy(h, sb, "shutdown", drain_destroyed, &pending, NULL) < 0)
                pending--;
        }
    /* ... and for the teardowns already under way (failed sandboxes). */
    uint64_t deadline = crl_now_ns() + 30 * NS_PER_S;
    while ((pending || tearing_down(h) || handing_over(h)) && crl_now_ns() < deadline)
        crl_loop_once(h->loop, 100);
    for (struct crl_sandbox *sb = h->sandboxes; sb; sb = sb->next) {
        struct crl_err e = CRL_ERR_INIT;
        if (!sb->handed_over)
            continue;
        /* Ending its commands thawed it (v1 kills only thawed tasks). */
        if (sb->state == CRL_SB_PAUSED && sb->ops->pause(sb, &e) < 0)
            crl_warn(sb->id, "handover: pausing it again: %s", e.msg);
        sb->ops->leave(sb);
        crl_image_put(sb->image);
        sb->image = NULL;
    }
    if (handed)
        crl_warn(NULL, "handover: %u sandbox(es) run on for the next corrald to adopt", handed);
    /* Links being made: done now, while the backends can still take them. */
    crl_worker_free(h->net_worker);
    h->net_worker = NULL;
    for (size_t i = 0; h->backend_state && i < h->cfg.n_backends; i++)
        if (h->backend_state[i])
            h->cfg.backends[i]->shutdown(h, h->backend_state[i]);
    while (h->sandboxes) {
        struct crl_sandbox *sb = h->sandboxes;
        crl_timer_stop(h->loop, &sb->ttl_timer);
        crl_timer_stop(h->loop, &sb->idle_timer);
        forget(h, sb);
    }
    if (h->cgroups && handed) {
        crl_cgroup_mgr_free(h->cgroups); /* theirs run on */
    } else if (h->cgroups) {
        struct crl_err e = CRL_ERR_INIT;
        if (crl_cgroup_mgr_reconcile(h->cgroups, NULL, 0, &e) < 0 ||
            crl_cgroup_mgr_remove_parent(h->cgroups, &e) < 0)
            crl_warn(NULL, "shutdown: %s", e.msg);
        crl_cgroup_mgr_free(h->cgroups);
    }
    crl_netlog_free(h->netlog);
    crl_resolver_free(h->resolver);
    crl_vnet_free(h->vnet);
    free(h->peers);
    crl_records_free(h);
    crl_netns_pool_free(h->netns);
    crl_image_store_free(h->images);
    crl_volumes_free(h->volumes);
    if (h->run_dir[0])
        crl_rm_rf_at(AT_FDCWD, h->run_dir);
    free(h->slots);
    free(h->by_id);
    free(h->backend_state);
    if (h->cgroup_lock_fd >= 0)
        close(h->cgroup_lock_fd);
    if (h->lock_fd >= 0)
        close(h->lock_fd);
    free(h);
}

json_t *crl_host_list_json(struct crl_host *h)
{
    json_t *a = json_array();
    for (struct crl_sandbox *sb = h->sandboxes; sb; sb = sb->next)
        if (!sb->pool)
            json_array_append_new(a, crl_sandbox_json(sb));
    crl_records_list(h, a);
    return json_pack("{s:o}", "sandboxes", a);
}

json_t *crl_host_info_json(struct crl_host *h)
{
    bool measured = h->cfg.admission == CRL_ADMIT_MEASURED;
    uint64_t mem_cap = mem_cap_mb(h), avail = measured ? mem_available_mb(h) : 0;
    double cpu_cap = h->ncpus * h->cfg.cpu_overcommit;
    unsigned max =
        h->cfg.max_sandboxes < h->cfg.uid_slots ? h->cfg.max_sandboxes : h->cfg.uid_slots;
    json_t *backends = json_array();
    json_t *info = json_object();
    for (size_t i = 0; i < h->cfg.n_backends; i++) {
        const struct crl_backend_ops *ops = h->cfg.backends[i];
        json_array_append_new(backends, json_string(ops->name));
        json_t *bi = ops->host_info ? ops->host_info(h, h->backend_state[i]) : NULL;
        if (bi)
            json_object_set_new(info, ops->name, bi);
    }
    /* free memory: what measured admission may still give out, or what
     * the reservations leave */
    uint64_t free_mb = measured ? (avail > h->reserve_mb ? avail - h->reserve_mb : 0)
                                : (mem_cap > h->reserved_mb ? mem_cap - h->reserved_mb : 0);
    json_t *o = json_pack(
        "{s:s, s:s, s:f, s:{s:s, s:I, s:i, s:i, s:f, s:f, s:I, s:f, s:i, s:I}, s:{s:i, s:I, s:f, "
        "s:I, s:I}, s:{s:I, s:f, s:i}, s:o, s:s}",
        "host_id", h->cfg.host_id, "state_dir", h->state_dir, "uptime_s",
        crl_wall_s() - h->started_at, "capacity", "admission", measured ? "measured" : "reserved",
        "memory_mb", (json_int_t)h->mem_total_mb, "cpus", (json_int_t)h->ncpus, "max_sandboxes",
        (json_int_t)max, "overcommit", h->cfg.overcommit, "cpu_overcommit", h->cfg.cpu_overcommit,
        "sandbox_memory_mb", (json_int_t)mem_cap, "sandbox_cpus", cpu_cap, "reserve_mb",
        (json_int_t)h->reserve_mb, "files", (json_int_t)h->nofile, "used", "sandboxes",
        (json_int_t)h->live, "memory_mb", (json_int_t)h->reserved_mb, "cpus", h->reserved_cpus,
        "files", (json_int_t)h->fds_held, "releasing", (json_int_t)h->releasing, "free",
        "memory_mb", (json_int_t)free_mb, "cpus", cpu_cap - h->reserved_cpus, "sandboxes",
        (json_int_t)(max > h->live ? max - h->live : 0), "backends", backends, "cgroup",
        crl_cgroup_mgr_describe(h->cgroups));
    if (o && measured)
        json_object_set_new(json_object_get(o, "capacity"), "memory_available_mb",
                            json_integer((json_int_t)avail));
    if (o) {
        json_object_set_new(o, "backend_info", info);
        json_object_update_new(o, crl_pools_json(h));
    } else {
        json_decref(info);
    }
    return o;
}

char *crl_host_metrics(struct crl_host *h)
{
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    const struct crl_sb_counters *c = &h->counters;
#define COUNTER(name, help, v)                                                                     \
    crl_buf_printf(&b,                                                                             \
                   "# HELP corral_" name " " help "\n# TYPE corral_" name " counter\ncorral_" name \
                   " %" PRIu64 "\n",                                                               \
                   (uint64_t)(v))
#define GAUGE(name, help, fmt, v)                                                                \
    crl_buf_printf(&b,                                                                           \
                   "# HELP corral_" name " " help "\n# TYPE corral_" name " gauge\ncorral_" name \
                   " " fmt "\n",                                                                 \
                   v)
    COUNTER("sandboxes_created_total", "Sandboxes that became ready (a pool's included).",
            c->created);
    COUNTER("sandboxes_create_failed_total", "Creates that failed after admission.",
            c->create_failed);
    COUNTER("sandboxes_rejected_total", "Creates refused by admission control.",
            c->rejected_capacity);
    COUNTER("sandboxes_destroyed_total", "Sandboxes destroyed.", c->destroyed);
    COUNTER("sandboxes_failed_total", "Sandboxes whose init died.", c->failed);
    COUNTER("execs_total", "Execs started.", c->execs);
    COUNTER("exec_timeouts_total", "Execs killed by their timeout.", c->exec_timeouts);
    COUNTER("exec_ooms_total", "Execs killed by the OOM killer.", c->exec_ooms);
    GAUGE("sandboxes_live", "Sandboxes holding resources.", "%u", h->live);
    GAUGE("reserved_memory_bytes", "Memory reserved by live sandboxes.", "%" PRIu64,
          h->reserved_mb << 20);
    GAUGE("reserved_cpus", "CPUs reserved by live sandboxes.", "%.2f", h->reserved_cpus);
    if (h->cfg.admission == CRL_ADMIT_MEASURED)
        GAUGE("memory_available_bytes", "The host's available memory as admission control sees it.",
              "%" PRIu64, mem_available_mb(h) << 20);
    GAUGE("files_held", "Descriptors corrald holds for its live sandboxes.", "%" PRIu64,
          h->fds_held);
    COUNTER("sandboxes_claimed_total", "Creates served by a pool's ready sandbox.", c->claimed);
    GAUGE("netns_pool_idle", "Idle network namespaces ready for reuse.", "%u",
          crl_netns_idle(h->netns));
    static const struct crl_dns_counters none;
    const struct crl_dns_counters *dns = h->resolver ? crl_resolver_totals(h->resolver) : &none;
    COUNTER("dns_queries_total", "DNS queries from sandboxes to corrald's resolver.", dns->queries);
    COUNTER("dns_answered_total", "Queries for allowed names, answered.", dns->answered);
    COUNTER("dns_refused_total", "Queries for names a sandbox's policy refuses.", dns->refused);
    COUNTER("dns_limited_total", "Queries dropped over a sandbox's rate.", dns->limited);
    COUNTER("dns_malformed_total", "Packets that were not a DNS query.", dns->malformed);
    COUNTER("dns_failed_total", "Queries answered SERVFAIL (upstream silent or failing).",
            dns->failed);
#undef COUNTER
#undef GAUGE
    crl_pools_metrics(h, &b);
    for (size_t i = 0; i < h->cfg.n_backends; i++)
        if (h->cfg.backends[i]->metrics)
            h->cfg.backends[i]->metrics(h, h->backend_state[i], &b);
    return b.data;
}
