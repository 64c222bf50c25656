/* etcd v3 through its JSON gateway (/v3/..., etcd 3.4 as Debian packages
 * it), over libcurl and jansson: the cluster mode's only way to etcd.
 *
 * A client holds the members' URLs and talks to one at a time; a request
 * that cannot reach it (connection refused, timeout, a 5xx) moves to the
 * next member and tries again, once round all of them.  Keys and values
 * are bytes (base64 on the wire, as the gateway wants).  Every call is
 * synchronous, bounded by the client's timeout: corrald makes them on a
 * worker thread, never on its loop.  A client is one thread's. */
#ifndef CRL_CLUSTER_ETCD_H
#define CRL_CLUSTER_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

#define CRL_ETCD_MAX_MEMBERS 16

struct crl_etcd;

/* `members`: "http://127.0.0.1:2379,http://..." (1 to 16, http only). */
int crl_etcd_open(const char *members, unsigned timeout_ms, struct crl_etcd **out,
                  struct crl_err *err);
void crl_etcd_close(struct crl_etcd *e);

struct crl_etcd_kv {
    char *key, *value; /* NUL-terminated copies (a value may hold NULs: value_len) */
    size_t value_len;
    int64_t mod_revision, lease;
};

/* A key's value, or every key under a prefix: *kvs (n of them, freed with
 * crl_etcd_kvs_free), and the store's revision then. */
int crl_etcd_get(struct crl_etcd *e, const char *key, bool prefix, struct crl_etcd_kv **kvs,
                 size_t *n, int64_t *revision, struct crl_err *err);
void crl_etcd_kvs_free(struct crl_etcd_kv *kvs, size_t n);
/* Put (under a lease, 0 for none). */
int crl_etcd_put(struct crl_etcd *e, const char *key, const void *value, size_t len, int64_t lease,
                 struct crl_err *err);
/* Put only if the key does not exist (a transaction): 1 if put, 0 if it
 * existed. */
int crl_etcd_create(struct crl_etcd *e, const char *key, const void *value, size_t len,
                    int64_t lease, struct crl_err *err);
/* Delete a key, or every key under a prefix: how many went. */
long crl_etcd_delete(struct crl_etcd *e, const char *key, bool prefix, struct crl_err *err);

/* Leases: grant (ttl seconds: *id), keep alive once (*ttl: what is left,
 * 0 when the lease is gone), revoke. */
int crl_etcd_lease_grant(struct crl_etcd *e, unsigned ttl_s, int64_t *id, struct crl_err *err);
int crl_etcd_lease_keepalive(struct crl_etcd *e, int64_t id, int64_t *ttl, struct crl_err *err);
int crl_etcd_lease_revoke(struct crl_etcd *e, int64_t id, struct crl_err *err);

/* Watch a prefix from a revision (0: now): each event to `cb` (put or
 * delete, the key, its value) until cb returns nonzero or `stop` is set
 * (checked at least every second), or the member fails (-1 with *err: the
 * caller watches again from the last revision it saw). */
enum crl_etcd_event { CRL_ETCD_PUT, CRL_ETCD_DELETE };
typedef int (*crl_etcd_watch_cb)(enum crl_etcd_event ev, const struct crl_etcd_kv *kv, void *ctx);
int crl_etcd_watch(struct crl_etcd *e, const char *prefix, int64_t from_revision,
                   crl_etcd_watch_cb cb, void *ctx, volatile bool *stop, struct crl_err *err);

#endif
