/* /v1/volumes: list, create, inspect and remove named volumes. */
#include "handlers_volumes.h"

#include "../core/volume.h"
#include "../util/cleanup.h"
#include "request.h"

void crl_h_volumes_list(struct crl_req *r)
{
    static const struct crl_list_spec list = {.items = "volumes", .key = "name"};
    crl_req_list(r, json_pack("{s:o}", "volumes", crl_volumes_list(r->api->host->volumes)), &list);
}

void crl_h_volume_create(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *body = NULL;
    json_t *out = NULL;
    if (crl_json_load(r->body.data, r->body.len, &body, &err) < 0 ||
        crl_volume_create(r->api->host->volumes, body, &out, &err) < 0)
        crl_req_error(r, &err);
    else
        crl_req_json(r, 201, out);
}

void crl_h_volume_inspect(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_t *o = crl_volume_inspect(r->api->host->volumes, r->route.name, &err);
    if (o)
        crl_req_json(r, 200, o);
    else
        crl_req_error(r, &err);
}

void crl_h_volume_remove(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_t *was = crl_volume_inspect(r->api->host->volumes, r->route.name, &err);
    if (!was || crl_volume_remove(r->api->host->volumes, r->route.name, &err) < 0) {
        json_decref(was);
        crl_req_error(r, &err);
    } else {
        crl_req_json(r, 200, was);
    }
}
