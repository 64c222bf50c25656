#include "services.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../util/buf.h"
#include "../util/cleanup.h"
#include "spec.h"

static bool id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            return false;
    return true;
}

static void route_free(struct crl_mock_route *r)
{
    free(r->path);
    free(r->body);
    json_decref(r->headers);
    json_decref(r->body_json);
}

void crl_services_free(struct crl_services *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        for (size_t j = 0; j < s->v[i].nroutes; j++)
            route_free(&s->v[i].routes[j]);
        free(s->v[i].routes);
    }
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

static int headers(json_t *v, const char *where, struct crl_mock_route *r, struct crl_err *err)
{
    if (!json_is_object(v))
        return crl_err_set(err, CRL_E_INVALID, "%s.headers must be an object, not %s", where,
                           crl_json_type_name(v));
    if (json_object_size(v) > 64)
        return crl_err_set(err, CRL_E_INVALID, "%s.headers holds more than 64 headers", where);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        if (!crl_http_token_ok(k) || strlen(k) > 256)
            return crl_err_set(err, CRL_E_INVALID, "%s.headers: '%.64s' is not a header name",
                               where, k);
        if (strcasecmp(k, "content-length") == 0 || strcasecmp(k, "transfer-encoding") == 0 ||
            strcasecmp(k, "connection") == 0)
            return crl_err_set(err, CRL_E_INVALID,
                               "%s.headers: %s is the server's to set, not a route's", where, k);
        const char *val;
        char name[300];
        snprintf(name, sizeof(name), "%s.headers.%s", where, k);
        if (crl_json_get_string(x, name, 8192, &val, err) < 0)
            return -1;
        if (!crl_http_value_ok(val))
            return crl_err_set(err, CRL_E_INVALID, "%s holds a control character", name);
    }
    r->headers = json_incref(v);
    return 0;
}

static int body(json_t *v, const char *where, struct crl_mock_route *r, size_t *total,
                struct crl_err *err)
{
    char *text = json_is_string(v) ? strndup(json_string_value(v), json_string_length(v))
                                   : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t len = json_is_string(v) ? json_string_length(v) : text ? strlen(text) : 0;
    if (!text)
        return crl_err_sys(err, ENOMEM, "%s.body", where);
    if (len > CRL_SERVICE_BODY_MAX || (*total += len) > CRL_SERVICE_BODIES_MAX) {
        free(text);
        return crl_err_set(
            err, CRL_E_INVALID,
            len > CRL_SERVICE_BODY_MAX ? "%s.body is over %u bytes"
                                       : "%s.body: the services' bodies are over %u bytes in all",
            where, len > CRL_SERVICE_BODY_MAX ? CRL_SERVICE_BODY_MAX : CRL_SERVICE_BODIES_MAX);
    }
    r->body = text;
    r->body_len = len;
    r->json_body = !json_is_string(v);
    r->body_json = json_incref(v);
    return 0;
}

static int route(json_t *v, const char *where, struct crl_mock_route *r, size_t *total,
                 struct crl_err *err)
{
    static const char *const keys[] = {"method", "path", "status", "headers", "body", "delay_ms"};
    memset(r, 0, sizeof(*r));
    r->status = 200;
    if (!json_is_object(v))
        return crl_err_set(err, CRL_E_INVALID, "%s must be an object, not %s", where,
                           crl_json_type_name(v));
    if (crl_json_check_keys(v, where, keys, CRL_ARRAY_SIZE(keys), err) < 0)
        return -1;
    char name[128];
    const char *s;
    json_t *f;
    if ((f = json_object_get(v, "method"))) {
        snprintf(name, sizeof(name), "%s.method", where);
        if (crl_json_get_string(f, name, sizeof(r->method) - 1, &s, err) < 0)
            return -1;
        if (strcmp(s, "*") != 0 && !crl_http_token_ok(s))
            return crl_err_set(err, CRL_E_INVALID, "%s '%s' is not an HTTP method (or \"*\")", name,
                               s);
        snprintf(r->method, sizeof(r->method), "%s", strcmp(s, "*") ? s : "");
    }
    snprintf(name, sizeof(name), "%s.path", where);
    if (!(f = json_object_get(v, "path")))
        return crl_err_set(err, CRL_E_INVALID, "%s is missing", name);
    if (crl_json_get_string(f, name, 2048, &s, err) < 0)
        return -1;
    if (s[0] != '/' || !crl_http_value_ok(s) || strchr(s, ' ') || strchr(s, '?'))
        return crl_err_set(err, CRL_E_INVALID,
                           "%s '%.64s' must start with '/' and hold no space, '?' or control "
                           "character",
                           name, s);
    if (!(r->path = strdup(s)))
        return crl_err_sys(err, ENOMEM, "%s", name);
    if ((f = json_object_get(v, "status"))) {
        snprintf(name, sizeof(name), "%s.status", where);
        if (crl_json_get_uint(f, name, 200, 599, &r->status, err) < 0)
            return -1;
    }
    if ((f = json_object_get(v, "delay_ms"))) {
        snprintf(name, sizeof(name), "%s.delay_ms", where);
        if (crl_json_get_uint(f, name, 0, CRL_SERVICE_DELAY_MAX_MS, &r->delay_ms, err) < 0)
            return -1;
    }
    if ((f = json_object_get(v, "headers")) && headers(f, where, r, err) < 0)
        return -1;
    if ((f = json_object_get(v, "body")) && body(f, where, r, total, err) < 0)
        return -1;
    return 0;
}

static int service(json_t *v, const char *where, struct crl_service *svc, size_t *total,
                   struct crl_err *err)
{
    static const char *const keys[] = {"name", "kind", "port", "routes", "sandbox"};
    if (!json_is_object(v))
        return crl_err_set(err, CRL_E_INVALID, "%s must be an object, not %s", where,
                           crl_json_type_name(v));
    if (crl_json_check_keys(v, where, keys, CRL_ARRAY_SIZE(keys), err) < 0)
        return -1;
    char name[96];
    const char *s, *why;
    json_t *f;
    snprintf(name, sizeof(name), "%s.name", where);
    if (!(f = json_object_get(v, "name")))
        return crl_err_set(err, CRL_E_INVALID, "%s is missing", name);
    if (crl_json_get_string(f, name, CRL_NET_NAME_MAX, &s, err) < 0)
        return -1;
    if (crl_net_name_norm(s, svc->name, &why) < 0)
        return crl_err_set(err, CRL_E_INVALID, "%s '%.64s' is not a host name: %s", name, s, why);
    json_t *sb = json_object_get(v, "sandbox");
    svc->kind = sb ? CRL_SERVICE_SANDBOX : CRL_SERVICE_MOCK;
    if ((f = json_object_get(v, "kind"))) {
        snprintf(name, sizeof(name), "%s.kind", where);
        if (crl_json_get_string(f, name, 16, &s, err) < 0)
            return -1;
        if (strcmp(s, "http-mock") != 0 && strcmp(s, "sandbox") != 0)
            return crl_err_set(err, CRL_E_INVALID,
                               "%s '%s' is unknown; expected http-mock or sandbox", name, s);
        svc->kind = s[0] == 'h' ? CRL_SERVICE_MOCK : CRL_SERVICE_SANDBOX;
    }
    svc->port = 80;
    if ((f = json_object_get(v, "port"))) {
        snprintf(name, sizeof(name), "%s.port", where);
        if (crl_json_get_uint(f, name, 1, 65535, &svc->port, err) < 0)
            return -1;
    }
    json_t *routes = json_object_get(v, "routes");
    if (svc->kind == CRL_SERVICE_SANDBOX) {
        if (routes)
            return crl_err_set(err, CRL_E_INVALID, "%s: a sandbox service has no routes", where);
        snprintf(name, sizeof(name), "%s.sandbox", where);
        if (!sb)
            return crl_err_set(err, CRL_E_INVALID, "%s is missing", name);
        if (crl_json_get_string(sb, name, sizeof(svc->sandbox) - 1, &s, err) < 0)
            return -1;
        if (!id_ok(s))
            return crl_err_set(err, CRL_E_INVALID, "%s '%.64s' is not a sandbox id", name, s);
        if (!json_object_get(v, "port"))
            return crl_err_set(err, CRL_E_INVALID, "%s.port is missing: the sandbox's port", where);
        snprintf(svc->sandbox, sizeof(svc->sandbox), "%s", s);
        return 0;
    }
    if (sb)
        return crl_err_set(err, CRL_E_INVALID, "%s: an http-mock has no sandbox", where);
    snprintf(name, sizeof(name), "%s.routes", where);
    if (!routes)
        return crl_err_set(err, CRL_E_INVALID, "%s is missing", name);
    if (!json_is_array(routes))
        return crl_err_set(err, CRL_E_INVALID, "%s must be an array, not %s", name,
                           crl_json_type_name(routes));
    size_t n = json_array_size(routes);
    if (n > CRL_SERVICE_ROUTES_MAX)
        return crl_err_set(err, CRL_E_INVALID, "%s holds more than %u routes", name,
                           CRL_SERVICE_ROUTES_MAX);
    if (n && !(svc->routes = calloc(n, sizeof(*svc->routes))))
        return crl_err_sys(err, ENOMEM, "%s", name);
    for (size_t i = 0; i < n; i++) {
        char rw[112];
        snprintf(rw, sizeof(rw), "%s[%zu]", name, i);
        int rc = route(json_array_get(routes, i), rw, &svc->routes[i], total, err);
        svc->nroutes = i + 1; /* freed with the list, whole or not */
        if (rc < 0)
            return -1;
    }
    return 0;
}

int crl_services_from_json(json_t *v, struct crl_services *out, struct crl_err *err)
{
    memset(out, 0, sizeof(*out));
    if (!json_is_array(v))
        return crl_err_set(err, CRL_E_INVALID, "services must be an array, not %s",
                           crl_json_type_name(v));
    size_t n = json_array_size(v);
    if (n > CRL_SERVICES_MAX)
        return crl_err_set(err, CRL_E_INVALID, "services holds more than %u services",
                           CRL_SERVICES_MAX);
    if (n && !(out->v = calloc(n, sizeof(*out->v))))
        return crl_err_sys(err, ENOMEM, "services");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        char where[32];
        snprintf(where, sizeof(where), "services[%zu]", i);
        out->n = i + 1;
        if (service(json_array_get(v, i), where, &out->v[i], &total, err) < 0)
            goto fail;
        for (size_t j = 0; j < i; j++)
            if (strcmp(out->v[j].name, out->v[i].name) == 0) {
                crl_err_set(err, CRL_E_INVALID, "%s.name '%s' is services[%zu]'s already", where,
                            out->v[i].name, j);
                goto fail;
            }
    }
    return 0;
fail:
    crl_services_free(out);
    return -1;
}

json_t *crl_services_to_json(const struct crl_services *s)
{
    json_t *a = json_array();
    for (size_t i = 0; a && s && i < s->n; i++) {
        const struct crl_service *svc = &s->v[i];
        json_t *o;
        if (svc->kind == CRL_SERVICE_SANDBOX) {
            o = json_pack("{s:s, s:s, s:s, s:i}", "name", svc->name, "kind", "sandbox", "sandbox",
                          svc->sandbox, "port", (json_int_t)svc->port);
        } else {
            json_t *routes = json_array();
            for (size_t j = 0; routes && j < svc->nroutes; j++) {
                const struct crl_mock_route *r = &svc->routes[j];
                json_t *ro = json_pack("{s:s, s:s, s:i, s:i}", "method",
                                       r->method[0] ? r->method : "*", "path", r->path, "status",
                                       (json_int_t)r->status, "delay_ms", (json_int_t)r->delay_ms);
                if (ro && r->headers)
                    json_object_set(ro, "headers", r->headers);
                if (ro && r->body_json)
                    json_object_set(ro, "body", r->body_json);
                json_array_append_new(routes, ro);
            }
            o = json_pack("{s:s, s:s, s:i, s:o}", "name", svc->name, "kind", "http-mock", "port",
                          (json_int_t)svc->port, "routes", routes);
        }
        json_array_append_new(a, o);
    }
    return a;
}

const struct crl_service *crl_services_find(const struct crl_services *s, const char *name,
                                            size_t *index)
{
    char norm[CRL_NET_NAME_MAX + 1];
    const char *why;
    if (!s || crl_net_name_norm(name, norm, &why) < 0)
        return NULL;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i].name, norm) == 0) {
            if (index)
                *index = i;
            return &s->v[i];
        }
    return NULL;
}

const struct crl_service *crl_services_at(const struct crl_services *s, uint32_t addr,
                                          unsigned port)
{
    if (!s || addr <= CRL_SERVICE_NET || addr - CRL_SERVICE_NET > s->n)
        return NULL;
    const struct crl_service *svc = &s->v[addr - CRL_SERVICE_NET - 1];
    return svc->port == port ? svc : NULL;
}

const struct crl_mock_route *crl_mock_match(const struct crl_service *svc, const char *method,
                                            const char *path, size_t *index)
{
    for (size_t i = 0; svc->kind == CRL_SERVICE_MOCK && i < svc->nroutes; i++) {
        const struct crl_mock_route *r = &svc->routes[i];
        if ((!r->method[0] || strcmp(r->method, method) == 0) && fnmatch(r->path, path, 0) == 0) {
            if (index)
                *index = i;
            return r;
        }
    }
    return NULL;
}
