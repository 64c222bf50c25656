/* The etcd v3 JSON-gateway client (lib/cluster/etcd.h) against a real etcd
 * (Debian's etcd-server) started here on loopback ports of its own: keys,
 * prefixes, create-if-absent, deletes, leases (their keys go with them),
 * a watch, and a dead member skipped for a live one. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/cluster/etcd.h"
#include "tap.h"

static pid_t etcd_pid;
static char dir[] = "/tmp/corral-etcd-XXXXXX";
static char url[64];

static int start_etcd(void)
{
    if (access("/usr/bin/etcd", X_OK) < 0)
        return -1;
    if (!mkdtemp(dir))
        return -1;
    unsigned port = 23000 + (unsigned)getpid() % 20000;
    snprintf(url, sizeof(url), "http://127.0.0.1:%u", port);
    char peer[64], data[128], cluster[96];
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%u", port + 1);
    snprintf(cluster, sizeof(cluster), "default=%s", peer);
    snprintf(data, sizeof(data), "%s/data", dir);
    etcd_pid = fork();
    if (etcd_pid == 0) {
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        execl("/usr/bin/etcd", "etcd", "--data-dir", data, "--listen-client-urls", url,
              "--advertise-client-urls", url, "--listen-peer-urls", peer,
              "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster, "--name",
              "default", NULL);
        _exit(127);
    }
    return etcd_pid > 0 ? 0 : -1;
}

static void stop_etcd(void)
{
    if (etcd_pid > 0) {
        kill(etcd_pid, SIGKILL);
        waitpid(etcd_pid, NULL, 0);
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    (void)!system(cmd); /* style: allow (a test's temporary directory) */
}

static int watched_puts, watched_deletes;

static int on_event(enum crl_etcd_event ev, const struct crl_etcd_kv *kv, void *ctx)
{
    if (ev == CRL_ETCD_PUT)
        watched_puts++;
    else
        watched_deletes++;
    return strcmp(kv->key, "/w/end") == 0; /* the last one ends the watch */
}

static void *watcher(void *arg)
{
    struct crl_etcd *e;
    struct crl_err err = CRL_ERR_INIT;
    static int rc;
    rc = -1;
    if (crl_etcd_open(url, 2000, &e, &err) == 0) {
        rc = crl_etcd_watch(e, "/w/", 0, on_event, NULL, NULL, &err);
        crl_etcd_close(e);
    }
    return &rc;
}

static void test_etcd(void)
{
    struct crl_etcd *e;
    struct crl_err err = CRL_ERR_INIT;
    char members[160];
    /* a dead member first: the client moves on to the live one */
    snprintf(members, sizeof(members), "http://127.0.0.1:1,%s", url);
    ok(crl_etcd_open(members, 2000, &e, &err) == 0, "open (%s)", err.msg);
    int up = -1;
    for (int i = 0; i < 100 && up < 0; i++) {
        up = crl_etcd_put(e, "/a/1", "one", 3, 0, &err);
        if (up < 0)
            usleep(100000);
    }
    ok(up == 0, "put, past a dead member (%s)", err.msg);
    ok(crl_etcd_put(e, "/a/2", "t\0o", 3, 0, &err) == 0 &&
           crl_etcd_put(e, "/b", "x", 1, 0, &err) == 0,
       "puts");
    struct crl_etcd_kv *kvs;
    size_t n;
    int64_t rev;
    ok(crl_etcd_get(e, "/a/", true, &kvs, &n, &rev, &err) == 0 && n == 2 && rev > 0 &&
           strcmp(kvs[0].key, "/a/1") == 0 && strcmp(kvs[0].value, "one") == 0 &&
           kvs[1].value_len == 3 && memcmp(kvs[1].value, "t\0o", 3) == 0,
       "a prefix's keys and values, bytes kept");
    crl_etcd_kvs_free(kvs, n);
    ok(crl_etcd_get(e, "/none", false, &kvs, &n, NULL, &err) == 0 && n == 0, "a missing key");
    crl_etcd_kvs_free(kvs, n);
    ok(crl_etcd_create(e, "/c", "first", 5, 0, &err) == 1, "create: absent, put");
    ok(crl_etcd_create(e, "/c", "second", 6, 0, &err) == 0, "create: present, left");
    ok(crl_etcd_get(e, "/c", false, &kvs, &n, NULL, &err) == 0 && n == 1 &&
           strcmp(kvs[0].value, "first") == 0,
       "the first create's value stands");
    crl_etcd_kvs_free(kvs, n);
    ok(crl_etcd_delete(e, "/a/", true, &err) == 2, "a prefix deleted");
    int64_t lease = 0, ttl = 0;
    ok(crl_etcd_lease_grant(e, 30, &lease, &err) == 0 && lease, "lease granted (%s)", err.msg);
    ok(crl_etcd_put(e, "/l/k", "v", 1, lease, &err) == 0, "a put under the lease");
    ok(crl_etcd_lease_keepalive(e, lease, &ttl, &err) == 0 && ttl > 0 && ttl <= 30,
       "kept alive: %lld s left (%s)", (long long)ttl, err.msg);
    ok(crl_etcd_get(e, "/l/k", false, &kvs, &n, NULL, &err) == 0 && n == 1 && kvs[0].lease == lease,
       "the key says its lease");
    crl_etcd_kvs_free(kvs, n);
    ok(crl_etcd_lease_revoke(e, lease, &err) == 0, "revoked");
    ok(crl_etcd_get(e, "/l/k", false, &kvs, &n, NULL, &err) == 0 && n == 0, "its key went with it");
    crl_etcd_kvs_free(kvs, n);
    ok(crl_etcd_lease_keepalive(e, lease, &ttl, &err) == 0 && ttl == 0,
       "a revoked lease keeps no time");
    pthread_t th;
    pthread_create(&th, NULL, watcher, NULL);
    usleep(500000); /* the watch is set up */
    crl_etcd_put(e, "/w/x", "1", 1, 0, &err);
    crl_etcd_delete(e, "/w/x", false, &err);
    crl_etcd_put(e, "/w/end", "1", 1, 0, &err);
    void *rc;
    pthread_join(th, &rc);
    ok(*(int *)rc == 0 && watched_puts == 2 && watched_deletes == 1,
       "the watch saw 2 puts and a delete, then ended (%d, %d)", watched_puts, watched_deletes);
    crl_etcd_close(e);
    err = (struct crl_err)CRL_ERR_INIT;
    ok(crl_etcd_open("https://x:1", 100, &e, &err) < 0 && err.code == CRL_E_INVALID,
       "only http members (%s)", err.msg);
    ok(crl_etcd_open("http://127.0.0.1:1", 200, &e, &err) == 0 &&
           crl_etcd_put(e, "/k", "v", 1, 0, &err) < 0 && err.code == CRL_E_UNAVAILABLE,
       "no member up: unavailable (%s)", err.msg);
    crl_etcd_close(e);
}

int main(void)
{
    if (start_etcd() < 0)
        skip_all("no /usr/bin/etcd (apt-get install etcd-server)");
    TAP_RUN(test_etcd, 60);
    stop_etcd();
    return done_testing();
}
