/* lib/core/services: the services list of a spec, its errors (each names
 * the field), the lookups by name and by address, route matching and the
 * JSON round trip (docs/api.md, "Services"). */
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/services.h"
#include "../../lib/core/spec.h"
#include "tap.h"

static int parse(const char *text, struct crl_services *s, struct crl_err *e)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    if (!j)
        bail_out(text);
    int r = crl_services_from_json(j, s, e);
    json_decref(j);
    return r;
}

static void bad(const char *text, const char *words)
{
    struct crl_services s;
    struct crl_err e = CRL_ERR_INIT;
    int r = parse(text, &s, &e);
    if (!ok(r < 0 && e.code == CRL_E_INVALID && strstr(e.msg, words), "refused: %s", words))
        diag("%s -> %s", text, e.msg);
    if (r == 0)
        crl_services_free(&s);
}

static void test_errors(void)
{
    bad("{}", "services must be an array");
    bad("[1]", "services[0] must be an object");
    bad("[{\"routes\": []}]", "services[0].name is missing");
    bad("[{\"name\": \"a..b\", \"routes\": []}]", "services[0].name 'a..b' is not a host name");
    bad("[{\"name\": \"shop\", \"routes\": [], \"color\": 1}]",
        "unknown field 'services[0].color'");
    bad("[{\"name\": \"shop\", \"routes\": []}, {\"name\": \"Shop.\", \"routes\": []}]",
        "services[1].name 'shop' is services[0]'s already");
    bad("[{\"name\": \"shop\"}]", "services[0].routes is missing");
    bad("[{\"name\": \"shop\", \"port\": 0, \"routes\": []}]", "services[0].port must be between");
    bad("[{\"name\": \"shop\", \"routes\": [{}]}]", "services[0].routes[0].path is missing");
    bad("[{\"name\": \"shop\", \"routes\": [{\"path\": \"/a b\"}]}]",
        "services[0].routes[0].path '/a b' must start with '/'");
    bad("[{\"name\": \"shop\", \"routes\": [{\"path\": \"/\", \"method\": \"G T\"}]}]",
        "services[0].routes[0].method 'G T' is not an HTTP method");
    bad("[{\"name\": \"shop\", \"routes\": [{\"path\": \"/\", \"status\": 99}]}]",
        "services[0].routes[0].status must be between 200 and 599");
    bad("[{\"name\": \"shop\", \"routes\": [{\"path\": \"/\", \"headers\": {\"X\": 1}}]}]",
        "services[0].routes[0].headers.X must be a string");
    bad("[{\"name\": \"shop\", \"routes\": [{\"path\": \"/\", \"headers\": {\"Content-Length\": "
        "\"1\"}}]}]",
        "Content-Length is the server's to set");
    bad("[{\"name\": \"db\", \"sandbox\": \"sb-1\"}]", "services[0].port is missing");
    bad("[{\"name\": \"db\", \"sandbox\": \"sb 1\", \"port\": 1}]", "'sb 1' is not a sandbox id");
    bad("[{\"name\": \"db\", \"sandbox\": \"sb-1\", \"port\": 1, \"routes\": []}]",
        "a sandbox service has no routes");
    bad("[{\"name\": \"db\", \"kind\": \"http-mock\", \"sandbox\": \"sb-1\", \"routes\": []}]",
        "an http-mock has no sandbox");

    /* A body over its limit, and bodies over theirs together. */
    size_t n = CRL_SERVICE_BODY_MAX + 1;
    char *big = malloc(n + 200);
    if (!big)
        bail_out("malloc");
    int off =
        snprintf(big, 200, "[{\"name\": \"shop\", \"routes\": [{\"path\": \"/\", \"body\": \"");
    memset(big + off, 'x', n);
    snprintf(big + off + n, 200, "\"}]}]");
    bad(big, "services[0].routes[0].body is over");
    free(big);
}

static void test_lookups(void)
{
    struct crl_services s;
    struct crl_err e = CRL_ERR_INIT;
    const char *text = "[{\"name\": \"Shop\", \"routes\": ["
                       "  {\"method\": \"GET\", \"path\": \"/items/*\", \"body\": {\"id\": 1}},"
                       "  {\"path\": \"/any\", \"status\": 204, \"delay_ms\": 5}]},"
                       " {\"name\": \"db.internal\", \"sandbox\": \"sb-h-1\", \"port\": 5432}]";
    if (!is_int(parse(text, &s, &e), 0, "a mock and a sandbox service"))
        diag("%s", e.msg);
    size_t i = 9;
    ok(crl_services_find(&s, "shop", &i) == &s.v[0] && i == 0, "found by name, lowercased");
    ok(crl_services_find(&s, "DB.Internal.", &i) == &s.v[1] && i == 1,
       "case and a trailing dot do not matter");
    ok(!crl_services_find(&s, "db", NULL) && !crl_services_find(&s, "x.shop", NULL),
       "nothing else is");
    ok(!crl_services_find(NULL, "shop", NULL), "a spec without services has none");
    is_int((int)s.v[0].port, 80, "a mock's port is 80 unless given");
    ok(s.v[1].kind == CRL_SERVICE_SANDBOX && !strcmp(s.v[1].sandbox, "sb-h-1"),
       "a service with a sandbox is a sandbox service");
    ok(crl_services_at(&s, CRL_SERVICE_NET + 1, 80) == &s.v[0], "the first at .1, its port");
    ok(crl_services_at(&s, CRL_SERVICE_NET + 2, 5432) == &s.v[1], "the second at .2");
    ok(!crl_services_at(&s, CRL_SERVICE_NET + 1, 81) &&
           !crl_services_at(&s, CRL_SERVICE_NET + 3, 80) &&
           !crl_services_at(&s, CRL_SERVICE_NET, 80),
       "another port or address is none");

    size_t r = 9;
    ok(crl_mock_match(&s.v[0], "GET", "/items/7/parts", &r) == &s.v[0].routes[0] && r == 0,
       "'*' matches across '/'");
    ok(!crl_mock_match(&s.v[0], "POST", "/items/7", NULL) &&
           crl_mock_match(&s.v[0], "POST", "/any", &r) && r == 1,
       "a method must match, a route without one takes any");
    ok(!crl_mock_match(&s.v[0], "GET", "/items", NULL), "no route: none");
    ok(!crl_mock_match(&s.v[1], "GET", "/", NULL), "a sandbox service has no routes");
    ok(s.v[0].routes[0].json_body && !strcmp(s.v[0].routes[0].body, "{\"id\":1}"),
       "a JSON body is sent as its text");

    json_t *j = crl_services_to_json(&s);
    struct crl_services back;
    ok(j && crl_services_from_json(j, &back, &e) == 0, "the JSON parses back");
    json_t *j2 = crl_services_to_json(&back);
    ok(json_equal(j, j2), "into the same");
    json_decref(j);
    json_decref(j2);
    crl_services_free(&back);
    crl_services_free(&s);
}

static void test_spec(void)
{
    struct crl_spec spec;
    struct crl_err e = CRL_ERR_INIT;
    const char *text = "{\"services\": [{\"name\": \"shop\", \"routes\": [{\"path\": \"/\"}]}]}";
    ok(crl_spec_parse(text, strlen(text), &spec, &e) == 0 && spec.services && spec.services->n == 1,
       "a spec holds its services");
    json_t *j = crl_spec_to_json(&spec);
    ok(json_array_size(json_object_get(j, "services")) == 1, "and reports them");
    json_decref(j);
    crl_spec_free(&spec);
    text = "{\"services\": []}";
    ok(crl_spec_parse(text, strlen(text), &spec, &e) == 0 && !spec.services,
       "an empty list is none");
    crl_spec_free(&spec);
    text = "{\"services\": [{\"name\": \"x\"}]}";
    ok(crl_spec_parse(text, strlen(text), &spec, &e) < 0 && strstr(e.msg, "services[0].routes"),
       "a spec with a bad service is refused, the field named");
}

int main(void)
{
    TAP_RUN(test_errors, 10);
    TAP_RUN(test_lookups, 10);
    TAP_RUN(test_spec, 10);
    return done_testing();
}
