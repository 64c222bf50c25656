/* Idempotency keys of creates (lib/api/idempotency.h): a new key is in
 * flight until its create ends; a done one replays its sandbox for the same
 * body and refuses another; a failed create forgets its key; malformed keys
 * are refused. */
#include <stdio.h>
#include <string.h>

#include "../../lib/api/idempotency.h"
#include "tap.h"

static void test_keys(void)
{
    struct crl_idem *t = crl_idem_new();
    struct crl_err err = CRL_ERR_INIT;
    char id[64] = "";
    const char body[] = "{\"image\":\"busybox\"}";
    ok(crl_idem_begin(t, "k1", body, sizeof(body), id, sizeof(id), &err) == 1, "a new key");
    err = (struct crl_err)CRL_ERR_INIT;
    ok(crl_idem_begin(t, "k1", body, sizeof(body), id, sizeof(id), &err) < 0 &&
           err.code == CRL_E_CONFLICT && strstr(err.msg, "in progress"),
       "a key in flight: 409 (%s)", err.msg);
    crl_idem_end(t, "k1", "sb-a");
    ok(crl_idem_begin(t, "k1", body, sizeof(body), id, sizeof(id), &err) == 0 &&
           strcmp(id, "sb-a") == 0,
       "a done key replays its sandbox");
    err = (struct crl_err)CRL_ERR_INIT;
    ok(crl_idem_begin(t, "k1", "{}", 2, id, sizeof(id), &err) < 0 && err.code == CRL_E_CONFLICT &&
           strstr(err.msg, "another request"),
       "another body: 409 (%s)", err.msg);
    ok(crl_idem_begin(t, "k2", body, sizeof(body), id, sizeof(id), &err) == 1, "another key");
    crl_idem_end(t, "k2", NULL);
    ok(crl_idem_begin(t, "k2", body, sizeof(body), id, sizeof(id), &err) == 1,
       "a failed create forgot its key: it runs anew");
    crl_idem_end(t, "k2", "sb-b");
    crl_idem_end(t, "k2", "sb-c"); /* a second end changes nothing */
    ok(crl_idem_begin(t, "k2", body, sizeof(body), id, sizeof(id), &err) == 0 &&
           strcmp(id, "sb-b") == 0,
       "a key's sandbox is its first create's");
    char long_key[CRL_IDEM_KEY_MAX + 2];
    memset(long_key, 'x', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = 0;
    const char *bad[] = {"", "a b", "\x01", "caf\xc3\xa9", long_key};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err = (struct crl_err)CRL_ERR_INIT;
        ok(crl_idem_begin(t, bad[i], body, sizeof(body), id, sizeof(id), &err) < 0 &&
               err.code == CRL_E_INVALID && strstr(err.msg, "Idempotency-Key"),
           "malformed key %zu refused", i);
    }
    long_key[CRL_IDEM_KEY_MAX] = 0;
    ok(crl_idem_begin(t, long_key, body, sizeof(body), id, sizeof(id), &err) == 1,
       "a key of %d characters", CRL_IDEM_KEY_MAX);
    /* many keys: each found again */
    char k[32];
    for (int i = 0; i < 10000; i++) {
        snprintf(k, sizeof(k), "many-%d", i);
        crl_idem_begin(t, k, body, sizeof(body), id, sizeof(id), &err);
        snprintf(id, sizeof(id), "sb-%d", i);
        crl_idem_end(t, k, id);
    }
    int found = 0;
    for (int i = 0; i < 10000; i++) {
        snprintf(k, sizeof(k), "many-%d", i);
        char want[32];
        snprintf(want, sizeof(want), "sb-%d", i);
        found += crl_idem_begin(t, k, body, sizeof(body), id, sizeof(id), &err) == 0 &&
                 strcmp(id, want) == 0;
    }
    is_int(found, 10000, "10000 keys, each with its own sandbox");
    crl_idem_free(t);
}

int main(void)
{
    TAP_RUN(test_keys, 10);
    return done_testing();
}
