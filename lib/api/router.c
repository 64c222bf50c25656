#include "router.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

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

bool crl_route_match(const char *path, struct crl_route *r)
{
    memset(r, 0, sizeof(*r));
    if (strcmp(path, "/healthz") == 0) {
        r->ep = CRL_EP_HEALTHZ;
        r->allow = "GET";
        return true;
    }
    if (strcmp(path, "/metrics") == 0) {
        r->ep = CRL_EP_METRICS;
        r->allow = "GET";
        return true;
    }
    if (strncmp(path, "/v1/", 4) != 0)
        return false;
    const char *p = path + 4;
    if (strcmp(p, "host") == 0) {
        r->ep = CRL_EP_HOST;
        r->allow = "GET";
        return true;
    }
    if (strcmp(p, "images") == 0) {
        r->ep = CRL_EP_IMAGES;
        r->allow = "GET, POST";
        return true;
    }
    if (strncmp(p, "images/", 7) == 0) {
        if (!image_name(p + 7, r->name, sizeof(r->name)))
            return false;
        /* "tag" and "gc" are actions to POST, and images to GET or DELETE */
        r->ep = strcmp(r->name, "tag") == 0  ? CRL_EP_IMAGE_TAG
                : strcmp(r->name, "gc") == 0 ? CRL_EP_IMAGE_GC
                                             : CRL_EP_IMAGE;
        r->allow = r->ep == CRL_EP_IMAGE ? "GET, DELETE" : "GET, DELETE, POST";
        return true;
    }
    if (strcmp(p, "functions") == 0 || strcmp(p, "functions/") == 0) {
        r->ep = CRL_EP_FUNCTIONS;
        r->allow = "GET";
        return true;
    }
    if (strncmp(p, "functions/", 10) == 0) {
        int n = segment(p + 10, r->name, sizeof(r->name));
        if (n < 0)
            return false;
        p += 10 + n;
        if (*p == 0) {
            r->ep = CRL_EP_FUNCTION;
            r->allow = "GET";
            return true;
        }
        if (strcmp(p, "/call") == 0) {
            r->ep = CRL_EP_FUNCTION_CALL;
            r->allow = "POST";
            return true;
        }
        return false;
    }
    if (strcmp(p, "trajectories") == 0 || strcmp(p, "trajectories/") == 0) {
        r->ep = CRL_EP_TRAJECTORIES;
        r->allow = "GET";
        return true;
    }
    if (strncmp(p, "trajectories/", 13) == 0) {
        int n = segment(p + 13, r->name, sizeof(r->name));
        if (n < 0)
            return false;
        p += 13 + n;
        if (*p == 0) {
            /* "gc" is an action to POST, and a trajectory to GET or DELETE */
            bool gc = strcmp(r->name, "gc") == 0;
            r->ep = gc ? CRL_EP_TRAJECTORY_GC : CRL_EP_TRAJECTORY;
            r->allow = gc ? "GET, DELETE, POST" : "GET, DELETE";
            return true;
        }
        if (strcmp(p, "/steps") == 0) {
            r->ep = CRL_EP_TRAJECTORY_STEPS;
            r->allow = "GET";
            return true;
        }
        return false;
    }
    if (strncmp(p, "sandboxes", 9) != 0)
        return false;
    p += 9;
    if (*p == 0 || strcmp(p, "/") == 0) {
        r->ep = CRL_EP_SANDBOXES;
        r->allow = "GET, POST";
        return true;
    }
    if (*p++ != '/')
        return false;
    int n = segment(p, r->id, sizeof(r->id));
    if (n < 0)
        return false;
    p += n;
    if (*p == 0) {
        r->ep = CRL_EP_SANDBOX;
        r->allow = "GET, DELETE";
        return true;
    }
    p++; /* '/' */
    if (strcmp(p, "exec") == 0) {
        r->ep = CRL_EP_EXEC;
        r->allow = "POST";
        return true;
    }
    if (strcmp(p, "files") == 0) {
        r->ep = CRL_EP_FILES;
        r->allow = "GET, PUT";
        return true;
    }
    if (strcmp(p, "pause") == 0 || strcmp(p, "resume") == 0 || strcmp(p, "snapshot") == 0 ||
        strcmp(p, "fork") == 0) {
        r->ep = CRL_EP_SANDBOX_ACTION;
        snprintf(r->sub, sizeof(r->sub), "%s", p);
        r->allow = "POST";
        return true;
    }
    if (strncmp(p, "sessions", 8) != 0)
        return false;
    p += 8;
    if (*p == 0) {
        r->ep = CRL_EP_SESSIONS;
        r->allow = "GET, POST";
        return true;
    }
    if (*p++ != '/')
        return false;
    n = segment(p, r->sub, sizeof(r->sub));
    if (n < 0)
        return false;
    p += n;
    if (*p == 0) {
        r->ep = CRL_EP_SESSION;
        r->allow = "DELETE";
        return true;
    }
    if (strcmp(p, "/run") == 0) {
        r->ep = CRL_EP_SESSION_RUN;
        r->allow = "POST";
        return true;
    }
    return false;
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
