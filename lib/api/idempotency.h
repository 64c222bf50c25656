/* Idempotency-Key on a create (POST /v1/sandboxes): a client that retries
 * a create whose answer it lost (a timeout, a dropped connection, a
 * crashed proxy) sends the same key and gets the sandbox the first one
 * made, never a second.  Keys are the API's (one per daemon), kept 24
 * hours, the oldest forgotten beyond CRL_IDEM_MAX.
 *
 *   a new key         the create runs; its end records the sandbox's id
 *                     (a failed create forgets the key: a retry runs anew)
 *   a key that made   the same request body: that sandbox's JSON, 200,
 *   a sandbox         with Idempotent-Replayed: true; another body: 409
 *   a key in flight   409: the first create has not answered yet */
#ifndef CRL_API_IDEMPOTENCY_H
#define CRL_API_IDEMPOTENCY_H

#include <stddef.h>

#include "../util/err.h"

#define CRL_IDEM_KEY_MAX 128 /* printable ASCII, no spaces */
#define CRL_IDEM_MAX 65536   /* keys kept at once */
#define CRL_IDEM_TTL_S (24 * 3600)

struct crl_idem;

struct crl_idem *crl_idem_new(void);
void crl_idem_free(struct crl_idem *t);

/* A create that carries `key` with this body: 1 when it is new (it is now
 * in flight: end it with crl_idem_end), 0 with the id of the sandbox the
 * key made in id (at least 64 bytes), -1 with *err (the key malformed,
 * reused for another body, or in flight). */
int crl_idem_begin(struct crl_idem *t, const char *key, const void *body, size_t len, char *id,
                   size_t cap, struct crl_err *err);
/* The create of `key` ended: the sandbox it made, or NULL (it failed: the
 * key is forgotten). */
void crl_idem_end(struct crl_idem *t, const char *key, const char *id);
/* What the create of `key` sent (its body's digest, CRL_DIGEST_LEN + 1
 * bytes) and when: for its sandbox's record.  -1 if the key is unknown. */
int crl_idem_get(struct crl_idem *t, const char *key, char *digest, double *at);
/* A key a corrald before this one kept for the sandbox it made, which
 * this one adopted: a retry replays that sandbox, as before the restart.
 * Entries do not replace (a key known already stays as it is). */
void crl_idem_restore(struct crl_idem *t, const char *key, const char *digest, double at,
                      const char *id);

#endif
