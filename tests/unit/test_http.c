/* lib/api/router: the v1 routes, the bearer check that guards the TCP
 * listener, and the listen-address parser that decides whether the daemon
 * warns about a non-loopback listener. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "../../lib/api/router.h"
#include "tap.h"

struct route_case {
    const char *path;
    enum crl_endpoint ep;
    const char *id;
    const char *sub;
    const char *allow;
};

static void test_routes(void)
{
    static const struct route_case cases[] = {
        {"/healthz", CRL_EP_HEALTHZ, "", "", "GET"},
        {"/metrics", CRL_EP_METRICS, "", "", "GET"},
        {"/v1/host", CRL_EP_HOST, "", "", "GET"},
        {"/v1/hosts", CRL_EP_HOSTS, "", "", "GET"},
        {"/v1/hosts/", CRL_EP_HOSTS, "", "", "GET"},
        {"/v1/hosts/h1/drain", CRL_EP_HOST_DRAIN, "", "", "DELETE, POST"},
        {"/v1/pools", CRL_EP_POOLS, "", "", "GET"},
        {"/v1/pools/small", CRL_EP_POOL, "", "", "GET, DELETE, PUT"},
        {"/v1/images", CRL_EP_IMAGES, "", "", "GET, POST"},
        {"/v1/sandboxes", CRL_EP_SANDBOXES, "", "", "GET, POST"},
        {"/v1/sandboxes/", CRL_EP_SANDBOXES, "", "", "GET, POST"},
        {"/v1/sandboxes/sb-1a2b", CRL_EP_SANDBOX, "sb-1a2b", "", "GET, DELETE"},
        {"/v1/sandboxes/A_z.9-x", CRL_EP_SANDBOX, "A_z.9-x", "", "GET, DELETE"},
        {"/v1/sandboxes/sb-1/exec", CRL_EP_EXEC, "sb-1", "", "POST"},
        {"/v1/sandboxes/sb-1/files", CRL_EP_FILES, "sb-1", "", "GET, PUT"},
        {"/v1/sandboxes/sb-1/pause", CRL_EP_SANDBOX_ACTION, "sb-1", "pause", "POST"},
        {"/v1/sandboxes/sb-1/resume", CRL_EP_SANDBOX_ACTION, "sb-1", "resume", "POST"},
        {"/v1/sandboxes/sb-1/snapshot", CRL_EP_SANDBOX_ACTION, "sb-1", "snapshot", "POST"},
        {"/v1/sandboxes/sb-1/fork", CRL_EP_SANDBOX_ACTION, "sb-1", "fork", "POST"},
        {"/v1/sandboxes/sb-1/sessions", CRL_EP_SESSIONS, "sb-1", "", "GET, POST"},
        {"/v1/sandboxes/sb-1/sessions/ss-2", CRL_EP_SESSION, "sb-1", "ss-2", "DELETE"},
        {"/v1/sandboxes/sb-1/sessions/ss-2/run", CRL_EP_SESSION_RUN, "sb-1", "ss-2", "POST"},
        /* ids that look like endpoint names are ids */
        {"/v1/sandboxes/exec", CRL_EP_SANDBOX, "exec", "", "GET, DELETE"},
        {"/v1/sandboxes/sessions/sessions/run/run", CRL_EP_SESSION_RUN, "sessions", "run", "POST"},
        {"/v1/functions", CRL_EP_FUNCTIONS, "", "", "GET"},
        {"/v1/functions/", CRL_EP_FUNCTIONS, "", "", "GET"},
        {"/v1/functions/add", CRL_EP_FUNCTION, "", "", "GET"},
        {"/v1/functions/add_2-x/call", CRL_EP_FUNCTION_CALL, "", "", "POST"},
        {"/v1/functions/call/call", CRL_EP_FUNCTION_CALL, "", "", "POST"},
        {"/v1/trajectories", CRL_EP_TRAJECTORIES, "", "", "GET"},
        {"/v1/trajectories/", CRL_EP_TRAJECTORIES, "", "", "GET"},
        {"/v1/trajectories/t-1.a_b", CRL_EP_TRAJECTORY, "", "", "GET, DELETE"},
        {"/v1/trajectories/t-1/steps", CRL_EP_TRAJECTORY_STEPS, "", "", "GET"},
        {"/v1/trajectories/gc", CRL_EP_TRAJECTORY_GC, "", "", "GET, DELETE, POST"},
        {"/v1/trajectories/steps/steps", CRL_EP_TRAJECTORY_STEPS, "", "", "GET"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct route_case *c = &cases[i];
        struct crl_route r;
        bool m = crl_route_match(c->path, &r);
        ok(m && r.ep == c->ep && strcmp(r.id, c->id) == 0 && strcmp(r.sub, c->sub) == 0 &&
               r.allow && strcmp(r.allow, c->allow) == 0,
           "%s -> endpoint %d id '%s' sub '%s' allow '%s'", c->path, c->ep, c->id, c->sub,
           c->allow);
        if (m && r.ep != c->ep)
            diag("got endpoint %d id '%s' sub '%s'", r.ep, r.id, r.sub);
    }
}

static void test_routes_malformed(void)
{
    static const char *const bad[] = {
        "",
        "/",
        "healthz",
        "/healthz/",
        "/HEALTHZ",
        "/healthz?x=1",
        "/metricsx",
        "/v1",
        "/v1/",
        "/v1/hostsx",
        "/v1/hosts/h1",
        "/v1/hosts/h1/drainx",
        "/v1/hosts/../drain",
        "/v1/host/",
        "/v2/host",
        "//v1/host",
        "/v1//host",
        "/v1/./host",
        "/V1/host",
        "/v1/image",
        "/v1/sandboxesX",
        "/v1/sandboxes//",
        "/v1/sandboxes//exec",
        "/v1/sandboxes/a//exec",
        "/v1/sandboxes/a/",
        "/v1/sandboxes/a/exec/",
        "/v1/sandboxes/a/execute",
        "/v1/sandboxes/a/EXEC",
        "/v1/sandboxes/a/unknown",
        "/v1/sandboxes/a/pause/now",
        "/v1/sandboxes/a/files/etc/passwd",
        "/v1/sandboxes/a b",
        "/v1/sandboxes/a%2Fb",
        "/v1/sandboxes/a?x=1",
        "/v1/sandboxes/a\\b",
        "/v1/sandboxes/a\xc3\xa9",
        "/v1/sandboxes/a\n",
        "/v1/sandboxes/a:b",
        "/v1/sandboxes/a/sessions/",
        "/v1/sandboxes/a/sessions//run",
        "/v1/sandboxes/a/sessions/s/run/",
        "/v1/sandboxes/a/sessions/s/exec",
        "/v1/sandboxes/a/sessionsX",
        "/v1/sandboxes/a/sessions/s/",
        "/v1/sandboxes/a/sessions/s t",
        /* traversal must not reach another endpoint */
        "/v1/sandboxes/../host",
        "/v1/sandboxes/a/../../host",
        "/v1/sandboxes/../../../etc/passwd",
        "/v1/sandboxes/a/../b/exec",
        "/v1/sandboxes/a/sessions/../exec",
        "/v1/sandboxes/a/./exec",
        "/v1/sandboxes/a/sessions/s/../../exec",
        "/v1/functionsX",
        "/v1/functions//call",
        "/v1/functions/add/",
        "/v1/functions/add/call/",
        "/v1/functions/add/run",
        "/v1/functions/../host",
        "/v1/functions/./call",
        "/v1/functions/a b/call",
        "/v1/functions/a%2Fb/call",
        "/v1/trajectoriesX",
        "/v1/trajectories//steps",
        "/v1/trajectories/t/",
        "/v1/trajectories/t/steps/",
        "/v1/trajectories/t/log",
        "/v1/trajectories/../host",
        "/v1/trajectories/./steps",
        "/v1/trajectories/a b",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct crl_route r;
        bool m = crl_route_match(bad[i], &r);
        ok(!m, "'%s' is not a route", bad[i]);
        if (m)
            diag("matched endpoint %d id '%s' sub '%s'", r.ep, r.id, r.sub);
    }
}

static void test_route_dot_ids(void)
{
    struct crl_route r;
    ok(!crl_route_match("/v1/sandboxes/.", &r), "'.' is not a sandbox id");
    ok(!crl_route_match("/v1/sandboxes/..", &r), "'..' is not a sandbox id");
    ok(!crl_route_match("/v1/sandboxes/../exec", &r), "'..' is not an id before /exec");
    ok(!crl_route_match("/v1/sandboxes/a/sessions/..", &r), "'..' is not a session id");
    ok(crl_route_match("/v1/sandboxes/a.b/exec", &r) && strcmp(r.id, "a.b") == 0,
       "a dot inside an id is fine");
    ok(crl_route_match("/v1/functions/add/call", &r) && strcmp(r.name, "add") == 0,
       "a function's name is the route's name");
}

static void test_image_routes(void)
{
    static const struct {
        const char *path;
        enum crl_endpoint ep;
        const char *name;
        const char *allow;
    } good[] = {
        {"/v1/images/busybox", CRL_EP_IMAGE, "busybox", "GET, DELETE"},
        {"/v1/images/debian:12", CRL_EP_IMAGE, "debian:12", "GET, DELETE"},
        {"/v1/images/ghcr.io/org/img:1.0", CRL_EP_IMAGE, "ghcr.io/org/img:1.0", "GET, DELETE"},
        {"/v1/images/localhost:5000/a/b", CRL_EP_IMAGE, "localhost:5000/a/b", "GET, DELETE"},
        {"/v1/images/a@sha256:0123", CRL_EP_IMAGE, "a@sha256:0123", "GET, DELETE"},
        {"/v1/images/sha256:abcdef012345", CRL_EP_IMAGE, "sha256:abcdef012345", "GET, DELETE"},
        {"/v1/images/tag", CRL_EP_IMAGE_TAG, "tag", "GET, DELETE, POST"},
        {"/v1/images/gc", CRL_EP_IMAGE_GC, "gc", "GET, DELETE, POST"},
        {"/v1/images/tag:latest", CRL_EP_IMAGE, "tag:latest", "GET, DELETE"},
        {"/v1/images/x/tag", CRL_EP_IMAGE, "x/tag", "GET, DELETE"},
        {"/v1/blobs/sha256/0123abcd", CRL_EP_BLOB, "0123abcd", "GET"},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct crl_route r;
        bool m = crl_route_match(good[i].path, &r);
        ok(m && r.ep == good[i].ep && strcmp(r.name, good[i].name) == 0 &&
               strcmp(r.allow, good[i].allow) == 0,
           "%s -> endpoint %d name '%s'", good[i].path, good[i].ep, good[i].name);
    }
    static const char *const bad[] = {
        "/v1/images/",        "/v1/images//a",     "/v1/images/a/",   "/v1/images/a//b",
        "/v1/images/../host", "/v1/images/a/../b", "/v1/images/./a",  "/v1/images/a b",
        "/v1/images/a?x",     "/v1/images/a%2Fb",  "/v1/images/a\\b", "/v1/images/\xc3\xa9",
        "/v1/images/a\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct crl_route r;
        ok(!crl_route_match(bad[i], &r), "'%s' is not an image route", bad[i]);
    }
    char name[300], path[320];
    memset(name, 'n', sizeof(name));
    name[255] = 0;
    struct crl_route r;
    snprintf(path, sizeof(path), "/v1/images/%s", name);
    ok(crl_route_match(path, &r) && strcmp(r.name, name) == 0, "a 255-byte image name routes");
    name[255] = 'n';
    name[256] = 0;
    snprintf(path, sizeof(path), "/v1/images/%s", name);
    ok(!crl_route_match(path, &r), "a 256-byte image name does not");
}

static void test_route_id_length(void)
{
    char id63[64], id64[65], path[256];
    memset(id63, 'a', 63);
    id63[63] = 0;
    memset(id64, 'b', 64);
    id64[64] = 0;
    struct crl_route r;
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id63);
    ok(crl_route_match(path, &r) && r.ep == CRL_EP_EXEC && strcmp(r.id, id63) == 0,
       "a 63-character sandbox id (the most that fits) is taken whole");
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id64);
    ok(!crl_route_match(path, &r), "a 64-character sandbox id is refused, not truncated");
    snprintf(path, sizeof(path), "/v1/sandboxes/%s", id64);
    ok(!crl_route_match(path, &r), "a 64-character sandbox id is refused on its own too");
    snprintf(path, sizeof(path), "/v1/sandboxes/x/sessions/%s/run", id63);
    ok(crl_route_match(path, &r) && r.ep == CRL_EP_SESSION_RUN && strcmp(r.sub, id63) == 0,
       "a 63-character session id is taken whole");
    snprintf(path, sizeof(path), "/v1/sandboxes/x/sessions/%s", id64);
    ok(!crl_route_match(path, &r), "a 64-character session id is refused");
    char huge[4096];
    memset(huge, 'c', sizeof(huge) - 1);
    memcpy(huge, "/v1/sandboxes/", 14);
    huge[sizeof(huge) - 1] = 0;
    ok(!crl_route_match(huge, &r), "a 4 KB id is refused");

    ok(crl_route_match("/v1/sandboxes/sb-1/sessions/ss-1", &r), "a match fills the route");
    ok(!crl_route_match("/nope", &r) && r.ep == CRL_EP_NONE && r.id[0] == 0 && r.sub[0] == 0 &&
           r.allow == NULL,
       "a failed match leaves no stale endpoint, ids or allow list behind");
}

static void test_route_allows(void)
{
    struct crl_route r;
    crl_route_match("/v1/sandboxes", &r);
    ok(crl_route_allows(&r, "GET"), "GET /v1/sandboxes is allowed");
    ok(crl_route_allows(&r, "POST"), "POST /v1/sandboxes is allowed");
    ok(!crl_route_allows(&r, "DELETE"), "DELETE /v1/sandboxes is not");
    ok(!crl_route_allows(&r, "get"), "methods are case-sensitive");
    ok(!crl_route_allows(&r, "GE"), "a prefix of a method is not the method");
    ok(!crl_route_allows(&r, "POSTX"), "a method with a listed prefix is not listed");
    ok(!crl_route_allows(&r, "GET, POST"), "the whole list is not a method");
    ok(!crl_route_allows(&r, ""), "the empty method is not allowed");
    ok(!crl_route_allows(&r, "OST"), "a suffix of a method is not the method");
    crl_route_match("/v1/sandboxes/x/files", &r);
    ok(crl_route_allows(&r, "GET") && crl_route_allows(&r, "PUT") && !crl_route_allows(&r, "POST"),
       "files takes GET and PUT only");
    crl_route_match("/v1/sandboxes/x/exec", &r);
    ok(crl_route_allows(&r, "POST") && !crl_route_allows(&r, "GET"), "exec takes POST only");
    crl_route_match("/v1/sandboxes/x/sessions/s", &r);
    ok(crl_route_allows(&r, "DELETE") && !crl_route_allows(&r, "GET"),
       "a session takes DELETE only");
    crl_route_match("/v1/sandboxes/x", &r);
    ok(crl_route_allows(&r, "DELETE") && !crl_route_allows(&r, "POST"),
       "a sandbox takes GET and DELETE");
    crl_route_match("/healthz", &r);
    ok(crl_route_allows(&r, "GET") && !crl_route_allows(&r, "POST"), "healthz takes GET");
    crl_route_match("/nope", &r);
    ok(!crl_route_allows(&r, "GET"), "an unmatched route allows nothing");
}

static void test_bearer(void)
{
    const char *tok = "s3cr3t-T0ken";
    ok(crl_auth_bearer_ok("Bearer s3cr3t-T0ken", tok), "the right token is accepted");
    ok(!crl_auth_bearer_ok("Bearer s3cr3t-T0kem", tok), "a token off by its last byte is refused");
    ok(!crl_auth_bearer_ok("Bearer x3cr3t-T0ken", tok), "a token off by its first byte is refused");
    ok(!crl_auth_bearer_ok("Bearer s3cr3t-T0ke", tok), "a prefix of the token is refused");
    ok(!crl_auth_bearer_ok("Bearer s3cr3t-T0kenX", tok), "the token plus a byte is refused");
    ok(!crl_auth_bearer_ok("Bearer ", tok), "an empty token is refused");
    ok(!crl_auth_bearer_ok("Bearer", tok), "'Bearer' alone is refused");
    ok(!crl_auth_bearer_ok("s3cr3t-T0ken", tok), "the token without 'Bearer ' is refused");
    ok(!crl_auth_bearer_ok("Basic s3cr3t-T0ken", tok), "another scheme is refused");
    ok(!crl_auth_bearer_ok("Bearer  s3cr3t-T0ken", tok), "an extra space is part of the token");
    ok(!crl_auth_bearer_ok("Bearer s3cr3t-T0ken ", tok), "a trailing space is part of the token");
    ok(!crl_auth_bearer_ok("", tok), "an empty header is refused");
    ok(!crl_auth_bearer_ok(NULL, tok), "a missing header is refused");
    ok(!crl_auth_bearer_ok("Bearer ", ""), "an empty configured token accepts nothing");
    ok(!crl_auth_bearer_ok("Bearer x", ""), "an empty configured token refuses any token");
    ok(!crl_auth_bearer_ok("Bearer x", NULL), "no configured token accepts nothing");
    ok(crl_auth_bearer_ok("Bearer a", "a"), "a one-byte token works");
    ok(crl_auth_bearer_ok("bearer s3cr3t-T0ken", tok), "the scheme is case-insensitive");
    ok(crl_auth_bearer_ok("BEARER s3cr3t-T0ken", tok), "the scheme is case-insensitive (upper)");
    ok(!crl_auth_bearer_ok("Bearer S3CR3T-T0KEN", tok), "the token itself is case-sensitive");
}

static void test_listen_ok(void)
{
    struct sockaddr_storage ss;
    unsigned len = 0;
    bool lo = false;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;

    is_int(crl_parse_listen("127.0.0.1:8080", &ss, &len, &lo), 0, "127.0.0.1:8080 parses");
    ok(v4->sin_family == AF_INET && ntohs(v4->sin_port) == 8080 &&
           ntohl(v4->sin_addr.s_addr) == 0x7f000001 && len == sizeof(struct sockaddr_in),
       "as AF_INET 127.0.0.1 port 8080 with the sockaddr_in length");
    ok(lo, "and is loopback");

    lo = false;
    ok(crl_parse_listen("127.200.3.4:1", &ss, &len, &lo) == 0 && lo,
       "all of 127.0.0.0/8 is loopback");
    ok(crl_parse_listen("0.0.0.0:7000", &ss, &len, &lo) == 0 && !lo,
       "0.0.0.0 parses and is flagged as not loopback");
    ok(crl_parse_listen("192.168.1.10:443", &ss, &len, &lo) == 0 && !lo &&
           ntohs(v4->sin_port) == 443,
       "a LAN address parses and is not loopback");
    ok(crl_parse_listen("128.0.0.1:80", &ss, &len, &lo) == 0 && !lo, "128.0.0.1 is not loopback");
    ok(crl_parse_listen("126.255.255.255:80", &ss, &len, &lo) == 0 && !lo,
       "126.255.255.255 is not loopback");

    lo = false;
    is_int(crl_parse_listen("[::1]:9090", &ss, &len, &lo), 0, "[::1]:9090 parses");
    ok(v6->sin6_family == AF_INET6 && ntohs(v6->sin6_port) == 9090 &&
           IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr) && len == sizeof(struct sockaddr_in6),
       "as AF_INET6 ::1 port 9090 with the sockaddr_in6 length");
    ok(lo, "and is loopback");
    ok(crl_parse_listen("[::]:80", &ss, &len, &lo) == 0 && !lo && v6->sin6_family == AF_INET6,
       "[::] parses and is not loopback");
    ok(crl_parse_listen("[2001:db8::1]:443", &ss, &len, &lo) == 0 && !lo,
       "a global v6 address is not loopback");

    lo = false;
    is_int(crl_parse_listen("localhost:9000", &ss, &len, &lo), 0, "localhost:9000 parses");
    ok(v4->sin_family == AF_INET && ntohl(v4->sin_addr.s_addr) == INADDR_LOOPBACK &&
           ntohs(v4->sin_port) == 9000 && lo,
       "as 127.0.0.1:9000, loopback");

    ok(crl_parse_listen("127.0.0.1:65535", &ss, &len, &lo) == 0 && ntohs(v4->sin_port) == 65535,
       "port 65535 is the largest");
    ok(crl_parse_listen("127.0.0.1:1", &ss, &len, &lo) == 0 && ntohs(v4->sin_port) == 1,
       "port 1 parses");
}

static void test_listen_bad(void)
{
    static const char *const bad[] = {
        "",
        ":",
        "garbage",
        "127.0.0.1",
        "127.0.0.1:",
        ":8080",
        "127.0.0.1:65536",
        "127.0.0.1:-1",
        "127.0.0.1:99999999999999999999",
        "127.0.0.1:80x",
        "127.0.0.1:x",
        "127.0.0.1:8080:",
        "1.2.3:80",
        "1.2.3.4.5:80",
        "256.0.0.1:80",
        "example.com:80",
        "LOCALHOST:80",
        "localhost",
        "[::1]",
        "[::1]:",
        "[::1]80",
        "[::1:80",
        "::1]:80",
        "[::1]:80x",
        "[::1]:70000",
        "[]:80",
        "[fe80::1%lo]:80",
        "[localhost]:80x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sockaddr_storage ss;
        unsigned len = 0;
        bool lo = false;
        is_int(crl_parse_listen(bad[i], &ss, &len, &lo), -1, "'%s' is refused", bad[i]);
    }
    char longhost[300];
    memset(longhost, '1', sizeof(longhost));
    memcpy(longhost + 280, ":80", 4);
    struct sockaddr_storage ss;
    unsigned len;
    bool lo;
    is_int(crl_parse_listen(longhost, &ss, &len, &lo), -1, "a 280-byte host is refused");
    longhost[0] = '[';
    memcpy(longhost + 270, "]:80", 5);
    is_int(crl_parse_listen(longhost, &ss, &len, &lo), -1, "a 270-byte bracketed host is refused");

    /* strtol skips blanks and takes a sign: the port is not just digits. */
    is_int(crl_parse_listen("127.0.0.1: 80", &ss, &len, &lo), -1, "'127.0.0.1: 80' is refused");
    is_int(crl_parse_listen("127.0.0.1:+80", &ss, &len, &lo), -1, "'127.0.0.1:+80' is refused");
    is_int(crl_parse_listen("[::1]:-0", &ss, &len, &lo), -1, "'[::1]:-0' is refused");
}

/* A path made from a pattern: each capture becomes "x" (or its literal). */
static void sample_path(const char *pattern, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = pattern; *p && n + 1 < cap;) {
        if (strcmp(p, "[/]") == 0)
            break;
        if (*p != '{') {
            out[n++] = *p++;
            continue;
        }
        const char *end = strchr(p, '}'), *eq = memchr(p, '=', (size_t)(end - p));
        const char *lit = eq ? eq + 1 : "x";
        size_t len = eq ? (size_t)(end - eq - 1) : 1;
        for (size_t i = 0; i < len && n + 1 < cap; i++)
            out[n++] = lit[i];
        p = end + 1;
    }
    out[n] = 0;
}

static void test_route_table(void)
{
    int n = crl_route_count();
    ok(n > 20, "the table has its %d entries", n);
    for (int i = 0; i < n; i++) {
        char path[256];
        sample_path(crl_route_pattern(i), path, sizeof(path));
        struct crl_route r;
        bool m = crl_route_find(path, crl_route_method(i), &r);
        ok(m && r.entry == i && crl_route_allows(&r, crl_route_method(i)),
           "%s %s finds its own entry (%d)", crl_route_method(i), path, i);
    }
    struct crl_route r;
    ok(crl_route_find("/v1/images/tag", "GET", &r) && r.ep == CRL_EP_IMAGE && r.entry >= 0 &&
           strcmp(r.name, "tag") == 0 && strcmp(r.allow, "GET, DELETE, POST") == 0,
       "GET /v1/images/tag is the image named tag");
    ok(crl_route_find("/v1/images/tag", "POST", &r) && r.ep == CRL_EP_IMAGE_TAG && r.entry >= 0,
       "POST /v1/images/tag tags");
    ok(crl_route_find("/v1/sandboxes", "PATCH", &r) && r.entry == -1 && r.ep == CRL_EP_SANDBOXES &&
           strcmp(r.allow, "GET, POST") == 0,
       "a method the path does not take finds no entry, and says what it takes");
    ok(crl_route_find("/v1/sandboxes/a/sessions/s/run", "POST", &r) && r.entry >= 0 &&
           strcmp(r.id, "a") == 0 && strcmp(r.sub, "s") == 0,
       "an entry found by method has its ids");
    ok(!crl_route_find("/nope", "GET", &r) && r.entry == -1 && r.allow == NULL,
       "an unknown path finds nothing");
}

int main(void)
{
    TAP_RUN(test_routes, 10);
    TAP_RUN(test_routes_malformed, 10);
    TAP_RUN(test_route_dot_ids, 10);
    TAP_RUN(test_route_id_length, 10);
    TAP_RUN(test_image_routes, 10);
    TAP_RUN(test_route_allows, 10);
    TAP_RUN(test_route_table, 10);
    TAP_RUN(test_bearer, 10);
    TAP_RUN(test_listen_ok, 10);
    TAP_RUN(test_listen_bad, 10);
    return done_testing();
}
