#include "netpolicy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../util/cleanup.h"
#include "spec.h" /* crl_json_type_name */

static const char *const mode_names[] = {
    [CRL_NET_NONE] = "none",
    [CRL_NET_ALLOW] = "allow",
    [CRL_NET_FULL] = "full",
};

const char *crl_net_mode_name(enum crl_net_mode m)
{
    return (unsigned)m < CRL_ARRAY_SIZE(mode_names) ? mode_names[m] : "?";
}

enum crl_net_mode crl_net_policy_mode(const struct crl_net_policy *p)
{
    return p ? p->mode : CRL_NET_NONE;
}

/* ---- host names ---- */

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* s[0..len) as a host name: lowercased into out (CRL_NET_NAME_MAX + 1
 * bytes), one trailing dot dropped.  Labels are 1-63 of [a-z0-9_-], not
 * starting or ending with '-'; the last is not all digits (that is an
 * address gone wrong, and no top-level domain is numeric).  On failure
 * *why says what is wrong. */
static int norm_name(const char *s, size_t len, char *out, const char **why)
{
    if (len > 0 && s[len - 1] == '.')
        len--;
    if (len == 0) {
        *why = "the name is empty";
        return -1;
    }
    if (len > CRL_NET_NAME_MAX) {
        *why = "the name is longer than 253 bytes";
        return -1;
    }
    size_t label = 0; /* start of the current label */
    bool digits = true;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '.') {
            size_t n = i - label;
            if (n == 0) {
                *why = "the name has an empty label";
                return -1;
            }
            if (n > 63) {
                *why = "a label of the name is longer than 63 bytes";
                return -1;
            }
            if (out[label] == '-' || out[i - 1] == '-') {
                *why = "a label of the name starts or ends with '-'";
                return -1;
            }
            if (i == len && digits) {
                *why = "it is not a valid IPv4 address, and a name's last label cannot be all "
                       "digits";
                return -1;
            }
            out[i] = '.';
            label = i + 1;
            digits = true;
            continue;
        }
        char c = lower(s[i]);
        if (c == '*') {
            *why = "a wildcard '*' may only be the whole first label (*.example)";
            return -1;
        }
        if (!name_char(c)) {
            *why = "a host name holds only letters, digits, '-', '_' and dots";
            return -1;
        }
        digits = digits && c >= '0' && c <= '9';
        out[i] = c;
    }
    out[len] = 0;
    return 0;
}

int crl_net_name_norm(const char *name, char *out, const char **why)
{
    return norm_name(name, strlen(name), out, why);
}

/* ---- addresses ---- */

static size_t addr_len(int family)
{
    return family == AF_INET ? 4 : 16;
}

/* Are the bits of addr past `prefix` all zero? */
static bool host_bits_zero(const uint8_t *addr, size_t len, unsigned prefix)
{
    for (size_t i = 0; i < len; i++) {
        unsigned keep = prefix >= (i + 1) * 8 ? 8 : prefix > i * 8 ? prefix - (unsigned)i * 8 : 0;
        uint8_t mask = keep ? (uint8_t)(0xff << (8 - keep)) : 0;
        if (addr[i] & (uint8_t)~mask)
            return false;
    }
    return true;
}

static void clear_host_bits(uint8_t *addr, size_t len, unsigned prefix)
{
    for (size_t i = 0; i < len; i++) {
        unsigned keep = prefix >= (i + 1) * 8 ? 8 : prefix > i * 8 ? prefix - (unsigned)i * 8 : 0;
        addr[i] &= keep ? (uint8_t)(0xff << (8 - keep)) : 0;
    }
}

static bool prefix_equal(const uint8_t *a, const uint8_t *b, unsigned prefix)
{
    size_t whole = prefix / 8;
    if (memcmp(a, b, whole) != 0)
        return false;
    unsigned rest = prefix % 8;
    if (!rest)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

static const char host_bits_set[] = "host bits are set";

/* "ADDR" or "ADDR/LEN" of `family`, s[0..len).  *why on failure. */
static int parse_cidr(const char *s, size_t len, int family, struct crl_net_rule *r,
                      const char **why)
{
    unsigned max = family == AF_INET ? 32 : 128;
    const char *slash = memchr(s, '/', len);
    size_t alen = slash ? (size_t)(slash - s) : len;
    char a[INET6_ADDRSTRLEN + 1];
    if (alen == 0 || alen >= sizeof(a) || memchr(s, '\0', alen)) {
        *why = family == AF_INET ? "it is not a valid IPv4 address"
                                 : "it is not a valid IPv6 "
                                   "address";
        return -1;
    }
    memcpy(a, s, alen);
    a[alen] = 0;
    if (inet_pton(family, a, r->addr) != 1) {
        *why = family == AF_INET ? "it is not a valid IPv4 address"
                                 : "it is not a valid IPv6 "
                                   "address";
        return -1;
    }
    unsigned prefix = max;
    if (slash) {
        const char *p = slash + 1;
        size_t plen = len - alen - 1;
        if (plen == 0 || plen > 3 || (plen > 1 && p[0] == '0')) {
            *why = "the prefix length after '/' is not a number without leading zeros";
            return -1;
        }
        prefix = 0;
        for (size_t i = 0; i < plen; i++) {
            if (p[i] < '0' || p[i] > '9') {
                *why = "the prefix length after '/' is not a number without leading zeros";
                return -1;
            }
            prefix = prefix * 10 + (unsigned)(p[i] - '0');
        }
        if (prefix > max) {
            *why = family == AF_INET ? "an IPv4 prefix length is at most 32"
                                     : "an IPv6 prefix length is at most 128";
            return -1;
        }
    }
    r->kind = CRL_NET_RULE_CIDR;
    r->family = family;
    r->prefix = (uint8_t)prefix;
    if (!host_bits_zero(r->addr, addr_len(family), prefix)) {
        *why = host_bits_set;
        return -1;
    }
    return 0;
}

/* ---- ports ---- */

static int parse_port(const char *s, size_t len, uint16_t *out, const char **why)
{
    if (len == 0) {
        *why = "a port in the list is empty";
        return -1;
    }
    unsigned long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            *why = "a port is not a number (ports are 1-65535, ranges LO-HI)";
            return -1;
        }
        if (v <= 65535)
            v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (v == 0) {
        *why = "port 0 is not a port (ports are 1-65535)";
        return -1;
    }
    if (v > 65535) {
        *why = "a port is above 65535";
        return -1;
    }
    *out = (uint16_t)v;
    return 0;
}

static int parse_ports(const char *s, size_t len, struct crl_net_rule *r, const char **why)
{
    if (len == 0) {
        *why = "the port list after ':' is empty";
        return -1;
    }
    const char *end = s + len;
    while (s <= end) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *item_end = comma ? comma : end;
        if (r->nports == CRL_NET_MAX_PORTS) {
            *why = "it has more than 16 ports and ranges";
            return -1;
        }
        struct crl_net_ports *p = &r->ports[r->nports];
        const char *dash = memchr(s, '-', (size_t)(item_end - s));
        if (parse_port(s, (size_t)((dash ? dash : item_end) - s), &p->lo, why) < 0)
            return -1;
        p->hi = p->lo;
        if (dash && parse_port(dash + 1, (size_t)(item_end - dash - 1), &p->hi, why) < 0)
            return -1;
        if (p->lo > p->hi) {
            *why = "a port range runs backwards (LO-HI needs LO <= HI)";
            return -1;
        }
        r->nports++;
        if (!comma)
            break;
        s = comma + 1;
    }
    return 0;
}

/* ---- rules ---- */

/* The rule's text, normalised: what to_json writes and parses back.  It
 * is never longer than the text it came from, or than an IPv6 CIDR and 16
 * ranges (244 bytes), so it fits. */
static void format_rule(struct crl_net_rule *r)
{
    int n = 0;
    switch (r->kind) {
    case CRL_NET_RULE_NAME: n = snprintf(r->text, sizeof(r->text), "%s", r->name); break;
    case CRL_NET_RULE_WILDCARD: n = snprintf(r->text, sizeof(r->text), "*.%s", r->name); break;
    case CRL_NET_RULE_CIDR: {
        char a[INET6_ADDRSTRLEN];
        if (!inet_ntop(r->family, r->addr, a, sizeof(a)))
            a[0] = 0;
        bool v6 = r->family == AF_INET6, whole = r->prefix == (v6 ? 128 : 32);
        char len[8] = "";
        if (!whole)
            snprintf(len, sizeof(len), "/%u", r->prefix);
        n = snprintf(r->text, sizeof(r->text), "%s%s%s%s", v6 && r->nports ? "[" : "", a, len,
                     v6 && r->nports ? "]" : "");
        break;
    }
    }
    size_t off = n < 0 ? 0 : (size_t)n;
    for (unsigned i = 0; i < r->nports && off < sizeof(r->text); i++) {
        const struct crl_net_ports *p = &r->ports[i];
        n = p->lo == p->hi
                ? snprintf(r->text + off, sizeof(r->text) - off, "%c%u", i ? ',' : ':', p->lo)
                : snprintf(r->text + off, sizeof(r->text) - off, "%c%u-%u", i ? ',' : ':', p->lo,
                           p->hi);
        off += n < 0 ? 0 : (size_t)n;
    }
}

static int parse_host(const char *h, size_t len, bool bracketed, struct crl_net_rule *r,
                      const char **why)
{
    if (len == 0) {
        *why = "the host is empty";
        return -1;
    }
    if (bracketed)
        return parse_cidr(h, len, AF_INET6, r, why);
    if (memchr(h, ':', len)) {
        if (parse_cidr(h, len, AF_INET6, r, why) == 0)
            return 0;
        if (strstr(*why, "not a valid IPv6"))
            *why = "it is not a valid IPv6 address (one with ports goes in brackets: "
                   "[2001:db8::1]:443)";
        return -1;
    }
    if (memchr(h, '/', len))
        return parse_cidr(h, len, AF_INET, r, why);
    bool dotted = h[len - 1] != '.';
    for (size_t i = 0; i < len && dotted; i++)
        dotted = (h[i] >= '0' && h[i] <= '9') || h[i] == '.';
    if (dotted)
        return parse_cidr(h, len, AF_INET, r, why);
    if (h[0] == '*') {
        if (len == 1) {
            *why = "a lone '*' is not a rule (mode full allows everything)";
            return -1;
        }
        if (h[1] != '.') {
            *why = "a wildcard '*' may only be the whole first label (*.example)";
            return -1;
        }
        r->kind = CRL_NET_RULE_WILDCARD;
        return norm_name(h + 2, len - 2, r->name, why);
    }
    r->kind = CRL_NET_RULE_NAME;
    return norm_name(h, len, r->name, why);
}

int crl_net_rule_parse(const char *text, const char *where, struct crl_net_rule *r,
                       struct crl_err *err)
{
    memset(r, 0, sizeof(*r));
    size_t len = strlen(text);
    if (len == 0)
        return crl_err_set(err, CRL_E_INVALID, "%s '': the rule is empty; expected HOST[:PORTS]",
                           where);
    if (len > CRL_NET_RULE_MAX)
        return crl_err_set(err, CRL_E_INVALID, "%s '%.64s...' is longer than %d bytes", where, text,
                           CRL_NET_RULE_MAX);
    const char *host = text, *ports = NULL, *why = NULL;
    size_t hlen = len;
    bool bracketed = text[0] == '[';
    if (bracketed) {
        const char *close = strchr(text, ']');
        if (!close) {
            why = "'[' has no ']'";
            goto bad;
        }
        host = text + 1;
        hlen = (size_t)(close - host);
        if (close[1] == ':')
            ports = close + 2;
        else if (close[1]) {
            why = "after ']' only ':PORTS' may follow";
            goto bad;
        }
    } else {
        const char *colon = strchr(text, ':');
        /* Two colons or more: a bare IPv6 address, which takes no ports
         * (2001:db8::1:443 would be ambiguous). */
        if (colon && !strchr(colon + 1, ':')) {
            hlen = (size_t)(colon - text);
            ports = colon + 1;
        }
    }
    if (parse_host(host, hlen, bracketed, r, &why) < 0)
        goto bad;
    if (ports && parse_ports(ports, strlen(ports), r, &why) < 0)
        goto bad;
    format_rule(r);
    return 0;
bad:
    if (why == host_bits_set) {
        char net[INET6_ADDRSTRLEN] = "";
        clear_host_bits(r->addr, addr_len(r->family), r->prefix);
        inet_ntop(r->family, r->addr, net, sizeof(net));
        crl_err_set(err, CRL_E_INVALID, "%s '%s': host bits are set; the network is %s/%u", where,
                    text, net, r->prefix);
    } else {
        crl_err_set(err, CRL_E_INVALID, "%s '%s': %s", where, text, why);
    }
    memset(r, 0, sizeof(*r));
    return -1;
}

/* ---- policies ---- */

void crl_net_policy_free(struct crl_net_policy *p)
{
    if (!p)
        return;
    free(p->allow);
    free(p->deny);
    memset(p, 0, sizeof(*p));
}

static int parse_list(json_t *v, const char *name, struct crl_net_rule **out, size_t *n,
                      struct crl_err *err)
{
    if (!json_is_array(v))
        return crl_err_set(err, CRL_E_INVALID, "network.%s must be an array of rules, not %s", name,
                           crl_json_type_name(v));
    size_t len = json_array_size(v);
    if (len > CRL_NET_MAX_RULES)
        return crl_err_set(err, CRL_E_INVALID, "network.%s has %zu rules; at most %d are allowed",
                           name, len, CRL_NET_MAX_RULES);
    if (len == 0)
        return 0;
    struct crl_net_rule *rules = calloc(len, sizeof(*rules));
    if (!rules)
        return crl_err_sys(err, ENOMEM, "parsing network.%s", name);
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(v, i);
        char where[48];
        snprintf(where, sizeof(where), "network.%s[%zu]", name, i);
        if (!json_is_string(e)) {
            crl_err_set(err, CRL_E_INVALID, "%s must be a string (HOST or HOST:PORTS), not %s",
                        where, crl_json_type_name(e));
            goto fail;
        }
        if (strlen(json_string_value(e)) != json_string_length(e)) {
            crl_err_set(err, CRL_E_INVALID, "%s must not contain NUL bytes", where);
            goto fail;
        }
        if (crl_net_rule_parse(json_string_value(e), where, &rules[i], err) < 0)
            goto fail;
    }
    *out = rules;
    *n = len;
    return 0;
fail:
    free(rules);
    return -1;
}

int crl_net_policy_from_json(json_t *network, struct crl_net_policy *out, struct crl_err *err)
{
    memset(out, 0, sizeof(*out));
    if (!json_is_object(network))
        return crl_err_set(err, CRL_E_INVALID, "network must be an object, not %s",
                           crl_json_type_name(network));
    const char *key;
    json_t *v;
    json_object_foreach(network, key, v)
    {
        if (strcmp(key, "mode") && strcmp(key, "allow") && strcmp(key, "deny"))
            return crl_err_set(err, CRL_E_INVALID, "unknown field 'network.%.200s'", key);
    }
    json_t *m = json_object_get(network, "mode");
    if (m) {
        if (!json_is_string(m))
            return crl_err_set(err, CRL_E_INVALID, "network.mode must be a string, not %s",
                               crl_json_type_name(m));
        const char *s = json_string_value(m);
        size_t i = 0;
        while (i < CRL_ARRAY_SIZE(mode_names) &&
               !(strcmp(s, mode_names[i]) == 0 && strlen(s) == json_string_length(m)))
            i++;
        if (i == CRL_ARRAY_SIZE(mode_names))
            return crl_err_set(err, CRL_E_INVALID,
                               "network.mode '%.32s' is unknown; expected none, allow or full", s);
        out->mode = (enum crl_net_mode)i;
    }
    json_t *allow = json_object_get(network, "allow"), *deny = json_object_get(network, "deny");
    if (allow && out->mode != CRL_NET_ALLOW)
        return crl_err_set(err, CRL_E_INVALID, "network.allow is only for mode 'allow', not '%s'",
                           crl_net_mode_name(out->mode));
    if (deny && out->mode == CRL_NET_NONE)
        return crl_err_set(err, CRL_E_INVALID,
                           "network.deny is for mode 'allow' or 'full'; mode 'none' lets "
                           "nothing out to deny");
    if (allow && parse_list(allow, "allow", &out->allow, &out->nallow, err) < 0)
        goto fail;
    if (deny && parse_list(deny, "deny", &out->deny, &out->ndeny, err) < 0)
        goto fail;
    return 0;
fail:
    crl_net_policy_free(out);
    return -1;
}

static json_t *rules_json(const struct crl_net_rule *r, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string(r[i].text)) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

json_t *crl_net_policy_to_json(const struct crl_net_policy *p)
{
    enum crl_net_mode mode = crl_net_policy_mode(p);
    json_t *o = json_pack("{s:s}", "mode", crl_net_mode_name(mode));
    if (!o || !p)
        return o;
    if (mode == CRL_NET_ALLOW && json_object_set_new(o, "allow", rules_json(p->allow, p->nallow)))
        goto nomem;
    if (p->ndeny && json_object_set_new(o, "deny", rules_json(p->deny, p->ndeny)))
        goto nomem;
    return o;
nomem:
    json_decref(o);
    return NULL;
}

/* ---- matching ---- */

bool crl_net_name_matches(const struct crl_net_rule *r, const char *name)
{
    if (r->kind == CRL_NET_RULE_CIDR)
        return false;
    char n[CRL_NET_NAME_MAX + 1];
    const char *why;
    size_t len = strnlen(name, CRL_NET_NAME_MAX + 2);
    if (len > CRL_NET_NAME_MAX + 1 || norm_name(name, len, n, &why) < 0)
        return false;
    if (r->kind == CRL_NET_RULE_NAME)
        return strcmp(n, r->name) == 0;
    size_t nl = strlen(n), sl = strlen(r->name);
    /* at least one label before ".suffix": the suffix alone is no match */
    return nl > sl + 1 && n[nl - sl - 1] == '.' && strcmp(n + nl - sl, r->name) == 0;
}

bool crl_net_addr_matches(const struct crl_net_rule *r, int family, const void *addr)
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (r->kind != CRL_NET_RULE_CIDR || !addr)
        return false;
    if (family == r->family)
        return prefix_equal(r->addr, addr, r->prefix);
    if (family == AF_INET6 && r->family == AF_INET && memcmp(addr, v4mapped, 12) == 0)
        return prefix_equal(r->addr, (const uint8_t *)addr + 12, r->prefix);
    return false;
}

bool crl_net_port_matches(const struct crl_net_rule *r, unsigned port)
{
    if (r->nports == 0)
        return true;
    for (unsigned i = 0; i < r->nports; i++)
        if (port >= r->ports[i].lo && port <= r->ports[i].hi)
            return true;
    return false;
}

const struct crl_net_rule *crl_net_policy_decide_name(const struct crl_net_policy *p,
                                                      const char *name, bool *allowed)
{
    *allowed = false;
    enum crl_net_mode mode = crl_net_policy_mode(p);
    if (mode == CRL_NET_NONE)
        return NULL;
    for (size_t i = 0; i < p->ndeny; i++)
        if (p->deny[i].nports == 0 && crl_net_name_matches(&p->deny[i], name))
            return &p->deny[i];
    if (mode == CRL_NET_FULL) {
        *allowed = true;
        return NULL;
    }
    for (size_t i = 0; i < p->nallow; i++)
        if (crl_net_name_matches(&p->allow[i], name)) {
            *allowed = true;
            return &p->allow[i];
        }
    return NULL;
}

const struct crl_net_rule *crl_net_policy_decide_addr(const struct crl_net_policy *p, int family,
                                                      const void *addr, unsigned port,
                                                      bool *allowed)
{
    *allowed = false;
    enum crl_net_mode mode = crl_net_policy_mode(p);
    if (mode == CRL_NET_NONE || (family != AF_INET && family != AF_INET6))
        return NULL;
    for (size_t i = 0; i < p->ndeny; i++)
        if (crl_net_addr_matches(&p->deny[i], family, addr) &&
            crl_net_port_matches(&p->deny[i], port))
            return &p->deny[i];
    if (mode == CRL_NET_FULL) {
        *allowed = true;
        return NULL;
    }
    for (size_t i = 0; i < p->nallow; i++)
        if (crl_net_addr_matches(&p->allow[i], family, addr) &&
            crl_net_port_matches(&p->allow[i], port)) {
            *allowed = true;
            return &p->allow[i];
        }
    return NULL;
}
