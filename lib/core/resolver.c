#include "resolver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "dns.h"
#include "netpolicy.h"
#include "services.h"

#define MAX_PENDING 1024
#define MAX_UPSTREAMS 3
#define UPSTREAM_TIMEOUT_NS (2000ull * 1000 * 1000) /* then the next upstream, once */
#define TICK_NS (250ull * 1000 * 1000)
#define MIN_TTL_S 60u
#define MAX_TTL_S 86400u
#define LOGS_PER_S 5 /* refusals logged per sandbox and second; the rest counted */

struct pending {
    bool used;
    uint16_t upstream_id;
    unsigned slot;
    unsigned tries;
    struct sockaddr_in from;
    struct crl_dns_question q;
    uint64_t deadline_ns;
};

/* The last addresses answered to a slot, and the names asked for them. */
struct names {
    uint8_t addr[CRL_RESOLVER_NAMES][4];
    char name[CRL_RESOLVER_NAMES][CRL_NET_NAME_MAX + 1];
    unsigned next, n;
};

struct slot_state {
    struct crl_resolver *r;
    struct crl_sandbox *sb;
    struct names *names; /* made at the first answer */
    double tokens;
    uint64_t refill_ns;
    uint64_t log_second;
    unsigned logged;
    struct crl_dns_counters c;
};

/* A sandbox's counter and the resolver's total of it. */
#define COUNT(r, s, f) ((s)->c.f++, (r)->total.f++)

struct crl_resolver {
    struct crl_dns_counters total;
    struct crl_loop *loop;
    struct crl_vnet *v;
    int fd; /* the sandboxes' queries */
    int up; /* to and from the upstreams */
    struct crl_watch w_fd, w_up;
    struct crl_timer tick;
    struct sockaddr_in upstream[MAX_UPSTREAMS];
    unsigned nup;
    struct pending pend[MAX_PENDING];
    unsigned npend;
    struct slot_state *slots;
    unsigned nslots;
    crl_resolver_refusal_cb on_refusal;
    void *refusal_ctx;
};

/* ---- which sandbox asked ---- */

static bool slot_of(const struct crl_resolver *r, const struct sockaddr_in *from, unsigned *slot)
{
    uint32_t a = ntohl(from->sin_addr.s_addr);
    uint32_t base = crl_vnet_address(r->v, 0) - 2;
    if (a < base || (a - base) / 4 >= r->nslots)
        return false;
    *slot = (a - base) / 4;
    return crl_vnet_address(r->v, *slot) == a && r->slots[*slot].sb;
}

struct crl_sandbox *crl_resolver_sandbox_at(const struct crl_resolver *r, uint32_t addr)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(addr)};
    unsigned slot;
    return slot_of(r, &sa, &slot) ? r->slots[slot].sb : NULL;
}

static bool take_token(struct slot_state *s)
{
    uint64_t now = crl_now_ns();
    s->tokens += (double)(now - s->refill_ns) / 1e9 * CRL_RESOLVER_QPS;
    if (s->tokens > CRL_RESOLVER_BURST)
        s->tokens = CRL_RESOLVER_BURST;
    s->refill_ns = now;
    if (s->tokens < 1)
        return false;
    s->tokens -= 1;
    return true;
}

static void reply(struct crl_resolver *r, const struct sockaddr_in *to, const uint8_t *pkt,
                  size_t len)
{
    /* A full socket buffer loses the answer, as UDP may: the client asks again. */
    sendto(r->fd, pkt, len, MSG_DONTWAIT, (const struct sockaddr *)to, sizeof(*to));
}

static void answer_error(struct crl_resolver *r, const struct sockaddr_in *to,
                         const struct crl_dns_question *q, unsigned rcode)
{
    uint8_t *pkt = NULL;
    size_t len;
    if (crl_dns_error_answer(q, rcode, &pkt, &len) == 0)
        reply(r, to, pkt, len);
    free(pkt);
}

/* A service's name: its address, whatever the policy (the spec named it). */
static void answer_service(struct crl_resolver *r, const struct sockaddr_in *to,
                           const struct crl_dns_question *q, size_t index)
{
    if (q->qtype != CRL_DNS_A) {
        answer_error(r, to, q, CRL_DNS_NOERROR);
        return;
    }
    uint32_t be = htonl(crl_service_address(index));
    uint8_t *pkt = NULL;
    size_t len;
    if (crl_dns_a_answer(q, (const uint8_t *)&be, MIN_TTL_S, &pkt, &len) == 0)
        reply(r, to, pkt, len);
    free(pkt);
}

static void log_refusal(struct slot_state *s, const struct crl_dns_question *q,
                        const struct crl_net_rule *rule)
{
    uint64_t second = crl_now_ns() / 1000000000ull;
    if (second != s->log_second) {
        s->log_second = second;
        s->logged = 0;
    }
    bool logged = s->logged++ < LOGS_PER_S;
    if (s->r->on_refusal)
        s->r->on_refusal(s->r->refusal_ctx, s->sb, q->name[0] ? q->name : ".", rule, logged);
    if (!logged)
        return;
    crl_info(s->sb->id, "network: DNS %s refused (%s)", q->name[0] ? q->name : ".",
             rule ? rule->text : "not allowed");
}

/* ---- asking upstream ---- */

static struct pending *pending_new(struct crl_resolver *r)
{
    if (r->npend >= MAX_PENDING)
        return NULL;
    for (unsigned i = 0; i < MAX_PENDING; i++)
        if (!r->pend[i].used) {
            r->npend++;
            r->pend[i].used = true;
            return &r->pend[i];
        }
    return NULL;
}

static void pending_end(struct crl_resolver *r, struct pending *p)
{
    p->used = false;
    r->npend--;
}

static uint16_t fresh_id(const struct crl_resolver *r)
{
    for (;;) {
        uint16_t id;
        if (getrandom(&id, sizeof(id), 0) != sizeof(id))
            id = (uint16_t)crl_now_ns();
        bool taken = false;
        for (unsigned i = 0; i < MAX_PENDING && !taken; i++)
            taken = r->pend[i].used && r->pend[i].upstream_id == id;
        if (!taken)
            return id;
    }
}

static int ask(struct crl_resolver *r, struct pending *p)
{
    uint8_t *pkt = NULL;
    size_t len;
    p->upstream_id = fresh_id(r);
    p->deadline_ns = crl_now_ns() + UPSTREAM_TIMEOUT_NS;
    const struct sockaddr_in *to = &r->upstream[p->tries % r->nup];
    p->tries++;
    int rc = crl_dns_build_query(&p->q, p->upstream_id, &pkt, &len);
    if (rc == 0 &&
        sendto(r->up, pkt, len, MSG_DONTWAIT, (const struct sockaddr *)to, sizeof(*to)) < 0)
        rc = -1;
    free(pkt);
    return rc;
}

static void fail(struct crl_resolver *r, struct pending *p)
{
    COUNT(r, &r->slots[p->slot], failed);
    answer_error(r, &p->from, &p->q, CRL_DNS_SERVFAIL);
    pending_end(r, p);
}

static void on_query(struct crl_watch *w, uint32_t events)
{
    struct crl_resolver *r = w->data;
    for (int n = 0; n < 64; n++) {
        uint8_t buf[CRL_DNS_MAX_PACKET];
        struct sockaddr_in from;
        socklen_t fl = sizeof(from);
        ssize_t len = recvfrom(r->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC,
                               (struct sockaddr *)&from, &fl);
        if (len < 0)
            return;
        unsigned slot;
        if (!slot_of(r, &from, &slot))
            continue; /* not one of our sandboxes: not a client of this resolver */
        struct slot_state *s = &r->slots[slot];
        COUNT(r, s, queries);
        struct crl_dns_question q;
        if ((size_t)len > sizeof(buf) || crl_dns_parse_query(buf, (size_t)len, &q, NULL) < 0) {
            COUNT(r, s, malformed);
            continue;
        }
        /* A service's name is answered here, at the cost of the parse: no
         * limit (an agent's client may resolve it for every request). */
        size_t k;
        if (q.qclass == 1 && crl_services_find(s->sb->spec.services, q.name, &k)) {
            COUNT(r, s, answered);
            answer_service(r, &from, &q, k);
            continue;
        }
        if (!take_token(s)) {
            COUNT(r, s, limited);
            continue;
        }
        bool allowed = false;
        const struct crl_net_rule *rule =
            q.qclass == 1 ? crl_net_policy_decide_name(s->sb->spec.network, q.name, &allowed)
                          : NULL;
        if (!allowed) {
            COUNT(r, s, refused);
            log_refusal(s, &q, rule);
            answer_error(r, &from, &q, CRL_DNS_REFUSED);
            continue;
        }
        if (q.qtype == CRL_DNS_AAAA) { /* IPv6 is off: the name has no address of it */
            COUNT(r, s, answered);
            answer_error(r, &from, &q, CRL_DNS_NOERROR);
            continue;
        }
        struct pending *p = pending_new(r);
        if (!p) {
            COUNT(r, s, failed);
            answer_error(r, &from, &q, CRL_DNS_SERVFAIL);
            continue;
        }
        p->slot = slot;
        p->from = from;
        p->q = q;
        p->tries = 0;
        if (ask(r, p) < 0)
            fail(r, p);
    }
}

/* ---- the answer ---- */

/* Never reached by a name unless an address rule says so: what DNS
 * rebinding would point at (RFC 1918, loopback, CGNAT, link-local,
 * multicast, reserved, "this network"). */
static bool private_ipv4(const uint8_t a[4])
{
    return a[0] == 0 || a[0] == 10 || a[0] == 127 || a[0] >= 224 ||
           (a[0] == 100 && (a[1] & 0xc0) == 64) || (a[0] == 169 && a[1] == 254) ||
           (a[0] == 172 && (a[1] & 0xf0) == 16) || (a[0] == 192 && a[1] == 168);
}

struct keep_ctx {
    struct crl_resolver *r;
    unsigned slot;
    const struct crl_net_policy *p;
    const struct crl_net_rule *allow; /* the rule that admitted the name, NULL in mode full */
    const struct crl_net_rule *deny;  /* a deny rule of the name's with ports */
    const char *name;                 /* asked for */
    struct crl_buf a, h, d;           /* elements for the sets */
    uint32_t ttl;
    bool oom;
};

static void elements(struct crl_buf *b, const char *addr, const struct crl_net_rule *rule,
                     bool *oom)
{
    if (!rule || rule->nports == 0) {
        *oom |= crl_buf_printf(b, "%s%s . 1-65535", b->len ? ", " : "", addr) < 0;
        return;
    }
    for (unsigned i = 0; i < rule->nports; i++)
        *oom |= crl_buf_printf(b, "%s%s . %u-%u", b->len ? ", " : "", addr, rule->ports[i].lo,
                               rule->ports[i].hi) < 0;
}

/* The name `addr` was an answer for: the oldest remembered gives way. */
static void remember(struct slot_state *s, const uint8_t addr[4], const char *name)
{
    if (!s->names && !(s->names = calloc(1, sizeof(*s->names))))
        return; /* a denial then goes without its name */
    struct names *m = s->names;
    memcpy(m->addr[m->next], addr, 4);
    snprintf(m->name[m->next], sizeof(m->name[0]), "%s", name);
    m->next = (m->next + 1) % CRL_RESOLVER_NAMES;
    if (m->n < CRL_RESOLVER_NAMES)
        m->n++;
}

const char *crl_resolver_name_of(const struct crl_resolver *r, unsigned slot, const uint8_t addr[4])
{
    const struct names *m = slot < r->nslots ? r->slots[slot].names : NULL;
    for (unsigned i = 1; m && i <= m->n; i++) {
        unsigned at = (m->next + CRL_RESOLVER_NAMES - i) % CRL_RESOLVER_NAMES;
        if (memcmp(m->addr[at], addr, 4) == 0)
            return m->name[at];
    }
    return NULL;
}

static bool keep(const uint8_t addr[4], uint32_t ttl, void *ctx)
{
    struct keep_ctx *k = ctx;
    bool cidr_allowed = false;
    const struct crl_net_rule *by =
        crl_net_policy_decide_addr(k->p, AF_INET, addr, 0, &cidr_allowed);
    bool explicit_allow = cidr_allowed && by && by->kind == CRL_NET_RULE_CIDR;
    if (by && !cidr_allowed && by->nports == 0)
        return false; /* an address rule denies it */
    /* Mode full reaches private addresses anyway; never loopback or link-local. */
    bool full = crl_net_policy_mode(k->p) == CRL_NET_FULL;
    if (full ? addr[0] == 127 || (addr[0] == 169 && addr[1] == 254)
             : private_ipv4(addr) && !explicit_allow)
        return false;
    uint32_t a =
        (uint32_t)addr[0] << 24 | (uint32_t)addr[1] << 16 | (uint32_t)addr[2] << 8 | addr[3];
    uint32_t base = crl_vnet_address(k->r->v, 0) - 2;
    if (a >= base && (a - base) / 4 < k->r->nslots)
        return false; /* a sandbox's */
    char s[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, addr, s, sizeof(s));
    if (crl_net_policy_mode(k->p) == CRL_NET_ALLOW) {
        elements(&k->a, s, k->allow, &k->oom);
        k->oom |= crl_buf_printf(&k->h, "%s%s", k->h.len ? ", " : "", s) < 0;
    }
    if (k->deny)
        elements(&k->d, s, k->deny, &k->oom);
    remember(&k->r->slots[k->slot], addr, k->name);
    if (ttl < k->ttl)
        k->ttl = ttl;
    return true;
}

/* A deny rule of the name's that has ports (those without refused it). */
static const struct crl_net_rule *port_deny(const struct crl_net_policy *p, const char *name)
{
    for (size_t i = 0; p && i < p->ndeny; i++)
        if (p->deny[i].nports && crl_net_name_matches(&p->deny[i], name))
            return &p->deny[i];
    return NULL;
}

static void on_upstream(struct crl_watch *w, uint32_t events)
{
    struct crl_resolver *r = w->data;
    for (int n = 0; n < 64; n++) {
        uint8_t buf[CRL_DNS_MAX_PACKET];
        struct sockaddr_in from;
        socklen_t fl = sizeof(from);
        ssize_t len = recvfrom(r->up, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC,
                               (struct sockaddr *)&from, &fl);
        if (len < 0)
            return;
        if (len < 2 || (size_t)len > sizeof(buf))
            continue;
        bool known = false;
        for (unsigned i = 0; i < r->nup && !known; i++)
            known = r->upstream[i].sin_addr.s_addr == from.sin_addr.s_addr &&
                    r->upstream[i].sin_port == from.sin_port;
        uint16_t id = (uint16_t)(buf[0] << 8 | buf[1]);
        struct pending *p = NULL;
        for (unsigned i = 0; known && i < MAX_PENDING && !p; i++)
            if (r->pend[i].used && r->pend[i].upstream_id == id)
                p = &r->pend[i];
        if (!p)
            continue; /* late, spoofed or not ours */
        struct slot_state *s = &r->slots[p->slot];
        const struct crl_net_policy *pol = s->sb->spec.network;
        bool allowed;
        struct keep_ctx k = {
            .r = r, .slot = p->slot, .p = pol, .ttl = MAX_TTL_S, .name = p->q.name};
        const struct crl_net_rule *by = crl_net_policy_decide_name(pol, p->q.name, &allowed);
        k.allow = crl_net_policy_mode(pol) == CRL_NET_ALLOW ? by : NULL;
        k.deny = port_deny(pol, p->q.name);
        crl_buf_init(&k.a, CRL_BUF_UNBOUNDED);
        crl_buf_init(&k.h, CRL_BUF_UNBOUNDED);
        crl_buf_init(&k.d, CRL_BUF_UNBOUNDED);
        uint8_t *out = NULL;
        size_t outlen;
        struct crl_err e = CRL_ERR_INIT;
        if (crl_dns_filter_answer(buf, (size_t)len, &p->q, p->upstream_id, keep, &k, &out, &outlen,
                                  &e) < 0) {
            crl_buf_free(&k.a);
            crl_buf_free(&k.h);
            crl_buf_free(&k.d);
            continue; /* not an answer to it: wait for the right one */
        }
        unsigned ttl = k.ttl < MIN_TTL_S ? MIN_TTL_S : k.ttl;
        int rc = k.oom ? crl_err_sys(&e, ENOMEM, "set elements") : 0;
        if (rc == 0 && k.a.len)
            rc = crl_vnet_add_elements(r->v, p->slot, CRL_VNET_SET_ALLOW, k.a.data, ttl, &e);
        if (rc == 0 && k.h.len)
            rc = crl_vnet_add_elements(r->v, p->slot, CRL_VNET_SET_HOSTS, k.h.data, ttl, &e);
        if (rc == 0 && k.d.len)
            rc = crl_vnet_add_elements(r->v, p->slot, CRL_VNET_SET_DENY, k.d.data, ttl, &e);
        if (rc < 0) {
            crl_warn(s->sb->id, "network: DNS %s: %s", p->q.name, e.msg);
            fail(r, p);
        } else {
            COUNT(r, s, answered);
            reply(r, &p->from, out, outlen);
            pending_end(r, p);
        }
        free(out);
        crl_buf_free(&k.a);
        crl_buf_free(&k.h);
        crl_buf_free(&k.d);
    }
}

static void on_tick(struct crl_timer *t)
{
    struct crl_resolver *r = t->data;
    uint64_t now = crl_now_ns();
    for (unsigned i = 0; r->npend && i < MAX_PENDING; i++) {
        struct pending *p = &r->pend[i];
        if (!p->used || p->deadline_ns > now)
            continue;
        if (p->tries >= 2 || ask(r, p) < 0) /* the next upstream, once */
            fail(r, p);
    }
    crl_timer_start(r->loop, &r->tick, TICK_NS, on_tick, r);
}

/* ---- life ---- */

static int udp_socket(uint16_t port, struct crl_err *err)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "socket");
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (port && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        close(fd);
        return crl_err_sys(err, e, "bind the sandboxes' resolver to UDP port %u", port);
    }
    return fd;
}

int crl_resolver_new(struct crl_loop *loop, struct crl_vnet *v, uint16_t port,
                     const char *upstreams, struct crl_resolver **out, struct crl_err *err)
{
    struct crl_resolver *r = calloc(1, sizeof(*r));
    if (!r)
        return crl_err_sys(err, ENOMEM, "resolver");
    r->loop = loop;
    r->v = v;
    r->fd = r->up = -1;
    char list[256], *save = NULL;
    snprintf(list, sizeof(list), "%s", upstreams ? upstreams : "");
    for (char *a = strtok_r(list, " ", &save); a && r->nup < MAX_UPSTREAMS;
         a = strtok_r(NULL, " ", &save)) {
        struct sockaddr_in *u = &r->upstream[r->nup];
        u->sin_family = AF_INET;
        u->sin_port = htons(53);
        if (inet_pton(AF_INET, a, &u->sin_addr) == 1)
            r->nup++;
    }
    if (!r->nup) {
        free(r);
        return crl_err_set(err, CRL_E_UNAVAILABLE,
                           "no upstream resolver for sandboxes: give --dns-upstream (the "
                           "host's /etc/resolv.conf names no IPv4 nameserver)");
    }
    r->nslots = crl_vnet_slots(v);
    if (!(r->slots = calloc(r->nslots, sizeof(*r->slots)))) {
        free(r);
        return crl_err_sys(err, ENOMEM, "resolver");
    }
    if ((r->fd = udp_socket(port, err)) < 0 || (r->up = udp_socket(0, err)) < 0 ||
        crl_watch_start(loop, &r->w_fd, r->fd, EPOLLIN, on_query, r) < 0 ||
        crl_watch_start(loop, &r->w_up, r->up, EPOLLIN, on_upstream, r) < 0) {
        if (r->fd >= 0 && r->up >= 0)
            crl_err_sys(err, errno, "watch the resolver's sockets");
        crl_resolver_free(r);
        return -1;
    }
    crl_timer_start(loop, &r->tick, TICK_NS, on_tick, r);
    *out = r;
    return 0;
}

void crl_resolver_free(struct crl_resolver *r)
{
    if (!r)
        return;
    crl_watch_stop(r->loop, &r->w_fd);
    crl_watch_stop(r->loop, &r->w_up);
    crl_timer_stop(r->loop, &r->tick);
    close_fd(&r->fd);
    close_fd(&r->up);
    for (unsigned i = 0; r->slots && i < r->nslots; i++)
        free(r->slots[i].names);
    free(r->slots);
    free(r);
}

void crl_resolver_attach(struct crl_resolver *r, unsigned slot, struct crl_sandbox *sb)
{
    if (slot >= r->nslots)
        return;
    struct slot_state *s = &r->slots[slot];
    free(s->names);
    memset(s, 0, sizeof(*s));
    s->r = r;
    s->sb = sb;
    s->tokens = CRL_RESOLVER_BURST;
    s->refill_ns = crl_now_ns();
}

void crl_resolver_detach(struct crl_resolver *r, unsigned slot)
{
    if (slot >= r->nslots)
        return;
    for (unsigned i = 0; r->npend && i < MAX_PENDING; i++)
        if (r->pend[i].used && r->pend[i].slot == slot)
            pending_end(r, &r->pend[i]);
    r->slots[slot].sb = NULL;
    free(r->slots[slot].names);
    r->slots[slot].names = NULL;
}

struct crl_sandbox *crl_resolver_sandbox(const struct crl_resolver *r, unsigned slot)
{
    return slot < r->nslots ? r->slots[slot].sb : NULL;
}

void crl_resolver_on_refusal(struct crl_resolver *r, crl_resolver_refusal_cb cb, void *ctx)
{
    r->on_refusal = cb;
    r->refusal_ctx = ctx;
}

json_t *crl_resolver_slot_json(const struct crl_resolver *r, unsigned slot)
{
    if (slot >= r->nslots)
        return json_null();
    const struct crl_dns_counters *c = &r->slots[slot].c;
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "queries", (json_int_t)c->queries,
                     "answered", (json_int_t)c->answered, "refused", (json_int_t)c->refused,
                     "limited", (json_int_t)c->limited, "malformed", (json_int_t)c->malformed,
                     "failed", (json_int_t)c->failed);
}

const struct crl_dns_counters *crl_resolver_totals(const struct crl_resolver *r)
{
    return &r->total;
}
