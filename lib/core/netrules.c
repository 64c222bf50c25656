#include "netrules.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <sys/socket.h>

#include "../os/vnet.h"

/* " meta l4proto { tcp, udp } th dport { 80, 443, 8000-8080 }", or "" for
 * a rule of every port. */
static int ports(const struct crl_net_rule *r, struct crl_buf *out)
{
    if (r->nports == 0)
        return 0;
    int e = crl_buf_printf(out, " meta l4proto { tcp, udp } th dport {");
    for (unsigned i = 0; e == 0 && i < r->nports; i++) {
        const struct crl_net_ports *p = &r->ports[i];
        e = p->lo == p->hi ? crl_buf_printf(out, "%s %u", i ? "," : "", p->lo)
                           : crl_buf_printf(out, "%s %u-%u", i ? "," : "", p->lo, p->hi);
    }
    return e == 0 ? crl_buf_printf(out, " }") : -1;
}

/* The match of a CIDR rule: its addresses and ports. */
static int match(const struct crl_net_rule *r, struct crl_buf *out)
{
    char a[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, r->addr, a, sizeof(a));
    return crl_buf_printf(out, "ip daddr %s/%u", a, r->prefix) == 0 ? ports(r, out) : -1;
}

/* One rule's lines, ending in `verdict`, with a comment naming it
 * ("allow[2] 10.1.2.0/24:443": its list, index and normalised text, which
 * holds no quote); a drop is logged first as "<list>[<index>]" (the text
 * may not fit a log prefix: corrald finds it in the policy).  Only IPv4
 * CIDRs: the table drops IPv6, and names are the resolver's. */
static int rule(const struct crl_net_rule *r, const char *list, size_t i, const char *verdict,
                unsigned slot, uint16_t log_group, struct crl_buf *out)
{
    if (r->kind != CRL_NET_RULE_CIDR || r->family != AF_INET)
        return 0;
    char a[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, r->addr, a, sizeof(a));
    int e = 0;
    /* An allowed destination answers ping, as on a normal machine, whatever its ports. */
    if (r->nports && verdict[0] == 'a')
        e = crl_buf_printf(out,
                           "ip daddr %s/%u icmp type echo-request counter accept"
                           " comment \"%s[%zu] %s: ping\"\n",
                           a, r->prefix, list, i, r->text);
    if (e == 0 && log_group && verdict[0] == 'd') {
        char what[32];
        snprintf(what, sizeof(what), "%s[%zu]", list, i);
        e = match(r, out) == 0 ? crl_vnet_log_rule(log_group, slot, what, out) : -1;
    }
    if (e == 0)
        e = match(r, out);
    return e == 0 ? crl_buf_printf(out, " counter %s comment \"%s[%zu] %s\"\n", verdict, list, i,
                                   r->text)
                  : -1;
}

static bool has_names(const struct crl_net_rule *rules, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (rules[i].kind != CRL_NET_RULE_CIDR)
            return true;
    return false;
}

int crl_net_policy_nft(const struct crl_net_policy *p, unsigned slot, uint16_t log_group,
                       struct crl_buf *out)
{
    enum crl_net_mode m = crl_net_policy_mode(p);
    if (m == CRL_NET_NONE)
        return crl_vnet_log_rule(log_group, slot, "mode none", out) == 0
                   ? crl_buf_printf(out, "counter drop comment \"mode none\"\n")
                   : -1;
    for (size_t i = 0; i < p->ndeny; i++)
        if (rule(&p->deny[i], "deny", i, "drop", slot, log_group, out) < 0)
            return -1;
    /* the ports a deny rule by name refuses, of the addresses it resolved to */
    if (has_names(p->deny, p->ndeny)) {
        if (log_group &&
            (crl_buf_printf(out, "meta l4proto { tcp, udp } ip daddr . th dport @s%u%c", slot,
                            CRL_VNET_SET_DENY) < 0 ||
             crl_vnet_log_rule(log_group, slot, CRL_NET_LOG_DENY_NAMES, out) < 0))
            return -1;
        if (crl_buf_printf(out,
                           "meta l4proto { tcp, udp } ip daddr . th dport @s%u%c counter drop"
                           " comment \"" CRL_NET_LOG_DENY_NAMES "\"\n",
                           slot, CRL_VNET_SET_DENY) < 0)
            return -1;
    }
    if (m == CRL_NET_FULL)
        return crl_buf_printf(out, "counter accept comment \"mode full\"\n");
    for (size_t i = 0; i < p->nallow; i++)
        if (rule(&p->allow[i], "allow", i, "accept", slot, log_group, out) < 0)
            return -1;
    if (has_names(p->allow, p->nallow) &&
        crl_buf_printf(out,
                       "meta l4proto { tcp, udp } ip daddr . th dport @s%1$u%2$c counter accept"
                       " comment \"allow: names\"\n"
                       "ip daddr @s%1$u%3$c icmp type echo-request counter accept"
                       " comment \"allow: names: ping\"\n",
                       slot, CRL_VNET_SET_ALLOW, CRL_VNET_SET_HOSTS) < 0)
        return -1;
    return crl_vnet_log_rule(log_group, slot, "not allowed", out) == 0
               ? crl_buf_printf(out, "counter drop comment \"not allowed\"\n")
               : -1;
}
