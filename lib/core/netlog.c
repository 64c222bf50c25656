#include "netlog.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../os/nflog.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "netpolicy.h"
#include "netrules.h"

#define READ_BUDGET 64 /* datagrams a wakeup: the loop's other work goes on in a flood */

struct denial {
    double time;
    char proto[16];                  /* "tcp", "udp", "icmp", "dns", "ip proto N" */
    char addr[INET_ADDRSTRLEN];      /* "" for dns */
    int port;                        /* -1: none */
    char name[CRL_NET_NAME_MAX + 1]; /* "" if unknown */
    char rule[CRL_NET_RULE_MAX + 16];
};

struct ring {
    char owner[sizeof(((struct crl_sandbox *)0)->id)]; /* whose these are */
    struct denial d[CRL_NETLOG_KEEP];
    unsigned next, n;
    uint64_t total, unlogged;
    uint64_t log_second;
    unsigned logged;
};

struct crl_netlog {
    struct crl_loop *loop;
    struct crl_nflog *nf; /* NULL: the kernel's drops are not logged */
    struct crl_watch w;
    struct crl_vnet *v;
    struct crl_resolver *res;
    struct ring **rings; /* by slot, made at a slot's first denial */
    unsigned nslots;
    uint64_t lost_told;    /* of crl_nflog_lost, what was warned of */
    uint64_t lost_told_ns; /* and when */
};

/* The ring of sb's slot, emptied if it was another sandbox's; NULL if out of memory. */
static struct ring *ring_of(struct crl_netlog *n, unsigned slot, const struct crl_sandbox *sb)
{
    struct ring *g = n->rings[slot];
    if (!g && !(g = n->rings[slot] = calloc(1, sizeof(*g))))
        return NULL;
    if (strcmp(g->owner, sb->id) != 0) {
        memset(g, 0, sizeof(*g));
        snprintf(g->owner, sizeof(g->owner), "%s", sb->id);
    }
    return g;
}

static struct denial *push(struct ring *g)
{
    struct denial *d = &g->d[g->next];
    memset(d, 0, sizeof(*d));
    d->time = crl_wall_s();
    d->port = -1;
    g->next = (g->next + 1) % CRL_NETLOG_KEEP;
    if (g->n < CRL_NETLOG_KEEP)
        g->n++;
    g->total++;
    return d;
}

/* May this denial have its log line (within the sandbox's rate)? */
static bool may_log(struct ring *g)
{
    uint64_t second = crl_now_ns() / 1000000000ull;
    if (second != g->log_second) {
        g->log_second = second;
        g->logged = 0;
    }
    if (g->logged < CRL_NETLOG_LOGS_PER_S) {
        g->logged++;
        return true;
    }
    g->unlogged++;
    return false;
}

void crl_netlog_rule_text(const struct crl_net_policy *p, const char *what, const char *name,
                          unsigned port, char *buf, size_t cap)
{
    unsigned long i;
    char *end;
    if (strncmp(what, "deny[", 5) == 0) {
        errno = 0;
        i = strtoul(what + 5, &end, 10);
        if (!errno && end != what + 5 && strcmp(end, "]") == 0 && p && i < p->ndeny) {
            snprintf(buf, cap, "deny[%lu] %s", i, p->deny[i].text);
            return;
        }
    } else if (strcmp(what, CRL_NET_LOG_DENY_NAMES) == 0 && name) {
        /* The set holds the ports of every deny rule by name: the first that
         * takes this name and port is the one. */
        for (i = 0; p && i < p->ndeny; i++) {
            const struct crl_net_rule *r = &p->deny[i];
            if (r->kind != CRL_NET_RULE_CIDR && r->nports && crl_net_name_matches(r, name) &&
                crl_net_port_matches(r, port)) {
                snprintf(buf, cap, "deny[%lu] %s", i, r->text);
                return;
            }
        }
    }
    snprintf(buf, cap, "%s", what);
}

/* "s<slot> <what>": the slot and what; false if it is not one of ours. */
static bool parse_prefix(const char *prefix, unsigned long *slot, const char **what)
{
    if (prefix[0] != 's' || prefix[1] < '0' || prefix[1] > '9')
        return false;
    char *end;
    errno = 0;
    *slot = strtoul(prefix + 1, &end, 10);
    if (errno || *end != ' ' || !end[1])
        return false;
    *what = end + 1;
    return true;
}

static void on_report(void *ctx, const char *prefix, const struct crl_nflog_pkt *pkt)
{
    struct crl_netlog *n = ctx;
    unsigned long slot;
    const char *what;
    if (!pkt || !n->res || !parse_prefix(prefix, &slot, &what) || slot >= n->nslots)
        return;
    struct crl_sandbox *sb = crl_resolver_sandbox(n->res, (unsigned)slot);
    if (!sb)
        return; /* a parked slot's, or one that ended meanwhile */
    struct ring *g = ring_of(n, (unsigned)slot, sb);
    if (!g)
        return;
    struct denial *d = push(g);
    const char *pname = crl_nflog_proto_name(pkt->proto);
    if (pname)
        snprintf(d->proto, sizeof(d->proto), "%s", pname);
    else
        snprintf(d->proto, sizeof(d->proto), "ip proto %u", pkt->proto);
    inet_ntop(AF_INET, pkt->daddr, d->addr, sizeof(d->addr));
    if (pkt->has_ports)
        d->port = pkt->dport;
    const char *name = crl_resolver_name_of(n->res, (unsigned)slot, pkt->daddr);
    if (name)
        snprintf(d->name, sizeof(d->name), "%s", name);
    crl_netlog_rule_text(sb->spec.network, what, name, pkt->has_ports ? pkt->dport : 0, d->rule,
                         sizeof(d->rule));
    if (!may_log(g))
        return;
    char port[8] = "";
    if (d->port >= 0)
        snprintf(port, sizeof(port), ":%d", d->port);
    crl_info(sb->id, "network: denied %s %s%s%s%s%s by %s", d->proto, d->addr, port,
             name ? " (" : "", name ? name : "", name ? ")" : "", d->rule);
}

static void on_refusal(void *ctx, struct crl_sandbox *sb, const char *name,
                       const struct crl_net_rule *rule, bool logged)
{
    struct crl_netlog *n = ctx;
    if (sb->slot >= n->nslots)
        return;
    struct ring *g = ring_of(n, sb->slot, sb);
    if (!g)
        return;
    struct denial *d = push(g);
    snprintf(d->proto, sizeof(d->proto), "dns");
    snprintf(d->name, sizeof(d->name), "%s", name);
    const struct crl_net_policy *p = sb->spec.network;
    const char *list = NULL;
    size_t i = 0;
    if (rule && p && rule >= p->deny && rule < p->deny + p->ndeny)
        list = "deny", i = (size_t)(rule - p->deny);
    else if (rule && p && rule >= p->allow && rule < p->allow + p->nallow)
        list = "allow", i = (size_t)(rule - p->allow);
    if (list)
        snprintf(d->rule, sizeof(d->rule), "%s[%zu] %s", list, i, rule->text);
    else
        snprintf(d->rule, sizeof(d->rule), "%s",
                 rule                                     ? rule->text
                 : crl_net_policy_mode(p) == CRL_NET_NONE ? "mode none"
                                                          : "not allowed");
    if (!logged) /* the resolver wrote the line, or counted it over its rate */
        g->unlogged++;
}

static void on_readable(struct crl_watch *w, uint32_t events)
{
    struct crl_netlog *n = w->data;
    crl_nflog_read(n->nf, READ_BUDGET);
    /* Reports the socket had no room for are lost to every sandbox: said
     * at most once a minute. */
    uint64_t lost = crl_nflog_lost(n->nf), now = crl_now_ns();
    if (lost != n->lost_told && now - n->lost_told_ns >= 60000000000ull) {
        crl_warn(NULL, "network: the NFLOG socket overflowed %llu times: denials went unreported",
                 (unsigned long long)lost);
        n->lost_told = lost;
        n->lost_told_ns = now;
    }
}

int crl_netlog_new(struct crl_loop *loop, uint16_t first_group, struct crl_netlog **out,
                   struct crl_err *err)
{
    struct crl_netlog *n = calloc(1, sizeof(*n));
    if (!n)
        return crl_err_sys(err, ENOMEM, "the denial log");
    n->loop = loop;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_nflog_open(first_group, on_report, n, &n->nf, &e) < 0) {
        crl_warn(NULL, "network: denied connections will not be logged: %s", e.msg);
        n->nf = NULL;
    } else if (crl_watch_start(loop, &n->w, crl_nflog_fd(n->nf), EPOLLIN, on_readable, n) < 0) {
        crl_warn(NULL, "network: denied connections will not be logged: epoll: %s",
                 strerror(errno));
        crl_nflog_free(n->nf);
        n->nf = NULL;
    }
    *out = n;
    return 0;
}

int crl_netlog_bind(struct crl_netlog *n, struct crl_vnet *v, struct crl_resolver *r,
                    struct crl_err *err)
{
    unsigned slots = crl_vnet_slots(v);
    struct ring **rings = calloc(slots, sizeof(*rings));
    if (!rings)
        return crl_err_sys(err, ENOMEM, "the denial log");
    for (unsigned i = 0; i < n->nslots; i++)
        free(n->rings[i]);
    free(n->rings);
    n->rings = rings;
    n->nslots = slots;
    n->v = v;
    n->res = r;
    crl_resolver_on_refusal(r, on_refusal, n);
    return 0;
}

void crl_netlog_free(struct crl_netlog *n)
{
    if (!n)
        return;
    if (n->nf) {
        crl_watch_stop(n->loop, &n->w);
        crl_nflog_free(n->nf);
    }
    for (unsigned i = 0; i < n->nslots; i++)
        free(n->rings[i]);
    free(n->rings);
    free(n);
}

uint16_t crl_netlog_group(const struct crl_netlog *n)
{
    return n->nf ? crl_nflog_group(n->nf) : 0;
}

json_t *crl_netlog_json(const struct crl_netlog *n, const struct crl_sandbox *sb)
{
    const struct ring *g = n && sb->slot < n->nslots ? n->rings[sb->slot] : NULL;
    if (g && strcmp(g->owner, sb->id) != 0)
        g = NULL;
    json_t *list = json_array();
    for (unsigned k = 0; g && list && k < g->n; k++) { /* the oldest first */
        const struct denial *d = &g->d[(g->next + CRL_NETLOG_KEEP - g->n + k) % CRL_NETLOG_KEEP];
        json_t *o = json_pack("{s:o, s:s, s:s}", "time", crl_json_time(d->time), "protocol",
                              d->proto, "rule", d->rule);
        if (o && d->addr[0])
            json_object_set_new(o, "address", json_string(d->addr));
        if (o && d->port >= 0)
            json_object_set_new(o, "port", json_integer(d->port));
        if (o && d->name[0])
            json_object_set_new(o, "name", json_string(d->name));
        json_array_append_new(list, o);
    }
    return json_pack("{s:o, s:I, s:I}", "denied", list ? list : json_array(), "denied_total",
                     (json_int_t)(g ? g->total : 0), "denied_unlogged",
                     (json_int_t)(g ? g->unlogged : 0));
}
