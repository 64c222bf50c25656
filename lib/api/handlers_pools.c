/* /v1/pools: list, inspect, set and remove the host's warm pools. */
#include "handlers_pools.h"

#include <string.h>

#include "../core/pool.h"
#include "../util/cleanup.h"
#include "request.h"

void crl_h_pools_list(struct crl_req *r)
{
    static const char *const states[] = {"ready", "waiting", "filling", "failing", NULL};
    static const struct crl_list_spec list = {
        .items = "pools", .key = "name", .states = states, .no_labels = true};
    crl_req_list(r, crl_pools_json(r->api->host), &list);
}

void crl_h_pool_inspect(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_t *o = crl_pool_json(r->api->host, r->route.name, &err);
    if (o)
        crl_req_json(r, 200, o);
    else
        crl_req_error(r, &err);
}

/* min or max: a whole number from 0 to CRL_POOL_MAX_SIZE. */
static int size_field(json_t *body, const char *key, unsigned *out, struct crl_err *err)
{
    json_t *v = json_object_get(body, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > CRL_POOL_MAX_SIZE)
        return crl_err_set(err, CRL_E_INVALID, "%s is required, a whole number from 0 to %d", key,
                           CRL_POOL_MAX_SIZE);
    *out = (unsigned)json_integer_value(v);
    return 0;
}

void crl_h_pool_set(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *body = NULL, *template = NULL;
    unsigned min = 0, max = 0;
    json_t *out = NULL;
    const char *key;
    json_t *v;
    if (crl_json_load(r->body.data, r->body.len, &body, &err) < 0)
        goto fail;
    json_object_foreach(body, key, v)
    {
        if (strcmp(key, "template") != 0 && strcmp(key, "min") != 0 && strcmp(key, "max") != 0) {
            crl_err_set(&err, CRL_E_INVALID, "unknown field '%s' (template, min and max are)", key);
            goto fail;
        }
    }
    json_t *t = json_object_get(body, "template");
    if (t && !json_is_object(t)) {
        crl_err_set(&err, CRL_E_INVALID, "template must be an object: a create's body");
        goto fail;
    }
    if (size_field(body, "min", &min, &err) < 0 || size_field(body, "max", &max, &err) < 0)
        goto fail;
    template = t ? json_incref(t) : json_object();
    if (crl_pool_set(r->api->host, r->route.name, template, min, max, &out, &err) < 0)
        goto fail;
    crl_req_json(r, 200, out);
    return;
fail:
    crl_req_error(r, &err);
}

void crl_h_pool_remove(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_t *was = crl_pool_json(r->api->host, r->route.name, &err);
    if (!was || crl_pool_remove(r->api->host, r->route.name, &err) < 0) {
        json_decref(was);
        crl_req_error(r, &err);
    } else {
        crl_req_json(r, 200, was);
    }
}
