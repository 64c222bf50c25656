/* Idempotency keys of creates (idempotency.h): a hash table of entries,
 * each a key, its request body's digest, and the sandbox it made (or
 * none yet: in flight), kept in creation order too, for expiry. */
#include "idempotency.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>

#include "../util/fdio.h"
#include "../util/sha256.h"

#define BUCKETS 4096

struct entry {
    struct entry *next;          /* in its bucket */
    struct entry *older, *newer; /* in creation order */
    char key[CRL_IDEM_KEY_MAX + 1];
    char digest[CRL_DIGEST_LEN + 1]; /* of the request body */
    char id[64];                     /* "": in flight */
    double at;
};

struct crl_idem {
    struct entry *buckets[BUCKETS];
    struct entry *oldest, *newest;
    size_t n;
};

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h % BUCKETS;
}

struct crl_idem *crl_idem_new(void)
{
    return calloc(1, sizeof(struct crl_idem));
}

static void unlink_entry(struct crl_idem *t, struct entry *e)
{
    struct entry **p = &t->buckets[hash(e->key)];
    while (*p && *p != e)
        p = &(*p)->next;
    if (*p)
        *p = e->next;
    if (e->older)
        e->older->newer = e->newer;
    else
        t->oldest = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else
        t->newest = e->older;
    t->n--;
    free(e);
}

void crl_idem_free(struct crl_idem *t)
{
    if (!t)
        return;
    while (t->oldest)
        unlink_entry(t, t->oldest);
    free(t);
}

static struct entry *find(struct crl_idem *t, const char *key)
{
    for (struct entry *e = t->buckets[hash(key)]; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/* Expired keys go, and the oldest done ones beyond the bound (a key in
 * flight stays: its create will end it). */
static void expire(struct crl_idem *t, double now)
{
    struct entry *e = t->oldest;
    while (e) {
        struct entry *newer = e->newer;
        bool old = now - e->at > CRL_IDEM_TTL_S;
        if (e->id[0] && (old || t->n > CRL_IDEM_MAX))
            unlink_entry(t, e);
        else if (!old && t->n <= CRL_IDEM_MAX)
            break;
        e = newer;
    }
}

static bool key_ok(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > CRL_IDEM_KEY_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (k[i] <= 0x20 || k[i] >= 0x7f)
            return false;
    return true;
}

/* A new entry, the newest (in flight until it has an id). */
static struct entry *insert(struct crl_idem *t, const char *key, const char *digest, double at)
{
    struct entry *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    snprintf(e->key, sizeof(e->key), "%s", key);
    snprintf(e->digest, sizeof(e->digest), "%s", digest);
    e->at = at;
    uint32_t b = hash(key);
    e->next = t->buckets[b];
    t->buckets[b] = e;
    e->older = t->newest;
    if (t->newest)
        t->newest->newer = e;
    else
        t->oldest = e;
    t->newest = e;
    t->n++;
    return e;
}

int crl_idem_begin(struct crl_idem *t, const char *key, const void *body, size_t len, char *id,
                   size_t cap, struct crl_err *err)
{
    if (!key_ok(key))
        return crl_err_set(err, CRL_E_INVALID,
                           "Idempotency-Key: 1 to %d printable ASCII characters without spaces",
                           CRL_IDEM_KEY_MAX);
    double now = crl_wall_s();
    expire(t, now);
    char digest[CRL_DIGEST_LEN + 1];
    crl_sha256_buf(body, len, digest);
    struct entry *e = find(t, key);
    if (e && strcmp(e->digest, digest) != 0)
        return crl_err_set(err, CRL_E_CONFLICT,
                           "Idempotency-Key %s was used for another request %.0f s ago: a key "
                           "names one create",
                           key, now - e->at);
    if (e && !e->id[0])
        return crl_err_set(err, CRL_E_CONFLICT,
                           "Idempotency-Key %s: its create is in progress (begun %.1f s ago)", key,
                           now - e->at);
    if (e) {
        snprintf(id, cap, "%s", e->id);
        return 0;
    }
    if (!insert(t, key, digest, now))
        return crl_err_sys(err, ENOMEM, "Idempotency-Key");
    return 1;
}

int crl_idem_get(struct crl_idem *t, const char *key, char *digest, double *at)
{
    struct entry *e = find(t, key);
    if (!e)
        return -1;
    memcpy(digest, e->digest, sizeof(e->digest));
    *at = e->at;
    return 0;
}

void crl_idem_restore(struct crl_idem *t, const char *key, const char *digest, double at,
                      const char *id)
{
    struct entry *e;
    if (!key || !digest || !id || !key_ok(key) || strlen(digest) != CRL_DIGEST_LEN ||
        find(t, key) || !(e = insert(t, key, digest, at)))
        return;
    snprintf(e->id, sizeof(e->id), "%s", id);
}

void crl_idem_end(struct crl_idem *t, const char *key, const char *id)
{
    struct entry *e = find(t, key);
    if (!e || e->id[0])
        return;
    if (!id) {
        unlink_entry(t, e);
        return;
    }
    snprintf(e->id, sizeof(e->id), "%s", id);
}
