/* The etcd v3 JSON gateway (etcd.h). */
#include "etcd.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "peer.h"

struct crl_etcd {
    char *members[CRL_ETCD_MAX_MEMBERS];
    size_t n, cur;
    unsigned timeout_ms;
    CURL *curl;
};

int crl_etcd_open(const char *members, unsigned timeout_ms, struct crl_etcd **out,
                  struct crl_err *err)
{
    struct crl_etcd *e = calloc(1, sizeof(*e));
    if (!e)
        return crl_err_sys(err, ENOMEM, "etcd client");
    e->timeout_ms = timeout_ms;
    const char *p = members;
    while (p && *p) {
        size_t len = strcspn(p, ",");
        if (len) {
            if (e->n == CRL_ETCD_MAX_MEMBERS || len < 8 || len > 255 ||
                strncmp(p, "http://", 7) != 0) {
                crl_err_set(err, CRL_E_INVALID,
                            "etcd members: '%.*s' is not an http://HOST:PORT (at most %d of them)",
                            (int)(len > 255 ? 255 : len), p, CRL_ETCD_MAX_MEMBERS);
                crl_etcd_close(e);
                return -1;
            }
            while (len && p[len - 1] == '/')
                len--;
            e->members[e->n++] = strndup(p, len);
        }
        p += len + (p[len] == ',');
    }
    if (!e->n) {
        crl_etcd_close(e);
        return crl_err_set(err, CRL_E_INVALID, "etcd members: none given");
    }
    if (!(e->curl = curl_easy_init())) {
        crl_etcd_close(e);
        return crl_err_set(err, CRL_E_INTERNAL, "curl_easy_init");
    }
    *out = e;
    return 0;
}

void crl_etcd_close(struct crl_etcd *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->n; i++)
        free(e->members[i]);
    if (e->curl)
        curl_easy_cleanup(e->curl);
    free(e);
}

/* ---- encoding ---- */

static json_t *b64(const void *data, size_t len)
{
    size_t n;
    char *s = crl_base64_encode(data, len, &n);
    json_t *j = s ? json_stringn(s, n) : NULL;
    free(s);
    return j;
}

/* etcd's prefix range: the key with its last byte that is not 0xff
 * incremented, and what follows dropped ("\0": every key). */
static json_t *range_end(const char *prefix)
{
    size_t n = strlen(prefix);
    char *end = strdup(prefix);
    if (!end)
        return NULL;
    while (n && (unsigned char)end[n - 1] == 0xff)
        n--;
    json_t *j;
    if (!n) {
        j = b64("", 1);
    } else {
        end[n - 1]++;
        j = b64(end, n);
    }
    free(end);
    return j;
}

/* An int64 the gateway sends as a string (or a number, or leaves out: 0). */
static int64_t i64(json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v);
    const char *s = json_string_value(v);
    return s ? strtoll(s, NULL, 10) : 0;
}

static int decode(json_t *v, char **out, size_t *len)
{
    const char *s = json_string_value(v);
    if (!s) {
        *out = strdup("");
        *len = 0;
        return *out ? 0 : -1;
    }
    return crl_base64_decode(s, json_string_length(v), out, len);
}

static int kv_from(json_t *j, struct crl_etcd_kv *kv)
{
    size_t klen;
    memset(kv, 0, sizeof(*kv));
    if (decode(json_object_get(j, "key"), &kv->key, &klen) < 0 ||
        decode(json_object_get(j, "value"), &kv->value, &kv->value_len) < 0)
        return -1;
    kv->mod_revision = i64(json_object_get(j, "mod_revision"));
    kv->lease = i64(json_object_get(j, "lease"));
    return 0;
}

void crl_etcd_kvs_free(struct crl_etcd_kv *kvs, size_t n)
{
    for (size_t i = 0; kvs && i < n; i++) {
        free(kvs[i].key);
        free(kvs[i].value);
    }
    free(kvs);
}

/* ---- one request ---- */

/* POST body (taken) to path on the current member, the next ones on a
 * failure to reach it: its JSON answer in *resp. */
static int call(struct crl_etcd *e, const char *path, json_t *body, json_t **resp,
                struct crl_err *err)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return crl_err_sys(err, ENOMEM, "etcd %s", path);
    int rc = -1;
    for (size_t tries = 0; tries < e->n; tries++) {
        const char *m = e->members[e->cur];
        char url[320];
        snprintf(url, sizeof(url), "%s%s", m, path);
        struct crl_buf out;
        crl_buf_init(&out, 4u << 20);
        curl_easy_reset(e->curl);
        curl_easy_setopt(e->curl, CURLOPT_URL, url);
        curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
        curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
        curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, crl_curl_gather);
        curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, &out);
        CURLcode c = curl_easy_perform(e->curl);
        long status = 0;
        curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
        if (c == CURLE_OK && status >= 200 && status < 500) {
            json_error_t je;
            json_t *j = json_loadb(out.data ? out.data : "", out.len, 0, &je);
            crl_buf_free(&out);
            if (!j) {
                crl_err_set(err, CRL_E_INTERNAL, "etcd %s at %s: not JSON (%s)", path, m, je.text);
                break;
            }
            if (status != 200) {
                const char *msg = json_string_value(json_object_get(j, "error"));
                if (!msg)
                    msg = json_string_value(json_object_get(j, "message"));
                crl_err_set(err, CRL_E_INTERNAL, "etcd %s at %s: %ld %s", path, m, status,
                            msg ? msg : "");
                json_decref(j);
                break;
            }
            *resp = j;
            rc = 0;
            break;
        }
        crl_buf_free(&out);
        crl_err_set(err, CRL_E_UNAVAILABLE, "etcd %s at %s: %s", path, m,
                    c != CURLE_OK ? curl_easy_strerror(c) : "a server error");
        e->cur = (e->cur + 1) % e->n; /* the next member */
    }
    free(text);
    return rc;
}

/* ---- the key space ---- */

/* A key, or every key under it as a prefix: a range or deleterange's. */
static json_t *range_req(const char *key, bool prefix)
{
    json_t *req = json_object();
    json_object_set_new(req, "key", b64(key, strlen(key)));
    if (prefix)
        json_object_set_new(req, "range_end", range_end(key));
    return req;
}

int crl_etcd_get(struct crl_etcd *e, const char *key, bool prefix, struct crl_etcd_kv **kvs,
                 size_t *n, int64_t *revision, struct crl_err *err)
{
    *kvs = NULL;
    *n = 0;
    json_t *resp;
    if (call(e, "/v3/kv/range", range_req(key, prefix), &resp, err) < 0)
        return -1;
    json_t *a = json_object_get(resp, "kvs");
    size_t count = json_array_size(a);
    *kvs = calloc(count ? count : 1, sizeof(**kvs));
    *n = 0;
    if (revision)
        *revision = i64(json_object_get(json_object_get(resp, "header"), "revision"));
    for (size_t i = 0; *kvs && i < count; i++) {
        if (kv_from(json_array_get(a, i), &(*kvs)[i]) < 0) {
            crl_etcd_kvs_free(*kvs, i + 1);
            *kvs = NULL;
            break;
        }
        (*n)++;
    }
    json_decref(resp);
    if (!*kvs)
        return crl_err_set(err, CRL_E_INTERNAL, "etcd range %s: a key or value not base64", key);
    return 0;
}

static json_t *put_req(const char *key, const void *value, size_t len, int64_t lease)
{
    json_t *req = json_object();
    json_object_set_new(req, "key", b64(key, strlen(key)));
    json_object_set_new(req, "value", b64(value, len));
    if (lease) {
        char l[24];
        snprintf(l, sizeof(l), "%" PRId64, lease);
        json_object_set_new(req, "lease", json_string(l));
    }
    return req;
}

int crl_etcd_put(struct crl_etcd *e, const char *key, const void *value, size_t len, int64_t lease,
                 struct crl_err *err)
{
    json_t *resp;
    if (call(e, "/v3/kv/put", put_req(key, value, len, lease), &resp, err) < 0)
        return -1;
    json_decref(resp);
    return 0;
}

int crl_etcd_create(struct crl_etcd *e, const char *key, const void *value, size_t len,
                    int64_t lease, struct crl_err *err)
{
    json_t *req =
        json_pack("{s:[{s:o, s:s, s:s, s:s}], s:[{s:o}]}", "compare", "key", b64(key, strlen(key)),
                  "target", "CREATE", "result", "EQUAL", "create_revision", "0", "success",
                  "request_put", put_req(key, value, len, lease));
    json_t *resp;
    if (call(e, "/v3/kv/txn", req, &resp, err) < 0)
        return -1;
    int r = json_is_true(json_object_get(resp, "succeeded")) ? 1 : 0;
    json_decref(resp);
    return r;
}

long crl_etcd_delete(struct crl_etcd *e, const char *key, bool prefix, struct crl_err *err)
{
    json_t *resp;
    if (call(e, "/v3/kv/deleterange", range_req(key, prefix), &resp, err) < 0)
        return -1;
    long n = (long)i64(json_object_get(resp, "deleted"));
    json_decref(resp);
    return n;
}

/* ---- leases ---- */

static json_t *id_req(const char *name, int64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%" PRId64, v);
    return json_pack("{s:s}", name, s);
}

int crl_etcd_lease_grant(struct crl_etcd *e, unsigned ttl_s, int64_t *id, struct crl_err *err)
{
    json_t *resp;
    if (call(e, "/v3/lease/grant", id_req("TTL", ttl_s), &resp, err) < 0)
        return -1;
    *id = i64(json_object_get(resp, "ID"));
    const char *why = json_string_value(json_object_get(resp, "error"));
    json_decref(resp);
    if (!*id)
        return crl_err_set(err, CRL_E_INTERNAL, "etcd lease grant: no lease (%s)",
                           why ? why : "no ID in the answer");
    return 0;
}

int crl_etcd_lease_keepalive(struct crl_etcd *e, int64_t id, int64_t *ttl, struct crl_err *err)
{
    json_t *resp;
    if (call(e, "/v3/lease/keepalive", id_req("ID", id), &resp, err) < 0)
        return -1;
    /* a stream's answer: {"result": {"ID", "TTL"}}; a lease gone has no TTL */
    json_t *r = json_object_get(resp, "result");
    *ttl = i64(json_object_get(r ? r : resp, "TTL"));
    json_decref(resp);
    return 0;
}

int crl_etcd_lease_revoke(struct crl_etcd *e, int64_t id, struct crl_err *err)
{
    json_t *resp;
    if (call(e, "/v3/lease/revoke", id_req("ID", id), &resp, err) < 0)
        return -1;
    json_decref(resp);
    return 0;
}

/* ---- watches ---- */

struct watch {
    struct crl_buf line;
    crl_etcd_watch_cb cb;
    void *ctx;
    volatile bool *stop;
    bool ended; /* cb asked to end */
    bool bad;   /* the member sent what is not a watch's answer */
    char why[160];
};

static int watch_line(struct watch *w, const char *s, size_t n)
{
    json_t *j = json_loadb(s, n, 0, NULL);
    json_t *r = json_object_get(j, "result");
    if (!r) {
        const char *msg =
            json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        snprintf(w->why, sizeof(w->why), "the watch ended: %s", msg ? msg : "not a watch's answer");
        json_decref(j);
        w->bad = true;
        return -1;
    }
    json_t *ev;
    size_t i;
    json_array_foreach(json_object_get(r, "events"), i, ev)
    {
        struct crl_etcd_kv kv;
        if (kv_from(json_object_get(ev, "kv"), &kv) < 0) {
            snprintf(w->why, sizeof(w->why), "a watch event's key or value is not base64");
            w->bad = true;
            json_decref(j);
            return -1;
        }
        const char *type = json_string_value(json_object_get(ev, "type"));
        int stop = w->cb(type && strcmp(type, "DELETE") == 0 ? CRL_ETCD_DELETE : CRL_ETCD_PUT, &kv,
                         w->ctx);
        free(kv.key);
        free(kv.value);
        if (stop) {
            w->ended = true;
            json_decref(j);
            return -1;
        }
    }
    json_decref(j);
    return 0;
}

static size_t watch_data(char *data, size_t size, size_t n, void *ctx)
{
    struct watch *w = ctx;
    size_t len = size * n;
    for (size_t i = 0; i < len; i++) {
        if (data[i] != '\n') {
            if (crl_buf_append(&w->line, data + i, 1) < 0)
                return 0;
            continue;
        }
        int r = w->line.len ? watch_line(w, w->line.data, w->line.len) : 0;
        crl_buf_consume(&w->line, w->line.len);
        if (r < 0)
            return 0; /* ends the transfer */
    }
    return len;
}

static int watch_progress(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    struct watch *w = ctx;
    return w->stop && *w->stop;
}

int crl_etcd_watch(struct crl_etcd *e, const char *prefix, int64_t from_revision,
                   crl_etcd_watch_cb cb, void *ctx, volatile bool *stop, struct crl_err *err)
{
    json_t *cr = json_object();
    json_object_set_new(cr, "key", b64(prefix, strlen(prefix)));
    json_object_set_new(cr, "range_end", range_end(prefix));
    if (from_revision) {
        char s[24];
        snprintf(s, sizeof(s), "%" PRId64, from_revision);
        json_object_set_new(cr, "start_revision", json_string(s));
    }
    json_t *req = json_pack("{s:o}", "create_request", cr);
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!text)
        return crl_err_sys(err, ENOMEM, "etcd watch");
    struct watch w = {.cb = cb, .ctx = ctx, .stop = stop};
    crl_buf_init(&w.line, 16u << 20);
    const char *m = e->members[e->cur];
    char url[320];
    snprintf(url, sizeof(url), "%s/v3/watch", m);
    curl_easy_reset(e->curl);
    curl_easy_setopt(e->curl, CURLOPT_URL, url);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
    curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, watch_data);
    curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, &w);
    curl_easy_setopt(e->curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e->curl, CURLOPT_XFERINFOFUNCTION, watch_progress);
    curl_easy_setopt(e->curl, CURLOPT_XFERINFODATA, &w);
    CURLcode c = curl_easy_perform(e->curl);
    free(text);
    crl_buf_free(&w.line);
    if (w.ended || (stop && *stop))
        return 0;
    e->cur = (e->cur + 1) % e->n; /* the next watch asks another member */
    if (w.bad)
        return crl_err_set(err, CRL_E_INTERNAL, "etcd watch %s at %s: %s", prefix, m, w.why);
    return crl_err_set(err, CRL_E_UNAVAILABLE, "etcd watch %s at %s: %s", prefix, m,
                       c != CURLE_OK ? curl_easy_strerror(c) : "the stream ended");
}
