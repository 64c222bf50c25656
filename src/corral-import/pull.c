/* corral-import --pull NAME: copy an image from another host of the
 * cluster (crl_store_pull()).  corrald writes on stdin which hosts to ask,
 * in order, and the token they share, as {"token": T, "hosts": [{"id",
 * "addr"}]} (the token is no argument, so that no `ps` shows it).  The
 * first host that has the image gives it; one that has not, cannot be
 * reached or sends something that fails a check is passed over, and the
 * error names what each host said. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "../../lib/cluster/peer.h"
#include "../../lib/util/buf.h"
#include "pull.h"

#define REQUEST_MAX (64u << 10)
#define RECORD_MAX (1u << 20)
#define STALL_S 15

struct source {
    const char *id, *addr, *token;
};

static int fetch(void *ctx, const char *digest, int fd, uint64_t max, struct crl_err *err)
{
    const struct source *src = ctx;
    char path[128];
    long status = 0;
    snprintf(path, sizeof(path), "/v1/blobs/sha256/%s", crl_digest_hex(digest));
    if (crl_peer_get(src->addr, src->token, path, NULL, fd, max, STALL_S, &status, err) < 0)
        return -1;
    if (status != 200)
        return crl_err_set(err, status == 404 ? CRL_E_NOT_FOUND : CRL_E_UNAVAILABLE,
                           "host %s answered %ld", src->id, status);
    return 0;
}

/* The other host's record of the image: 0, 1 when it has none. */
static int describe(const struct source *src, const char *name, json_t **out, struct crl_err *err)
{
    char path[CRL_IMAGE_NAME_MAX + 32];
    long status = 0;
    struct crl_buf b;
    crl_buf_init(&b, RECORD_MAX);
    snprintf(path, sizeof(path), "/v1/images/%s", name);
    int rc = crl_peer_get(src->addr, src->token, path, &b, -1, 0, STALL_S, &status, err);
    if (rc == 0 && status == 404)
        rc = 1;
    else if (rc == 0 && status != 200)
        rc = crl_err_set(err, CRL_E_UNAVAILABLE, "it answered %ld", status);
    if (rc == 0)
        *out =
            json_loadb(b.data ? b.data : "", b.len, 0, NULL); /* not in json_is_object(): a macro */
    if (rc == 0 && !json_is_object(*out))
        rc = crl_err_set(err, CRL_E_INVALID, "its record of the image is not a JSON object");
    if (rc != 0) {
        json_decref(*out);
        *out = NULL;
    }
    crl_buf_free(&b);
    return rc;
}

int crl_import_pull(struct crl_store *s, const char *name, const struct crl_import_limits *lim,
                    json_t **out, struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1];
    if (crl_store_name_canon(name, canon, err) < 0)
        return -1;
    json_error_t je;
    json_auto_t *req = json_loadf(stdin, 0, &je);
    json_t *hosts = json_object_get(req, "hosts");
    const char *token = json_string_value(json_object_get(req, "token"));
    if (!json_is_array(hosts))
        return crl_err_set(err, CRL_E_INVALID, "stdin: {\"hosts\": [...], \"token\": ...} (%s)",
                           req ? "no hosts" : je.text);
    struct crl_buf said;
    crl_buf_init(&said, 400);
    bool unreachable = false;
    size_t i;
    json_t *h;
    json_array_foreach(hosts, i, h)
    {
        struct source src = {json_string_value(json_object_get(h, "id")),
                             json_string_value(json_object_get(h, "addr")), token};
        if (!src.id || !src.addr)
            continue;
        struct crl_err e = CRL_ERR_INIT;
        json_t *remote = NULL;
        int rc = describe(&src, canon, &remote, &e);
        if (rc == 0) {
            rc = crl_store_pull(s, remote, canon, fetch, &src, lim, out, &e);
            json_decref(remote);
            if (rc == 0) {
                fprintf(stderr, "corral-import: %s pulled from host %s\n", canon, src.id);
                crl_buf_free(&said);
                return 0;
            }
        }
        unreachable |= rc < 0;
        crl_buf_printf(&said, "%s%s: %s", said.len ? "; " : "", src.id,
                       rc > 0 ? "not there" : e.msg);
    }
    crl_err_set(err, unreachable ? CRL_E_UNAVAILABLE : CRL_E_NOT_FOUND,
                "image %s is not here, and no other host of the cluster could give it (%.*s)",
                canon, (int)said.len, said.len ? said.data : "no other host is ready");
    crl_buf_free(&said);
    return -1;
}
