/* libFuzzer driver for lib/api/router: request paths, listen addresses and
 * the bearer check on arbitrary strings.  Checks, besides memory safety:
 * a matched route has a known endpoint, an allow list and ids that are
 * 1-63 bytes of [A-Za-z0-9._-]; a method finds the table's entry for it
 * exactly when the allow list has it, with the same ids; a parsed address is AF_INET or AF_INET6
 * with the right length; the bearer check accepts exactly
 * "Bearer " + token for a non-empty token.
 *
 *   tests/fuzz/run.sh builds it; corpus: tests/fuzz/corpus/router */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "../../lib/api/router.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                               \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "fuzz_router: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

static bool id_ok(const char *id, bool required)
{
    size_t n = strnlen(id, CRL_ROUTE_ID_MAX);
    if (n >= CRL_ROUTE_ID_MAX || (required && n == 0))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

static void fuzz_route(const char *s)
{
    struct crl_route r;
    if (!crl_route_match(s, &r)) {
        CHECK(r.ep == CRL_EP_NONE && r.entry == -1 && r.allow == NULL);
        CHECK(!crl_route_find(s, "GET", &r) && r.entry == -1);
        return;
    }
    CHECK(s[0] == '/');
    CHECK(r.ep > CRL_EP_NONE && r.ep < CRL_EP__COUNT);
    CHECK(r.allow != NULL && r.allow[0]);
    bool per_sandbox = r.ep >= CRL_EP_SANDBOX && r.ep <= CRL_EP_SANDBOX_ACTION;
    bool named = (r.ep >= CRL_EP_IMAGE && r.ep <= CRL_EP_BLOB) || r.ep == CRL_EP_FUNCTION ||
                 r.ep == CRL_EP_FUNCTION_CALL || r.ep == CRL_EP_TRAJECTORY ||
                 r.ep == CRL_EP_TRAJECTORY_STEPS || r.ep == CRL_EP_TRAJECTORY_GC;
    CHECK(named == (r.name[0] != 0) || r.ep == CRL_EP_IMAGE_TAG || r.ep == CRL_EP_IMAGE_GC);
    CHECK(id_ok(r.id, per_sandbox));
    CHECK(per_sandbox || r.id[0] == 0);
    bool has_sub =
        r.ep == CRL_EP_SESSION || r.ep == CRL_EP_SESSION_RUN || r.ep == CRL_EP_SANDBOX_ACTION;
    CHECK(id_ok(r.sub, has_sub));
    CHECK(has_sub || r.sub[0] == 0);
    /* the ids appear in the path as segments */
    CHECK(!per_sandbox || strstr(s, r.id));
    static const char *const methods[] = {"GET", "POST", "PUT", "DELETE", "", "G", "GET, POST"};
    int allowed = 0;
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        allowed += crl_route_allows(&r, methods[i]);
    CHECK(allowed >= 1 && allowed <= 3);
    CHECK(!crl_route_allows(&r, "") && !crl_route_allows(&r, "GET, POST"));
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        struct crl_route e;
        CHECK(crl_route_find(s, methods[i], &e));
        CHECK(e.allow == r.allow && strcmp(e.id, r.id) == 0 && strcmp(e.sub, r.sub) == 0);
        CHECK((e.entry >= 0) == crl_route_allows(&r, methods[i]));
        CHECK(e.entry < crl_route_count());
        CHECK(e.entry < 0 || strcmp(crl_route_method(e.entry), methods[i]) == 0);
    }
}

static void fuzz_listen(const char *s)
{
    struct sockaddr_storage ss;
    unsigned len = 0;
    bool lo = false;
    if (crl_parse_listen(s, &ss, &len, &lo) < 0)
        return;
    CHECK((ss.ss_family == AF_INET && len == sizeof(struct sockaddr_in)) ||
          (ss.ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6)));
    if (ss.ss_family == AF_INET && lo)
        CHECK((ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127);
}

/* Input "header\ntoken": accepted iff header is "Bearer <token>", the scheme
 * in any case (RFC 9110). */
static void fuzz_bearer(const char *s)
{
    const char *nl = strchr(s, '\n');
    if (!nl) {
        CHECK(!crl_auth_bearer_ok(s, ""));
        return;
    }
    char *hdr = strndup(s, (size_t)(nl - s));
    const char *tok = nl + 1;
    if (!hdr)
        return;
    bool want = tok[0] && strncasecmp(hdr, "Bearer ", 7) == 0 && strcmp(hdr + 7, tok) == 0;
    CHECK(crl_auth_bearer_ok(hdr, tok) == want);
    free(hdr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0; /* strings end at the first NUL, as from libmicrohttpd */
    fuzz_route(s);
    fuzz_listen(s);
    fuzz_bearer(s);
    free(s);
    return 0;
}
