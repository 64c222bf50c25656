/* A sandbox's network policy: the `network` object of a spec (and, later,
 * of PATCH /v1/sandboxes/{id}/network), parsed and validated here once, and
 * the matchers the resolver and the counters decide with.  The grammar is
 * docs/api.md's "Network"; in short:
 *
 *   {"mode": "none"}                                  loopback only (default)
 *   {"mode": "full", "deny": [RULE...]}               everything but deny
 *   {"mode": "allow", "allow": [RULE...], "deny": [RULE...]}
 *
 *   RULE  = HOST [":" PORTS]     PORTS = ITEM ("," ITEM)*, ITEM = N | N "-" M
 *   HOST  = name | "*." name | IPv4 ["/" len] | "[" IPv6 ["/" len] "]" | IPv6 ["/" len]
 *
 * A rule applies to TCP and UDP alike; no PORTS means every port.  Deny
 * beats allow.  Names are LDH labels plus '_' (SRV-style names such as
 * _sip._tcp.example exist), compared lowercased, a trailing dot dropped.
 * "*.example" matches any name with one or more labels before ".example",
 * never "example" itself. */
#ifndef CRL_CORE_NETPOLICY_H
#define CRL_CORE_NETPOLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

#define CRL_NET_MAX_RULES 256 /* per list */
#define CRL_NET_MAX_PORTS 16  /* items in one rule's PORTS */
#define CRL_NET_NAME_MAX 253  /* a host name, without its trailing dot */
#define CRL_NET_RULE_MAX 299  /* a rule's text, as written */

enum crl_net_mode { CRL_NET_NONE, CRL_NET_ALLOW, CRL_NET_FULL };

struct crl_net_ports {
    uint16_t lo, hi; /* 1 <= lo <= hi */
};

enum crl_net_rule_kind { CRL_NET_RULE_NAME, CRL_NET_RULE_WILDCARD, CRL_NET_RULE_CIDR };

struct crl_net_rule {
    enum crl_net_rule_kind kind;
    /* NAME: the name; WILDCARD: the suffix after "*."; lowercased, no trailing dot */
    char name[CRL_NET_NAME_MAX + 1];
    int family;       /* CIDR: AF_INET or AF_INET6 */
    uint8_t addr[16]; /* CIDR: the network, host bits zero (4 bytes for AF_INET) */
    uint8_t prefix;   /* CIDR: 0-32 or 0-128 */
    struct crl_net_ports ports[CRL_NET_MAX_PORTS];
    unsigned nports;                 /* 0: every port */
    char text[CRL_NET_RULE_MAX + 1]; /* normalised, for logs, counters and to_json */
};

struct crl_net_policy {
    enum crl_net_mode mode;
    struct crl_net_rule *allow, *deny; /* malloc'd arrays */
    size_t nallow, ndeny;
};

/* "none", "allow" or "full". */
const char *crl_net_mode_name(enum crl_net_mode m);
/* A spec holds its policy as a pointer, NULL for mode none: the mode of
 * either. */
enum crl_net_mode crl_net_policy_mode(const struct crl_net_policy *p);

/* Parse and validate a `network` object into *out (initialised by the call;
 * on failure it holds nothing to free).  Errors are CRL_E_INVALID and name
 * the field, or the rule (its list, index and text) and what is wrong with
 * it.  Works on a standalone object: it knows nothing of the rest of a spec. */
int crl_net_policy_from_json(json_t *network, struct crl_net_policy *out, struct crl_err *err);
/* {"mode": M} plus "allow" (mode allow) and "deny" (when not empty) as the
 * normalised rule texts: it parses back into the same policy.  NULL: mode
 * none.  Returns NULL only if out of memory. */
json_t *crl_net_policy_to_json(const struct crl_net_policy *p);
/* Frees the lists (not *p itself) and leaves *p as mode none.  NULL is fine. */
void crl_net_policy_free(struct crl_net_policy *p);

/* A host name as rules hold it: lowercased into out (CRL_NET_NAME_MAX + 1
 * bytes), a trailing dot dropped; -1 with *why saying what is wrong. */
int crl_net_name_norm(const char *name, char *out, const char **why);

/* Parse one rule (`where` names it in messages, e.g. "network.allow[3]"). */
int crl_net_rule_parse(const char *text, const char *where, struct crl_net_rule *r,
                       struct crl_err *err);

/* Does a NAME or WILDCARD rule match `name`?  Case-insensitive, a trailing
 * dot tolerated; a name that is not a valid host name matches nothing, nor
 * does a CIDR rule.  Ports are not looked at. */
bool crl_net_name_matches(const struct crl_net_rule *r, const char *name);
/* Does a CIDR rule hold the address (4 or 16 bytes, network order)?  An
 * IPv4-mapped IPv6 address (::ffff:a.b.c.d) is also matched as the IPv4
 * address it carries, since that is what goes on the wire.  Name rules
 * match no address.  Ports are not looked at. */
bool crl_net_addr_matches(const struct crl_net_rule *r, int family, const void *addr);
/* Does the rule take this port?  (A rule without ports takes every port.) */
bool crl_net_port_matches(const struct crl_net_rule *r, unsigned port);

/* May the sandbox resolve `name`?  Deny wins: a deny rule without ports
 * that matches refuses it; then, in mode allow, the first allow rule that
 * matches admits it (its ports are for whoever enforces the connections);
 * mode full admits, mode none refuses.  A deny rule with ports does not
 * stop a name resolving: it refuses only those ports, which the enforcer
 * applies to the addresses the name resolved to.  Sets *allowed and
 * returns the deciding rule, or NULL if the mode decided.  p NULL: none. */
const struct crl_net_rule *crl_net_policy_decide_name(const struct crl_net_policy *p,
                                                      const char *name, bool *allowed);
/* May the sandbox reach addr:port (TCP or UDP)?  Only CIDR rules count
 * here (names are the resolver's): a deny rule that takes the address and
 * port refuses; then mode allow admits what an allow rule takes, mode full
 * admits, mode none refuses.  Returns the deciding rule or NULL. */
const struct crl_net_rule *crl_net_policy_decide_addr(const struct crl_net_policy *p, int family,
                                                      const void *addr, unsigned port,
                                                      bool *allowed);

#endif
