/* Cluster mode, the API's side (cluster.h). */
#include "cluster.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../cluster/peer.h"
#include "../core/records.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "../util/worker.h"
#include "handlers_images.h"
#include "handlers_sandboxes.h"
#include "proxy.h"
#include "request.h"
#include "routes.h"

#define PUBLISH_NS 500000000ull /* the record handed to the publisher */
/* hosts a create is offered to: as many as a request remembers */
#define MAX_ATTEMPTS \
    (sizeof(((struct crl_req *)0)->tried) / sizeof(((struct crl_req *)0)->tried[0]))

/* A lost host's records, read from the shared dir once for as long as its
 * records.log stays as it was (a lost host stays in the view for an hour,
 * and every list names its sandboxes).  Only the lists touch these, on the
 * cluster's one worker thread. */
struct lost_records {
    char host[32];
    struct stat st; /* the log's, when it was read */
    json_t *live;
    struct lost_records *next;
};

struct crl_cluster {
    struct crl_api *api;
    struct crl_member *member;
    struct crl_timer publish;
    struct crl_worker *worker; /* what may wait: drains (etcd), lists (the other hosts) */
    uint64_t fenced;           /* the view's addresses the fence was made from (+1; 0: none) */
    struct lost_records *lost_cache;
};

static void lost_records_prune(struct crl_cluster *c, char (*lost)[32], size_t n);

static const char *state_name(enum crl_peer_state s)
{
    return s == CRL_PEER_READY ? "ready" : s == CRL_PEER_DRAINING ? "draining" : "lost";
}

/* What this host publishes of itself: its capacity, what is free, its
 * sandboxes and the images its ready warm pools hold. */
static json_t *own_record(struct crl_host *h)
{
    json_t *info = crl_host_info_json(h);
    if (!info)
        return NULL;
    json_t *ready = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(info, "pools"), i, p)
    {
        json_t *image = json_object_get(json_object_get(p, "template"), "image");
        json_t *n = json_object_get(p, "ready");
        if (json_is_string(image) && json_integer_value(n) > 0)
            json_array_append(ready, image);
    }
    json_t *used = json_object_get(info, "used");
    json_t *rec = json_pack(
        "{s:O, s:O, s:O, s:o, s:O}", "capacity", json_object_get(info, "capacity"), "free",
        json_object_get(info, "free"), "sandboxes", json_object_get(used, "sandboxes"),
        "pools_ready", ready, "backends", json_object_get(info, "backends"));
    json_decref(info);
    return rec;
}

/* No sandbox reaches another host of the cluster: every address the view
 * has (an IPv4 literal in its --advertise) is denied to them all. */
static void keep_out_peers(struct crl_cluster *c)
{
    uint64_t gen = crl_member_addrs(c->member) + 1;
    if (gen == c->fenced)
        return; /* no host came, went or moved since */
    c->fenced = gen;
    struct crl_member_host *hs;
    size_t n = crl_member_hosts(c->member, &hs);
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    for (size_t i = 0; i < n; i++) {
        char ip[64];
        struct in_addr a;
        const char *host = hs[i].addr + strlen("http://");
        size_t len = strcspn(host, ":/");
        if (strncmp(hs[i].addr, "http://", 7) != 0 || len >= sizeof(ip))
            continue;
        memcpy(ip, host, len);
        ip[len] = 0;
        if (strcmp(hs[i].id, c->api->host->cfg.host_id) != 0 && inet_pton(AF_INET, ip, &a) == 1)
            crl_buf_printf(&b, "%s%s", b.len ? ", " : "", ip);
    }
    crl_member_hosts_free(hs, n);
    crl_host_set_peers(c->api->host, b.data ? b.data : "");
    crl_buf_free(&b);
}

/* Hand the publisher this host's record as it is now. */
static void hand_record(struct crl_cluster *c)
{
    json_t *rec = own_record(c->api->host);
    char *s = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    if (s)
        crl_member_publish(c->member, s);
    free(s);
    json_decref(rec);
}

static void publish(struct crl_timer *t)
{
    struct crl_cluster *c = t->data;
    keep_out_peers(c);
    hand_record(c);
    crl_timer_start(c->api->host->loop, &c->publish, PUBLISH_NS, publish, c);
}

int crl_cluster_start(struct crl_api *a, const struct crl_cluster_config *cfg,
                      struct crl_cluster **out, struct crl_err *err)
{
    struct crl_cluster *c = calloc(1, sizeof(*c));
    if (!c)
        return crl_err_sys(err, ENOMEM, "cluster mode");
    c->api = a;
    char lease_file[4096];
    snprintf(lease_file, sizeof(lease_file), "%s/cluster-lease", a->host->state_dir);
    struct crl_member_config mc = {.etcd = cfg->etcd,
                                   .host_id = a->host->cfg.host_id,
                                   .advertise = cfg->advertise,
                                   .lease_file = lease_file,
                                   .lease_ttl_s = cfg->lease_ttl_s};
    if (crl_worker_new(a->host->loop, "cluster", &c->worker, err) < 0) {
        free(c);
        return -1;
    }
    if (crl_member_start(&mc, &c->member, err) < 0) {
        crl_worker_free(c->worker);
        free(c);
        return -1;
    }
    hand_record(c); /* before its first put, as a rule: it joins within ms */
    crl_timer_start(a->host->loop, &c->publish, PUBLISH_NS, publish, c);
    crl_info(NULL, "cluster: etcd %s, this host %s at %s", cfg->etcd, a->host->cfg.host_id,
             cfg->advertise);
    *out = c;
    return 0;
}

void crl_cluster_stop(struct crl_cluster *c)
{
    if (!c)
        return;
    crl_timer_stop(c->api->host->loop, &c->publish);
    crl_worker_free(c->worker);
    crl_member_stop(c->member);
    lost_records_prune(c, NULL, 0);
    free(c);
}

/* ---- owners ---- */

/* The host an id names: sb-<host>-<hex>. */
static bool id_host(const char *id, char *host, size_t cap)
{
    if (strncmp(id, "sb-", 3) != 0)
        return false;
    const char *dash = strchr(id + 3, '-');
    size_t len = dash ? (size_t)(dash - (id + 3)) : 0;
    if (!len || len >= cap)
        return false;
    memcpy(host, id + 3, len);
    host[len] = 0;
    return true;
}

/* Why a lost host's sandbox is lost, in the words every answer uses. */
static void lost_host_reason(const char *host, char *out, size_t cap)
{
    snprintf(out, cap,
             "its host %s is lost (its lease in etcd expired); if that host's corrald starts "
             "again on its state, it adopts what still runs",
             host);
}

int crl_cluster_owner(struct crl_cluster *c, const char *id, char *host, size_t hcap, char *addr,
                      size_t acap, struct crl_err *err)
{
    if (!id_host(id, host, hcap) || strcmp(host, c->api->host->cfg.host_id) == 0)
        return 0;
    enum crl_peer_state st;
    if (crl_member_lookup(c->member, host, addr, acap, &st, err) < 0)
        return crl_err_set(err, CRL_E_NOT_FOUND,
                           "sandbox %s is on host %s, which is not in the cluster", id, host);
    if (st == CRL_PEER_LOST) {
        char why[256];
        lost_host_reason(host, why, sizeof(why));
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is lost: %s", id, why);
    }
    return 1;
}

/* ---- placement ---- */

static bool placement_head(struct crl_req *r, unsigned status, const char *host)
{
    size_t off = strlen(r->placement);
    snprintf(r->placement + off, sizeof(r->placement) - off, "%s%s=%u", off ? ", " : "", host,
             status);
    /* Refused (no room, not ready, unreachable): the next host is asked. */
    bool refused = status == 503 || status == 502 || status == 429;
    if (refused)
        crl_info(NULL, "create: host %s refused it (%u); placing it again", host, status);
    return !(refused && r->n_tried < MAX_ATTEMPTS);
}

bool crl_cluster_place_create(struct crl_req *r, const struct crl_spec *spec)
{
    struct crl_cluster *c = r->api->cluster;
    struct crl_err err = CRL_ERR_INIT;
    if (!c || r->placed)
        return false;
    /* The fence as the view is now, not as the last tick had it: a host
     * that joined since is out of reach of the sandbox made next. */
    keep_out_peers(c);
    if (MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, CRL_PROXY_PLACED)) {
        r->placed = true; /* another host placed it here */
        return false;
    }
    char why[256];
    if (!crl_member_status(c->member, why, sizeof(why))) {
        crl_err_set(&err, CRL_E_UNAVAILABLE, "this host cannot place a create: %s", why);
        crl_req_error(r, &err);
        return true;
    }
    const char *tried[MAX_ATTEMPTS];
    for (unsigned i = 0; i < r->n_tried; i++)
        tried[i] = r->tried[i];
    const char *key = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
    while (r->n_tried < MAX_ATTEMPTS) {
        char host[32], addr[CRL_MEMBER_ADDR_MAX];
        int rc = key ? crl_member_place_keyed(c->member, key, tried, r->n_tried, host, sizeof(host))
                     : crl_member_place(c->member, spec->memory_mb, spec->cpus, spec->image, tried,
                                        r->n_tried, host, sizeof(host));
        if (rc < 0)
            break;
        if (strcmp(host, r->api->host->cfg.host_id) == 0) {
            r->placed = true;
            return false;
        }
        snprintf(r->tried[r->n_tried], sizeof(r->tried[0]), "%s", host);
        tried[r->n_tried] = r->tried[r->n_tried];
        r->n_tried++;
        enum crl_peer_state st;
        if (crl_member_lookup(c->member, host, addr, sizeof(addr), &st, &err) == 0 &&
            crl_proxy_forward(r, host, addr, r->body.data, r->body.len, placement_head, &err) == 0)
            return true;
        placement_head(r, 502, host);
    }
    crl_err_set(&err, CRL_E_CAPACITY, "no host of the cluster has room for it%s%s%s",
                r->placement[0] ? " (asked: " : "", r->placement, r->placement[0] ? ")" : "");
    crl_req_error(r, &err);
    return true;
}

/* ---- images a create needs ---- */

bool crl_cluster_pull_image(struct crl_req *r, const struct crl_spec *spec, crl_pull_done_fn done)
{
    struct crl_cluster *c = r->api->cluster;
    struct crl_image_store *images = r->api->host->images;
    struct crl_err err = CRL_ERR_INIT;
    if (!c || !images || r->image_pulled)
        return false;
    struct crl_image *img = crl_image_get(images, spec->image, &err);
    crl_image_put(img);
    char canon[CRL_IMAGE_NAME_MAX + 1];
    /* an image id is no name to pull by: only a name says which one */
    if (img || err.code != CRL_E_NOT_FOUND || strncmp(spec->image, "sha256:", 7) == 0 ||
        crl_store_name_canon(spec->image, canon, &err) < 0)
        return false;
    /* The hosts to ask: those of the view that answer, ready ones first. */
    json_t *hosts = json_array();
    struct crl_member_host *hs;
    size_t n = crl_member_hosts(c->member, &hs);
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++)
            if (strcmp(hs[i].id, r->api->host->cfg.host_id) != 0 &&
                hs[i].state == (pass ? CRL_PEER_DRAINING : CRL_PEER_READY))
                json_array_append_new(hosts,
                                      json_pack("{s:s, s:s}", "id", hs[i].id, "addr", hs[i].addr));
    crl_member_hosts_free(hs, n);
    json_t *req =
        json_pack("{s:o, s:s}", "hosts", hosts, "token", r->api->token ? r->api->token : "");
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    r->image_pulled = true; /* once: a pull that gives another image is not retried */
    int rc = text ? crl_h_images_pull(r, canon, text, done, &err)
                  : crl_err_sys(&err, ENOMEM, "pull %s", canon);
    free(text);
    if (rc < 0)
        crl_req_error(r, &err);
    return true;
}

/* ---- /v1/hosts ---- */

static json_t *host_json(const struct crl_member_host *h, bool self)
{
    json_t *rec = h->record ? json_loads(h->record, 0, NULL) : NULL;
    json_t *o = json_pack("{s:s, s:s, s:s, s:b}", "id", h->id, "addr", h->addr, "state",
                          state_name(h->state), "self", self);
    if (rec) {
        const char *keep[] = {"capacity", "free", "sandboxes", "pools_ready", "backends"};
        for (size_t i = 0; i < sizeof(keep) / sizeof(*keep); i++)
            if (json_object_get(rec, keep[i]))
                json_object_set(o, keep[i], json_object_get(rec, keep[i]));
    }
    json_decref(rec);
    if (h->heartbeat > 0) {
        json_object_set_new(o, "heartbeat", json_real(h->heartbeat));
        json_object_set_new(o, "heartbeat_age_s", json_real(crl_wall_s() - h->heartbeat));
    } else {
        json_object_set_new(o, "heartbeat", json_null());
    }
    return o;
}

void crl_h_hosts_list(struct crl_req *r)
{
    static const char *const states[] = {"ready", "draining", "lost", NULL};
    static const struct crl_list_spec list = {
        .items = "hosts", .key = "id", .states = states, .no_labels = true};
    struct crl_cluster *c = r->api->cluster;
    json_t *items = json_array();
    json_t *answer = json_pack("{s:o}", "hosts", items);
    if (!c) {
        json_t *rec = own_record(r->api->host);
        json_t *o = json_pack("{s:s, s:s, s:b, s:f}", "id", r->api->host->cfg.host_id, "state",
                              "ready", "self", 1, "heartbeat", crl_wall_s());
        json_object_update(o, rec);
        json_decref(rec);
        json_array_append_new(items, o);
        json_object_set_new(answer, "cluster", json_null());
    } else {
        struct crl_member_host *hs;
        size_t n = crl_member_hosts(c->member, &hs);
        for (size_t i = 0; i < n; i++)
            json_array_append_new(
                items, host_json(&hs[i], strcmp(hs[i].id, r->api->host->cfg.host_id) == 0));
        crl_member_hosts_free(hs, n);
        char why[256];
        bool joined = crl_member_status(c->member, why, sizeof(why));
        json_object_set_new(
            answer, "cluster",
            json_pack("{s:b, s:s?}", "member", joined, "reason", joined ? NULL : why));
    }
    crl_req_list(r, answer, &list);
}

struct drain_job {
    struct crl_worker_job job;
    struct crl_req *r;
    struct crl_member *member;
    char host[32];
    bool drain;
};

static int drain_work(struct crl_worker_job *j, struct crl_err *err)
{
    struct drain_job *d = (struct drain_job *)j;
    return crl_member_set_drain(d->member, d->host, d->drain, err);
}

static void drain_done(struct crl_worker_job *j, const struct crl_err *err)
{
    struct drain_job *d = (struct drain_job *)j;
    struct crl_req *r = d->r;
    if (err && !r->gone) {
        crl_req_error(r, err);
    } else if (!r->gone) {
        crl_req_json(
            r, 200,
            json_pack("{s:s, s:s}", "id", d->host, "state", d->drain ? "draining" : "ready"));
    }
    crl_req_pending_done(r);
}

void crl_h_host_drain(struct crl_req *r)
{
    struct crl_cluster *c = r->api->cluster;
    struct crl_err err = CRL_ERR_INIT;
    char addr[CRL_MEMBER_ADDR_MAX];
    enum crl_peer_state st;
    if (!c) {
        crl_err_set(&err, CRL_E_UNSUPPORTED,
                    "drain is for a cluster's hosts: this corrald runs without --cluster");
        crl_req_error(r, &err);
        return;
    }
    if (crl_member_lookup(c->member, r->route.name, addr, sizeof(addr), &st, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    struct drain_job *d = calloc(1, sizeof(*d));
    if (!d) {
        crl_err_sys(&err, ENOMEM, "drain");
        crl_req_error(r, &err);
        return;
    }
    d->job.work = drain_work;
    d->job.done = drain_done;
    d->r = r;
    d->member = c->member;
    d->drain = strcmp(r->method, "DELETE") != 0;
    snprintf(d->host, sizeof(d->host), "%s", r->route.name);
    r->state = d;
    r->pending++;
    crl_worker_submit(c->worker, &d->job);
}

void crl_h_host_drain_free(struct crl_req *r)
{
    free(r->state);
    r->state = NULL;
}

/* ---- a cluster's list of sandboxes ---- */

struct list_job {
    struct crl_worker_job job;
    struct crl_req *r;
    json_t *merged; /* {"sandboxes": [...]}: this host's, then the others' */
    char **urls;
    size_t n;
    char auth[4200], by[128];
    /* the lost hosts, whose records are read in the shared dir */
    const char *shared_dir;
    char (*lost)[32];
    size_t n_lost;
    struct crl_cluster *c;
};

/* A lost host's records (borrowed from the cache): read again only when
 * its log changed. */
static json_t *lost_records(struct list_job *l, const char *host)
{
    char dir[4200], path[4300];
    crl_records_dir(l->shared_dir, host, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/records.log", dir);
    struct stat st;
    bool have = stat(path, &st) == 0;
    struct lost_records *e = l->c->lost_cache;
    while (e && strcmp(e->host, host) != 0)
        e = e->next;
    if (e && have && e->st.st_ino == st.st_ino && e->st.st_size == st.st_size &&
        e->st.st_mtim.tv_sec == st.st_mtim.tv_sec && e->st.st_mtim.tv_nsec == st.st_mtim.tv_nsec)
        return e->live;
    if (!e && (e = calloc(1, sizeof(*e)))) {
        snprintf(e->host, sizeof(e->host), "%s", host);
        e->next = l->c->lost_cache;
        l->c->lost_cache = e;
    }
    if (!e)
        return NULL;
    json_decref(e->live);
    e->live = have ? crl_records_read(dir) : NULL;
    e->st = st;
    return e->live;
}

/* The cache keeps the hosts lost now, no other. */
static void lost_records_prune(struct crl_cluster *c, char (*lost)[32], size_t n)
{
    for (struct lost_records **pp = &c->lost_cache; *pp;) {
        struct lost_records *e = *pp;
        size_t i = 0;
        while (i < n && strcmp(lost[i], e->host) != 0)
            i++;
        if (i < n) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        json_decref(e->live);
        free(e);
    }
}

/* A lost host's sandboxes, from the records it kept in the shared dir:
 * each as it was (id, labels, spec, times), lost, with why. */
static void add_lost(struct list_job *l, const char *host, json_t *all)
{
    char why[256];
    lost_host_reason(host, why, sizeof(why));
    const char *id;
    json_t *rec;
    json_object_foreach(lost_records(l, host), id, rec)
    {
        json_t *o = json_deep_copy(rec);
        json_object_del(o, "adopt"); /* how it ran: nothing a client needs */
        json_object_set_new(o, "state", json_string("lost"));
        json_object_set_new(o, "host", json_string(host));
        json_object_set_new(o, "reason", json_string(why));
        json_object_set_new(o, "lost_reason", json_string("host_lost"));
        json_object_set_new(o, "message", json_string(why));
        json_array_append_new(all, o);
    }
}

/* Every other host's own list, asked at once (a host that does not answer
 * in time, or answers what is not a list, is left out and logged); only
 * objects with an id are taken from an answer. */
static int list_work(struct crl_worker_job *j, struct crl_err *err)
{
    struct list_job *l = (struct list_job *)j;
    json_t *all = json_object_get(l->merged, "sandboxes");
    CURLM *m = curl_multi_init();
    CURL **cs = calloc(l->n + 1, sizeof(*cs));
    struct crl_buf *bufs = calloc(l->n + 1, sizeof(*bufs));
    CURLcode *results = calloc(l->n + 1, sizeof(*results));
    struct curl_slist *hs = curl_slist_append(NULL, l->auth);
    hs = curl_slist_append(hs, l->by);
    if (!m || !cs || !bufs || !results || !hs) {
        curl_multi_cleanup(m);
        free(cs);
        free(bufs);
        free(results);
        curl_slist_free_all(hs);
        return crl_err_sys(err, ENOMEM, "listing the cluster's sandboxes");
    }
    curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, 64L);
    for (size_t i = 0; i < l->n; i++) {
        crl_buf_init(&bufs[i], 64u << 20);
        results[i] = CURLE_OPERATION_TIMEDOUT; /* until its end is read */
        if (!(cs[i] = curl_easy_init()))
            continue;
        curl_easy_setopt(cs[i], CURLOPT_PRIVATE, (char *)&results[i]);
        curl_easy_setopt(cs[i], CURLOPT_URL, l->urls[i]);
        curl_easy_setopt(cs[i], CURLOPT_HTTPHEADER, hs);
        curl_easy_setopt(cs[i], CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(cs[i], CURLOPT_TIMEOUT_MS, 5000L);
        curl_easy_setopt(cs[i], CURLOPT_PROTOCOLS_STR, "http");
        curl_easy_setopt(cs[i], CURLOPT_WRITEFUNCTION, crl_curl_gather);
        curl_easy_setopt(cs[i], CURLOPT_WRITEDATA, &bufs[i]);
        curl_multi_add_handle(m, cs[i]);
    }
    int running = 1;
    while (running) {
        if (curl_multi_perform(m, &running) != CURLM_OK)
            break;
        if (running)
            curl_multi_poll(m, NULL, 0, 1000, NULL);
    }
    int left;
    for (CURLMsg *msg; (msg = curl_multi_info_read(m, &left));) {
        char *res = NULL;
        if (msg->msg == CURLMSG_DONE &&
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &res) == CURLE_OK && res)
            *(CURLcode *)(void *)res = msg->data.result;
    }
    for (size_t i = 0; i < l->n; i++) {
        long status = 0;
        CURLcode rc = cs[i] ? results[i] : CURLE_FAILED_INIT;
        if (cs[i])
            curl_easy_getinfo(cs[i], CURLINFO_RESPONSE_CODE, &status);
        json_t *o =
            rc == CURLE_OK && status == 200 ? json_loadb(bufs[i].data, bufs[i].len, 0, NULL) : NULL;
        json_t *items = json_object_get(o, "sandboxes"), *it;
        size_t k;
        if (json_is_array(items)) {
            json_array_foreach(items, k, it)
            {
                if (json_is_object(it) && json_is_string(json_object_get(it, "id")))
                    json_array_append(all, it);
            }
        } else {
            crl_warn(NULL, "listing sandboxes: %s answered %ld%s%s", l->urls[i], status,
                     rc != CURLE_OK ? ": " : " (not a list)",
                     rc != CURLE_OK ? curl_easy_strerror(rc) : "");
        }
        json_decref(o);
        crl_buf_free(&bufs[i]);
        if (cs[i]) {
            curl_multi_remove_handle(m, cs[i]);
            curl_easy_cleanup(cs[i]);
        }
    }
    curl_multi_cleanup(m);
    curl_slist_free_all(hs);
    free(cs);
    free(bufs);
    free(results);
    lost_records_prune(l->c, l->lost, l->n_lost);
    for (size_t i = 0; i < l->n_lost; i++)
        add_lost(l, l->lost[i], all);
    return 0;
}

static void list_job_free(struct list_job *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->urls[i]);
    free(l->urls);
    free(l->lost);
    json_decref(l->merged);
    free(l);
}

static void list_done(struct crl_worker_job *j, const struct crl_err *err)
{
    struct list_job *l = (struct list_job *)j;
    struct crl_req *r = l->r;
    r->state = NULL;
    if (err && !r->gone)
        crl_req_error(r, err);
    else if (!r->gone)
        crl_h_sandboxes_list_answer(r, json_incref(l->merged));
    list_job_free(l);
    crl_req_pending_done(r);
}

bool crl_cluster_list_sandboxes(struct crl_req *r, json_t *local)
{
    struct crl_cluster *c = r->api->cluster;
    if (!c || !local ||
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, CRL_PROXY_FORWARDED_BY))
        return false;
    struct list_job *l = calloc(1, sizeof(*l));
    struct crl_member_host *hs = NULL;
    size_t n = crl_member_hosts(c->member, &hs);
    if (!l || !(l->urls = calloc(n + 1, sizeof(char *))) ||
        !(l->lost = calloc(n + 1, sizeof(*l->lost)))) {
        if (l)
            free(l->urls);
        free(l);
        crl_member_hosts_free(hs, n);
        return false; /* this host's alone, rather than nothing */
    }
    l->shared_dir = r->api->cfg.shared_dir;
    l->c = c;
    for (size_t i = 0; i < n; i++) {
        if (hs[i].state == CRL_PEER_LOST && l->shared_dir)
            snprintf(l->lost[l->n_lost++], sizeof(l->lost[0]), "%s", hs[i].id);
        if (hs[i].state == CRL_PEER_LOST || !hs[i].addr[0] ||
            strcmp(hs[i].id, r->api->host->cfg.host_id) == 0)
            continue;
        if (asprintf(&l->urls[l->n], "%s/v1/sandboxes", hs[i].addr) > 0)
            l->n++;
    }
    crl_member_hosts_free(hs, n);
    l->merged = local;
    snprintf(l->auth, sizeof(l->auth), "Authorization: Bearer %s",
             r->api->token ? r->api->token : "");
    snprintf(l->by, sizeof(l->by), CRL_PROXY_FORWARDED_BY ": %s", r->api->host->cfg.host_id);
    l->job.work = list_work;
    l->job.done = list_done;
    l->r = r;
    r->pending++;
    crl_worker_submit(c->worker, &l->job);
    return true;
}
