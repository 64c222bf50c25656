/* Membership of the cluster: the publisher and the watcher (member.h). */
#include "member.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../util/fdio.h"
#include "../util/log.h"
#include "etcd.h"

#define HOSTS_PREFIX "/corral/hosts/"
#define DRAIN_PREFIX "/corral/drain/"
#define ETCD_TIMEOUT_MS 2000
#define MAX_HOSTS 4096
#define LOST_KEEP_S 3600.0 /* a lost host stays in the view this long */

struct host {
    struct crl_member_host h;
    struct crl_peer peer; /* h.id, state and free figures for place.h */
    char pools[512];      /* its ready warm pools' images: "\nIMAGE\nIMAGE\n" */
    bool has_key, drained;
    unsigned synced; /* the resync that last read its key */
};

struct crl_member {
    char host_id[32], advertise[CRL_MEMBER_ADDR_MAX], etcd[1024], lease_file[4096];
    unsigned ttl_s, publish_ms;
    pthread_t publisher, watcher;
    bool publisher_started, watcher_started;
    volatile bool stop;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    /* under mu */
    char *record;  /* the loop's latest */
    bool joined;   /* holds its lease, etcd answered lately */
    char why[256]; /* why not joined */
    int64_t lease; /* the publisher's own copy is authoritative */
    struct host *hosts;
    size_t n, cap;
    uint64_t rng;
    unsigned sync;  /* resyncs so far */
    uint64_t addrs; /* bumped when a host comes, goes or moves (crl_member_addrs) */
};

static void sleep_ms(struct crl_member *m, unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&m->mu);
    if (!m->stop)
        pthread_cond_timedwait(&m->wake, &m->mu, &ts);
    pthread_mutex_unlock(&m->mu);
}

static void set_status(struct crl_member *m, bool joined, const char *why)
{
    pthread_mutex_lock(&m->mu);
    if (m->joined != joined || (!joined && strcmp(m->why, why) != 0)) {
        if (joined)
            crl_info(NULL, "cluster: host %s is a member (lease %" PRIx64 ")", m->host_id,
                     (uint64_t)m->lease);
        else
            crl_warn(NULL, "cluster: host %s is not a member: %s", m->host_id, why);
    }
    m->joined = joined;
    snprintf(m->why, sizeof(m->why), "%s", joined ? "" : why);
    pthread_mutex_unlock(&m->mu);
}

/* ---- the publisher ---- */

static int64_t lease_load(const struct crl_member *m)
{
    char buf[64];
    int fd = open(m->lease_file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    return strtoll(buf, NULL, 16);
}

static void lease_save(const struct crl_member *m, int64_t lease)
{
    char buf[64];
    int len = snprintf(buf, sizeof(buf), "%" PRIx64 "\n", (uint64_t)lease);
    int fd = open(m->lease_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || crl_write_full(fd, buf, (size_t)len) < 0)
        crl_warn(NULL, "cluster: writing %s: %s", m->lease_file, strerror(errno));
    if (fd >= 0)
        close(fd);
}

static char *record_of(struct crl_member *m)
{
    pthread_mutex_lock(&m->mu);
    json_t *rec = m->record ? json_loads(m->record, 0, NULL) : json_object();
    pthread_mutex_unlock(&m->mu);
    if (!rec)
        rec = json_object();
    json_object_set_new(rec, "id", json_string(m->host_id));
    json_object_set_new(rec, "addr", json_string(m->advertise));
    json_object_set_new(rec, "heartbeat", json_real(crl_wall_s()));
    char *s = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    return s;
}

/* Hold a lease and this host's key under it: the lease kept from before
 * the restart if it still runs, else a new one, whose key must not be
 * another host's. */
static int join(struct crl_member *m, struct crl_etcd *e, int64_t *lease, struct crl_err *err)
{
    char key[128];
    snprintf(key, sizeof(key), HOSTS_PREFIX "%s", m->host_id);
    int64_t old = lease_load(m), ttl = 0;
    if (old && crl_etcd_lease_keepalive(e, old, &ttl, err) < 0)
        return -1;
    if (old && ttl > 0) {
        struct crl_etcd_kv *kvs = NULL;
        size_t n = 0;
        if (crl_etcd_get(e, key, false, &kvs, &n, NULL, err) < 0)
            return -1;
        bool ours = n == 0 || kvs[0].lease == old;
        crl_etcd_kvs_free(kvs, n);
        if (ours) {
            *lease = old;
            return 0;
        }
    }
    int64_t id;
    if (crl_etcd_lease_grant(e, m->ttl_s, &id, err) < 0)
        return -1;
    /* The whole record from the first: the others must never see this
     * host without its address, room and heartbeat. */
    char *rec = record_of(m);
    int rc = rec ? crl_etcd_create(e, key, rec, strlen(rec), id, err)
                 : crl_err_sys(err, ENOMEM, "this host's record");
    free(rec);
    if (rc <= 0) {
        crl_etcd_lease_revoke(e, id, NULL);
        if (rc == 0)
            crl_err_set(err, CRL_E_CONFLICT,
                        "host id %s is another running member's (its key %s is held)", m->host_id,
                        key);
        return -1;
    }
    lease_save(m, id);
    *lease = id;
    return 0;
}

static void *publisher(void *arg)
{
    struct crl_member *m = arg;
    struct crl_etcd *e = NULL;
    struct crl_err err = CRL_ERR_INIT;
    if (crl_etcd_open(m->etcd, ETCD_TIMEOUT_MS, &e, &err) < 0) {
        set_status(m, false, err.msg);
        return NULL;
    }
    char key[128];
    snprintf(key, sizeof(key), HOSTS_PREFIX "%s", m->host_id);
    int64_t lease = 0;
    double last_ok = 0, last_keepalive = 0;
    while (!m->stop) {
        crl_err_clear(&err);
        if (!lease && join(m, e, &lease, &err) < 0) {
            set_status(m, false, err.msg);
            sleep_ms(m, 1000);
            continue;
        }
        pthread_mutex_lock(&m->mu);
        m->lease = lease;
        pthread_mutex_unlock(&m->mu);
        double now = crl_wall_s();
        int64_t ttl = 1;
        int rc = 0;
        if (now - last_keepalive >= m->ttl_s / 3.0) {
            rc = crl_etcd_lease_keepalive(e, lease, &ttl, &err);
            if (rc == 0)
                last_keepalive = now;
        }
        if (rc == 0 && ttl <= 0) {
            set_status(m, false, "its lease expired: joining again");
            lease = 0;
            continue;
        }
        char *rec = rc == 0 ? record_of(m) : NULL;
        if (rec)
            rc = crl_etcd_put(e, key, rec, strlen(rec), lease, &err);
        free(rec);
        if (rc == 0) {
            last_ok = now;
            set_status(m, true, "");
        } else if (now - last_ok >= m->ttl_s) {
            /* Our lease has run out by now, as far as the others know. */
            char why[300];
            snprintf(why, sizeof(why), "etcd has not answered for %us: %s", m->ttl_s, err.msg);
            set_status(m, false, why);
        }
        sleep_ms(m, m->publish_ms);
    }
    if (lease && crl_etcd_lease_revoke(e, lease, &err) == 0)
        unlink(m->lease_file);
    crl_etcd_close(e);
    return NULL;
}

/* ---- the view ---- */

static struct host *find(struct crl_member *m, const char *id)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->hosts[i].h.id, id) == 0)
            return &m->hosts[i];
    return NULL;
}

static struct host *find_or_add(struct crl_member *m, const char *id)
{
    struct host *h = find(m, id);
    if (h || strlen(id) >= sizeof(h->h.id) || m->n >= MAX_HOSTS)
        return h;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        struct host *hs = realloc(m->hosts, cap * sizeof(*hs));
        if (!hs)
            return NULL;
        m->hosts = hs;
        m->cap = cap;
    }
    h = &m->hosts[m->n++];
    memset(h, 0, sizeof(*h));
    m->addrs++;
    snprintf(h->h.id, sizeof(h->h.id), "%s", id);
    snprintf(h->peer.id, sizeof(h->peer.id), "%s", id);
    h->h.state = h->peer.state = CRL_PEER_LOST;
    return h;
}

static void settle_state(struct host *h)
{
    h->h.state = !h->has_key ? CRL_PEER_LOST : h->drained ? CRL_PEER_DRAINING : CRL_PEER_READY;
    h->peer.state = h->h.state;
}

static uint64_t num(json_t *o, const char *a, const char *b)
{
    json_t *v = json_object_get(json_object_get(o, a), b);
    double d = json_is_number(v) ? json_number_value(v) : 0;
    return d > 0 ? (uint64_t)d : 0;
}

/* A host's record came (a put under /corral/hosts/): what it says, if it
 * says it well; a record that does not parse keeps the host but offers
 * no room. */
static void host_put(struct crl_member *m, const char *id, const char *value, size_t len)
{
    struct host *h = find_or_add(m, id);
    if (!h)
        return;
    json_t *rec = json_loadb(value, len, 0, NULL);
    free(h->h.record);
    h->h.record = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    h->has_key = true;
    h->h.seen = crl_wall_s();
    h->synced = m->sync;
    const char *addr = json_string_value(json_object_get(rec, "addr"));
    if (!addr || strlen(addr) >= sizeof(h->h.addr))
        addr = "";
    if (strcmp(h->h.addr, addr) != 0)
        m->addrs++;
    snprintf(h->h.addr, sizeof(h->h.addr), "%s", addr);
    json_t *hb = json_object_get(rec, "heartbeat");
    h->h.heartbeat = json_is_number(hb) ? json_number_value(hb) : 0;
    h->peer.free_mb = num(rec, "free", "memory_mb");
    json_t *cpus = json_object_get(json_object_get(rec, "free"), "cpus");
    h->peer.free_cpus = json_is_number(cpus) ? json_number_value(cpus) : 0;
    uint64_t slots = num(rec, "free", "sandboxes");
    h->peer.free_slots = slots > UINT32_MAX ? UINT32_MAX : (uint32_t)slots;
    h->pools[0] = '\n';
    h->pools[1] = 0;
    size_t i, off = 1;
    json_t *p;
    json_array_foreach(json_object_get(rec, "pools_ready"), i, p)
    {
        const char *img = json_string_value(p);
        if (img && off + strlen(img) + 2 < sizeof(h->pools))
            off += (size_t)snprintf(h->pools + off, sizeof(h->pools) - off, "%s\n", img);
    }
    if (!h->h.addr[0] || !rec)
        h->peer.free_slots = 0; /* nowhere to send it, or nothing known */
    crl_peer_refreshed(&h->peer);
    json_decref(rec);
    settle_state(h);
}

static void host_gone(struct crl_member *m, const char *id)
{
    struct host *h = find(m, id);
    if (h && h->has_key) {
        h->has_key = false;
        h->h.seen = crl_wall_s();
        crl_warn(NULL, "cluster: host %s is lost (its lease ended)", id);
        settle_state(h);
    }
}

static void drain_set(struct crl_member *m, const char *id, bool on)
{
    struct host *h = find_or_add(m, id);
    if (h) {
        h->drained = on;
        settle_state(h);
    }
}

static void apply(struct crl_member *m, enum crl_etcd_event ev, const struct crl_etcd_kv *kv)
{
    if (strncmp(kv->key, HOSTS_PREFIX, strlen(HOSTS_PREFIX)) == 0) {
        const char *id = kv->key + strlen(HOSTS_PREFIX);
        if (ev == CRL_ETCD_PUT)
            host_put(m, id, kv->value, kv->value_len);
        else
            host_gone(m, id);
    } else if (strncmp(kv->key, DRAIN_PREFIX, strlen(DRAIN_PREFIX)) == 0) {
        drain_set(m, kv->key + strlen(DRAIN_PREFIX), ev == CRL_ETCD_PUT);
    }
}

static int on_event(enum crl_etcd_event ev, const struct crl_etcd_kv *kv, void *ctx)
{
    struct crl_member *m = ctx;
    pthread_mutex_lock(&m->mu);
    apply(m, ev, kv);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* Read the whole of /corral/ again: every host not in it now is lost,
 * and forgotten once lost long enough. */
static int resync(struct crl_member *m, struct crl_etcd *e, int64_t *rev, struct crl_err *err)
{
    struct crl_etcd_kv *kvs = NULL;
    size_t n = 0;
    if (crl_etcd_get(e, "/corral/", true, &kvs, &n, rev, err) < 0)
        return -1;
    pthread_mutex_lock(&m->mu);
    m->sync++; /* a host whose key this read puts is marked with it */
    for (size_t i = 0; i < m->n; i++)
        m->hosts[i].drained = false;
    for (size_t i = 0; i < n; i++)
        apply(m, CRL_ETCD_PUT, &kvs[i]);
    double now = crl_wall_s();
    for (size_t i = 0; i < m->n;) {
        struct host *h = &m->hosts[i];
        bool present = h->has_key && h->synced == m->sync;
        if (!present)
            host_gone(m, h->h.id);
        if (!present && !h->drained && now - h->h.seen > LOST_KEEP_S) {
            free(h->h.record);
            memmove(h, h + 1, (m->n - i - 1) * sizeof(*h));
            m->n--;
            m->addrs++;
            continue;
        }
        settle_state(h);
        i++;
    }
    pthread_mutex_unlock(&m->mu);
    crl_etcd_kvs_free(kvs, n);
    return 0;
}

static void *watcher(void *arg)
{
    struct crl_member *m = arg;
    struct crl_etcd *e = NULL;
    struct crl_err err = CRL_ERR_INIT;
    if (crl_etcd_open(m->etcd, ETCD_TIMEOUT_MS, &e, &err) < 0)
        return NULL;
    while (!m->stop) {
        int64_t rev = 0;
        crl_err_clear(&err);
        if (resync(m, e, &rev, &err) == 0)
            crl_etcd_watch(e, "/corral/", rev + 1, on_event, m, &m->stop, &err);
        if (!m->stop && err.msg[0])
            crl_debug(NULL, "cluster: watching etcd: %s", err.msg);
        sleep_ms(m, 500);
    }
    crl_etcd_close(e);
    return NULL;
}

/* ---- the API ---- */

int crl_member_start(const struct crl_member_config *cfg, struct crl_member **out,
                     struct crl_err *err)
{
    if (!cfg->advertise || strncmp(cfg->advertise, "http://", 7) != 0 ||
        strlen(cfg->advertise) >= CRL_MEMBER_ADDR_MAX)
        return crl_err_set(
            err, CRL_E_INVALID,
            "--advertise: '%s' is not an http://ADDR:PORT this host's API answers at",
            cfg->advertise ? cfg->advertise : "");
    struct crl_etcd *probe = NULL;
    if (crl_etcd_open(cfg->etcd, ETCD_TIMEOUT_MS, &probe, err) < 0)
        return -1; /* the members' list is bad: say so now */
    crl_etcd_close(probe);
    struct crl_member *m = calloc(1, sizeof(*m));
    if (!m)
        return crl_err_sys(err, ENOMEM, "cluster membership");
    snprintf(m->host_id, sizeof(m->host_id), "%s", cfg->host_id);
    snprintf(m->advertise, sizeof(m->advertise), "%s", cfg->advertise);
    snprintf(m->etcd, sizeof(m->etcd), "%s", cfg->etcd);
    snprintf(m->lease_file, sizeof(m->lease_file), "%s", cfg->lease_file);
    snprintf(m->why, sizeof(m->why), "joining");
    m->ttl_s = cfg->lease_ttl_s ? cfg->lease_ttl_s : 10;
    m->publish_ms = cfg->publish_ms ? cfg->publish_ms : 1000;
    m->rng = ((uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(crl_wall_s() * 1e6)) | 1;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->wake, NULL);
    int rc = pthread_create(&m->publisher, NULL, publisher, m);
    m->publisher_started = rc == 0;
    if (rc == 0) {
        rc = pthread_create(&m->watcher, NULL, watcher, m);
        m->watcher_started = rc == 0;
    }
    if (rc != 0) {
        crl_member_stop(m);
        return crl_err_sys(err, rc, "cluster membership's threads");
    }
    *out = m;
    return 0;
}

void crl_member_stop(struct crl_member *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_broadcast(&m->wake);
    pthread_mutex_unlock(&m->mu);
    if (m->publisher_started)
        pthread_join(m->publisher, NULL);
    if (m->watcher_started)
        pthread_join(m->watcher, NULL);
    for (size_t i = 0; i < m->n; i++)
        free(m->hosts[i].h.record);
    free(m->hosts);
    free(m->record);
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void crl_member_publish(struct crl_member *m, const char *record)
{
    char *copy = strdup(record);
    pthread_mutex_lock(&m->mu);
    if (copy) {
        free(m->record);
        m->record = copy;
    }
    pthread_mutex_unlock(&m->mu);
}

bool crl_member_status(struct crl_member *m, char *why, size_t cap)
{
    pthread_mutex_lock(&m->mu);
    bool joined = m->joined;
    if (why)
        snprintf(why, cap, "%s", m->why);
    pthread_mutex_unlock(&m->mu);
    return joined;
}

uint64_t crl_member_addrs(struct crl_member *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t gen = m->addrs;
    pthread_mutex_unlock(&m->mu);
    return gen;
}

size_t crl_member_hosts(struct crl_member *m, struct crl_member_host **out)
{
    pthread_mutex_lock(&m->mu);
    size_t n = m->n;
    struct crl_member_host *hs = calloc(n + 1, sizeof(*hs));
    for (size_t i = 0; hs && i < n; i++) {
        hs[i] = m->hosts[i].h;
        hs[i].record = m->hosts[i].h.record ? strdup(m->hosts[i].h.record) : NULL;
    }
    pthread_mutex_unlock(&m->mu);
    *out = hs;
    return hs ? n : 0;
}

void crl_member_hosts_free(struct crl_member_host *hs, size_t n)
{
    for (size_t i = 0; hs && i < n; i++)
        free(hs[i].record);
    free(hs);
}

int crl_member_lookup(struct crl_member *m, const char *id, char *addr, size_t cap,
                      enum crl_peer_state *state, struct crl_err *err)
{
    pthread_mutex_lock(&m->mu);
    struct host *h = find(m, id);
    if (h) {
        snprintf(addr, cap, "%s", h->h.addr);
        *state = h->h.state;
    }
    pthread_mutex_unlock(&m->mu);
    return h ? 0 : crl_err_set(err, CRL_E_NOT_FOUND, "no host %s in the cluster", id);
}

int crl_member_place(struct crl_member *m, uint64_t mb, double cpus, const char *image,
                     const char *const *exclude, size_t n_exclude, char *id_out, size_t cap)
{
    pthread_mutex_lock(&m->mu);
    struct crl_peer *peers = calloc(m->n + 1, sizeof(*peers));
    bool *ex = calloc(m->n + 1, sizeof(bool));
    long chosen = -1;
    if (peers && ex) {
        char want[300] = "";
        if (image && strlen(image) < sizeof(want) - 3)
            snprintf(want, sizeof(want), "\n%s\n", image);
        for (size_t i = 0; i < m->n; i++) {
            peers[i] = m->hosts[i].peer;
            peers[i].pools = want[0] && strstr(m->hosts[i].pools, want) ? 1u : 0u;
            for (size_t j = 0; j < n_exclude; j++)
                if (strcmp(exclude[j], m->hosts[i].h.id) == 0)
                    ex[i] = true;
        }
        struct crl_demand d = {.mb = mb, .cpus = cpus, .pool = want[0] ? 1u : 0u};
        chosen = crl_place(peers, m->n, &d, 3, ex, &m->rng);
        if (chosen >= 0) {
            m->hosts[chosen].peer.placed_mb = peers[chosen].placed_mb;
            m->hosts[chosen].peer.placed_cpus = peers[chosen].placed_cpus;
            m->hosts[chosen].peer.placed_n = peers[chosen].placed_n;
            snprintf(id_out, cap, "%s", m->hosts[chosen].h.id);
        }
    }
    pthread_mutex_unlock(&m->mu);
    free(peers);
    free(ex);
    return chosen >= 0 ? 0 : -1;
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

int crl_member_place_keyed(struct crl_member *m, const char *key, const char *const *exclude,
                           size_t n_exclude, char *id_out, size_t cap)
{
    uint64_t best = 0;
    long chosen = -1;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n; i++) {
        bool excluded = m->hosts[i].h.state != CRL_PEER_READY;
        for (size_t j = 0; j < n_exclude && !excluded; j++)
            excluded = strcmp(exclude[j], m->hosts[i].h.id) == 0;
        uint64_t w = fnv1a(fnv1a(0xcbf29ce484222325ull, key), m->hosts[i].h.id);
        w ^= w >> 31; /* FNV's low bits mix poorly: spread them before comparing */
        w *= 0x9e3779b97f4a7c15ull;
        if (!excluded && (chosen < 0 || w > best)) {
            best = w;
            chosen = (long)i;
        }
    }
    if (chosen >= 0)
        snprintf(id_out, cap, "%s", m->hosts[chosen].h.id);
    pthread_mutex_unlock(&m->mu);
    return chosen >= 0 ? 0 : -1;
}

int crl_member_set_drain(struct crl_member *m, const char *id, bool drain, struct crl_err *err)
{
    struct crl_etcd *e = NULL;
    if (crl_etcd_open(m->etcd, ETCD_TIMEOUT_MS, &e, err) < 0)
        return -1;
    char key[128];
    snprintf(key, sizeof(key), DRAIN_PREFIX "%s", id);
    double now = crl_wall_s();
    char val[64];
    int len = snprintf(val, sizeof(val), "{\"since\":%.3f}", now);
    int rc = drain ? crl_etcd_put(e, key, val, (size_t)len, 0, err)
                   : (crl_etcd_delete(e, key, false, err) < 0 ? -1 : 0);
    crl_etcd_close(e);
    if (rc == 0) {
        pthread_mutex_lock(&m->mu);
        drain_set(m, id, drain); /* the watch will say so too */
        pthread_mutex_unlock(&m->mu);
    }
    return rc;
}
