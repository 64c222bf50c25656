#include "router.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Copy one path segment (up to '/' or end) into out; returns its length, or
 * -1 if empty, too long or not [A-Za-z0-9._-]. */
static int segment(const char *p, char *out, size_t cap)
{
    size_t n = 0;
    while (p[n] && p[n] != '/') {
        char c = p[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return -1;
        if (n + 1 >= cap)
            return -1;
        out[n] = c;
        n++;
    }
    if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
        return -1;
    out[n] = 0;
    return (int)n;
}

/* An image reference (NAME[:TAG], REGISTRY/PATH:TAG, NAME@sha256:..., or
 * an id) into out: its characters only, no empty, "." or ".." component, no
 * leading or doubled '/'.  The store checks the grammar; this keeps a path
 * out of it. */
static bool image_name(const char *p, char *out, size_t cap)
{
    size_t n = strlen(p);
    if (n == 0 || n >= cap || p[0] == '/' || p[n - 1] == '/' ||
        strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:@+") != n)
        return false;
    for (const char *c = p; c; c = strchr(c, '/')) {
        if (*c == '/')
            c++;
        size_t len = strcspn(c, "/");
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            return false;
    }
    memcpy(out, p, n + 1);
    return true;
}

/* The table's first three columns; routes.c takes the rest. */
static const struct entry {
    enum crl_endpoint ep;
    const char *method;
    const char *pattern;
} table[] = {
#define ROUTE(ep, method, pattern, ...) {CRL_EP_##ep, method, pattern},
#include "routes.def"
#undef ROUTE
};

/* Allow lists the methods in one order (GET, DELETE, POST, PUT, PATCH),
 * as a bit set of them picks it: each list made once, at its first use. */
static const char *const methods[] = {"GET", "DELETE", "POST", "PUT", "PATCH"};

static const char *allow_list(unsigned bits)
{
    static char lists[1u << LEN(methods)][40];
    char *l = lists[bits];
    if (bits && !l[0]) {
        size_t n = 0;
        for (unsigned i = 0; i < LEN(methods); i++)
            if (bits & (1u << i))
                n += (size_t)snprintf(l + n, sizeof(lists[0]) - n, "%s%s", n ? ", " : "",
                                      methods[i]);
    }
    return bits ? l : NULL;
}

static unsigned method_bit(const char *method)
{
    for (unsigned i = 0; i < LEN(methods); i++)
        if (strcmp(method, methods[i]) == 0)
            return 1u << i;
    return 0;
}

/* A capture's field: {id}, {sub}, {name}, {image} (into name). */
static char *field(struct crl_route *r, const char *f, size_t len, size_t *cap)
{
    if (len == 2 && strncmp(f, "id", 2) == 0) {
        *cap = sizeof(r->id);
        return r->id;
    }
    if (len == 3 && strncmp(f, "sub", 3) == 0) {
        *cap = sizeof(r->sub);
        return r->sub;
    }
    *cap = sizeof(r->name);
    return (len == 4 && strncmp(f, "name", 4) == 0) || (len == 5 && strncmp(f, "image", 5) == 0)
               ? r->name
               : NULL;
}

/* Does the whole of `path` match `pattern` (routes.def says how they
 * read)?  Its captures go into r. */
static bool match(const char *pattern, const char *path, struct crl_route *r)
{
    const char *p = pattern, *s = path;
    while (*p) {
        if (strcmp(p, "[/]") == 0)
            return s[0] == 0 || strcmp(s, "/") == 0;
        if (*p != '{') {
            if (*p++ != *s++)
                return false;
            continue;
        }
        const char *f = p + 1, *end = strchr(f, '}');
        const char *eq = memchr(f, '=', (size_t)(end - f));
        size_t flen = (size_t)((eq ? eq : end) - f), cap;
        if (flen == 4 && strncmp(f, "rest", 4) == 0) /* the rest, "" or "/...": not captured */
            return end[1] == 0 && (*s == 0 || *s == '/');
        char *out = field(r, f, flen, &cap);
        if (!out)
            return false;
        p = end + 1;
        if (flen == 5 && strncmp(f, "image", 5) == 0)
            return *p == 0 && image_name(s, out, cap);
        if (eq) { /* a literal segment, captured */
            size_t n = (size_t)(end - eq - 1);
            if (strncmp(s, eq + 1, n) != 0 || (s[n] != '/' && s[n] != 0) || n >= cap)
                return false;
            memcpy(out, s, n);
            out[n] = 0;
            s += n;
            continue;
        }
        int n = segment(s, out, cap);
        if (n < 0)
            return false;
        s += n;
    }
    return *s == 0;
}

bool crl_route_find(const char *path, const char *method, struct crl_route *r)
{
    memset(r, 0, sizeof(*r));
    r->entry = -1;
    unsigned allowed = 0;
    bool found = false;
    for (int i = 0; i < (int)LEN(table); i++) {
        struct crl_route m;
        memset(&m, 0, sizeof(m));
        if (!match(table[i].pattern, path, &m))
            continue;
        allowed |= method_bit(table[i].method);
        bool mine = r->entry < 0 && method && strcmp(method, table[i].method) == 0;
        if (found && !mine)
            continue;
        memcpy(r->id, m.id, sizeof(r->id));
        memcpy(r->sub, m.sub, sizeof(r->sub));
        memcpy(r->name, m.name, sizeof(r->name));
        r->ep = table[i].ep;
        if (mine)
            r->entry = i;
        found = true;
    }
    r->allow = allow_list(allowed);
    return found;
}

bool crl_route_match(const char *path, struct crl_route *r)
{
    return crl_route_find(path, NULL, r);
}

int crl_route_count(void)
{
    return (int)LEN(table);
}

const char *crl_route_method(int entry)
{
    return table[entry].method;
}

const char *crl_route_pattern(int entry)
{
    return table[entry].pattern;
}

bool crl_route_allows(const struct crl_route *r, const char *method)
{
    size_t ml = strlen(method);
    for (const char *a = r->allow; a && *a;) {
        while (*a == ' ' || *a == ',')
            a++;
        size_t n = strcspn(a, ", ");
        if (n == ml && strncmp(a, method, n) == 0)
            return true;
        a += n;
    }
    return false;
}

bool crl_auth_bearer_ok(const char *header, const char *token)
{
    /* RFC 9110: the scheme name is case-insensitive. */
    if (!header || !token || strncasecmp(header, "Bearer ", 7) != 0)
        return false;
    const char *got = header + 7;
    size_t gl = strlen(got), tl = strlen(token);
    /* Compare every byte whatever the lengths, so timing tells nothing. */
    unsigned char diff = (unsigned char)(gl != tl);
    for (size_t i = 0; i < tl; i++)
        diff |= (unsigned char)(token[i] ^ (i < gl ? got[i] : 0));
    return diff == 0 && tl > 0;
}

int crl_parse_listen(const char *s, struct sockaddr_storage *ss, unsigned *len, bool *loopback)
{
    char host[128];
    const char *colon;
    memset(ss, 0, sizeof(*ss));
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':' || (size_t)(end - s - 1) >= sizeof(host))
            return -1;
        memcpy(host, s + 1, (size_t)(end - s - 1));
        host[end - s - 1] = 0;
        colon = end + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= sizeof(host))
            return -1;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = 0;
    }
    const char *ps = colon + 1;
    size_t pl = strlen(ps);
    if (pl == 0 || pl > 5 || strspn(ps, "0123456789") != pl)
        return -1;
    long port = strtol(ps, NULL, 10);
    if (port > 65535)
        return -1;
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof(*v4);
        *loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*v6);
        *loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
        return 0;
    }
    if (strcmp(host, "localhost") == 0) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        *len = sizeof(*v4);
        *loopback = true;
        return 0;
    }
    return -1;
}
