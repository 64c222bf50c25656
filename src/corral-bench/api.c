#include "api.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../corral/cli.h"
#include "samples.h"

json_t *crl_bench_spec(const char *image, int memory_mb)
{
    json_t *spec = json_pack("{s:{s:s}}", "labels", "corral-bench", "1");
    if (spec && image)
        json_object_set_new(spec, "image", json_string(image));
    if (spec && memory_mb > 0)
        json_object_set_new(spec, "resources", json_pack("{s:i}", "memory_mb", memory_mb));
    return spec;
}

int crl_bench_host(struct crl_client *c, char *host_id, size_t cap, json_t **out,
                   struct crl_err *err)
{
    json_auto_t *h = NULL;
    if (crl_client_request(c, "GET", "/v1/host", NULL, &h, NULL, err) < 0)
        return -1;
    snprintf(host_id, cap, "%s", crl_cli_str(h, "host_id", "?"));
    if (out)
        *out = steal_pointer(&h);
    return 0;
}

int crl_bench_exec(struct crl_client *c, const char *id, json_t *req, double *ms, json_t **out,
                   struct crl_err *err)
{
    json_auto_t *res = NULL;
    if (crl_bench_check_interrupted(err) < 0)
        return -1;
    unsigned long long t0 = crl_now_ns();
    if (crl_client_exec(c, id, req, &res, err) < 0)
        return crl_err_prefix(err, "exec in %s", id);
    *ms = crl_bench_ms_since(t0);
    if (crl_client_exit_status(res) != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "exec in %s ended with status %d (%s): %s", id,
                           crl_client_exit_status(res), crl_cli_str(res, "reason", "?"),
                           crl_cli_str(res, "stderr", ""));
    if (out)
        *out = steal_pointer(&res);
    return 0;
}

/* ---- sandboxes, tracked ---- */

/* Room for one more id: once made, a sandbox is always tracked. */
static int room(struct crl_bench_sandboxes *s, struct crl_err *err)
{
    if (s->n < s->cap)
        return 0;
    size_t cap = s->cap ? s->cap * 2 : 16;
    char(*p)[CRL_BENCH_ID_MAX] = realloc(s->ids, cap * sizeof(*p));
    if (!p)
        return crl_err_sys(err, ENOMEM, "allocating sandbox ids");
    s->ids = p;
    s->cap = cap;
    return 0;
}

int crl_bench_sandbox_create(struct crl_bench_sandboxes *s, json_t *spec, char *id, double *ms,
                             struct crl_err *err)
{
    json_auto_t *sb = NULL;
    if (crl_bench_check_interrupted(err) < 0 || room(s, err) < 0)
        return -1;
    unsigned long long t0 = crl_now_ns();
    if (crl_client_create(s->c, spec, &sb, err) < 0)
        return -1;
    if (ms)
        *ms = crl_bench_ms_since(t0);
    snprintf(s->ids[s->n], CRL_BENCH_ID_MAX, "%s", crl_cli_str(sb, "id", ""));
    if (id)
        snprintf(id, CRL_BENCH_ID_MAX, "%s", s->ids[s->n]);
    s->n++;
    return 0;
}

int crl_bench_sandbox_track(struct crl_bench_sandboxes *s, const char *id, struct crl_err *err)
{
    if (room(s, err) < 0) {
        crl_client_destroy(s->c, id, NULL, NULL);
        return -1;
    }
    snprintf(s->ids[s->n++], CRL_BENCH_ID_MAX, "%s", id);
    return 0;
}

static void forget(struct crl_bench_sandboxes *s, const char *id)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->ids[i], id) == 0) {
            memmove(s->ids[i], s->ids[i + 1], (s->n - i - 1) * sizeof(*s->ids));
            s->n--;
            return;
        }
}

int crl_bench_sandbox_destroy(struct crl_bench_sandboxes *s, char *id, struct crl_err *err)
{
    struct crl_err e = CRL_ERR_INIT;
    if (!id[0])
        return 0;
    if (crl_client_destroy(s->c, id, NULL, &e) < 0 && e.code != CRL_E_NOT_FOUND) {
        *err = e;
        return crl_err_prefix(err, "destroying %s", id);
    }
    forget(s, id);
    id[0] = 0;
    return 0;
}

int crl_bench_sandbox_destroy_last(struct crl_bench_sandboxes *s, struct crl_err *err)
{
    char id[CRL_BENCH_ID_MAX];
    snprintf(id, sizeof(id), "%s", s->n ? s->ids[s->n - 1] : "");
    return crl_bench_sandbox_destroy(s, id, err);
}

void crl_bench_sandboxes_clear(struct crl_bench_sandboxes *s)
{
    while (s->n > 0) {
        struct crl_err e = CRL_ERR_INIT;
        const char *id = s->ids[--s->n];
        if (crl_client_destroy(s->c, id, NULL, &e) < 0 && e.code != CRL_E_NOT_FOUND)
            fprintf(stderr, "corral: %s: could not destroy %s: %s\n", s->who, id, e.msg);
    }
    free(s->ids);
    s->ids = NULL;
    s->cap = 0;
}

/* ---- calls from threads ---- */

struct worker {
    const char *url;
    crl_bench_call_fn fn;
    void *ctx;
    size_t first, n;
    int rc;
    struct crl_err err;
};

static void *worker_main(void *p)
{
    struct worker *w = p;
    cleanup_client struct crl_client *c = NULL;
    w->rc = crl_client_open(w->url, NULL, &c, &w->err);
    for (size_t i = w->first; i < w->first + w->n && w->rc == 0; i++) {
        w->rc = crl_bench_check_interrupted(&w->err);
        if (w->rc == 0)
            w->rc = w->fn(c, w->ctx, i, &w->err);
    }
    return NULL;
}

int crl_bench_parallel(const char *url, int conc, size_t n, crl_bench_call_fn fn, void *ctx,
                       double *wall_s, struct crl_err *err)
{
    struct worker w[CRL_BENCH_MAX_CONC];
    pthread_t t[CRL_BENCH_MAX_CONC];
    size_t first = 0;
    if (conc < 1 || conc > CRL_BENCH_MAX_CONC)
        return crl_err_set(err, CRL_E_INTERNAL, "%d threads: at most %d", conc, CRL_BENCH_MAX_CONC);
    for (int i = 0; i < conc; i++) {
        size_t share = n / (size_t)conc + ((size_t)i < n % (size_t)conc ? 1 : 0);
        w[i] = (struct worker){.url = url, .fn = fn, .ctx = ctx, .first = first, .n = share};
        first += share;
    }
    unsigned long long t0 = crl_now_ns();
    int started = 0, rc = 0;
    for (; started < conc; started++) {
        int e = pthread_create(&t[started], NULL, worker_main, &w[started]);
        if (e != 0) {
            rc = crl_err_sys(err, e, "pthread_create");
            break;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    *wall_s = (double)(crl_now_ns() - t0) / 1e9;
    for (int i = 0; i < started && rc == 0; i++)
        if (w[i].rc < 0) {
            *err = w[i].err;
            rc = -1;
        }
    return rc;
}
