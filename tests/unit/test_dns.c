/* lib/core/dns: the packets of the sandboxes' resolver.  Queries and
 * upstream answers are written here byte by byte (what a hostile sandbox
 * or upstream could send); what dns.c builds is read back with ldns. */
#include <ldns/ldns.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/dns.h"
#include "tap.h"

/* ---- a packet writer ---- */

struct pkt {
    uint8_t b[CRL_DNS_MAX_PACKET + 64];
    size_t n;
};

static void put8(struct pkt *p, unsigned v)
{
    if (p->n >= sizeof(p->b))
        bail_out("test packet too large");
    p->b[p->n++] = (uint8_t)v;
}

static void put16(struct pkt *p, unsigned v)
{
    put8(p, v >> 8);
    put8(p, v & 0xff);
}

static void put32(struct pkt *p, uint32_t v)
{
    put16(p, v >> 16);
    put16(p, v & 0xffff);
}

static void putbytes(struct pkt *p, const void *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put8(p, ((const uint8_t *)d)[i]);
}

/* flags: the header's second 16 bits (QR, opcode, AA, TC, RD, RA, rcode). */
enum { QR = 0x8000, RD = 0x0100, RA = 0x0080 };

static void header(struct pkt *p, unsigned id, unsigned flags, unsigned qd, unsigned an,
                   unsigned ns, unsigned ar)
{
    p->n = 0;
    put16(p, id);
    put16(p, flags);
    put16(p, qd);
    put16(p, an);
    put16(p, ns);
    put16(p, ar);
}

/* A dotted name as labels (no escapes: a test wanting odd bytes writes them). */
static void name(struct pkt *p, const char *dotted)
{
    while (*dotted) {
        const char *dot = strchr(dotted, '.');
        size_t n = dot ? (size_t)(dot - dotted) : strlen(dotted);
        put8(p, (unsigned)n);
        putbytes(p, dotted, n);
        dotted += n + (dot ? 1 : 0);
    }
    put8(p, 0);
}

static void question(struct pkt *p, const char *qname, unsigned type, unsigned class)
{
    name(p, qname);
    put16(p, type);
    put16(p, class);
}

static void rr_a(struct pkt *p, const char *owner, unsigned class, uint32_t ttl, uint8_t a,
                 uint8_t b, uint8_t c, uint8_t d)
{
    name(p, owner);
    put16(p, CRL_DNS_A);
    put16(p, class);
    put32(p, ttl);
    put16(p, 4);
    put8(p, a);
    put8(p, b);
    put8(p, c);
    put8(p, d);
}

static void rr_aaaa(struct pkt *p, const char *owner)
{
    static const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1};
    name(p, owner);
    put16(p, CRL_DNS_AAAA);
    put16(p, 1);
    put32(p, 300);
    put16(p, 16);
    putbytes(p, v6, sizeof(v6));
}

static void rr_cname(struct pkt *p, const char *owner, const char *target)
{
    name(p, owner);
    put16(p, CRL_DNS_CNAME);
    put16(p, 1);
    put32(p, 300);
    size_t at = p->n;
    put16(p, 0);
    name(p, target);
    size_t len = p->n - at - 2;
    p->b[at] = (uint8_t)(len >> 8);
    p->b[at + 1] = (uint8_t)len;
}

/* An NS record (authority) pointing at ns.<owner>. */
static void rr_ns(struct pkt *p, const char *owner)
{
    name(p, owner);
    put16(p, 2);
    put16(p, 1);
    put32(p, 300);
    put16(p, 5);
    putbytes(p, "\x02ns\xc0\x0c", 5); /* ns.<the question's name> */
}

static void query(struct pkt *p, unsigned id, const char *qname, unsigned type)
{
    header(p, id, RD, 1, 0, 0, 0);
    question(p, qname, type, 1);
}

static int parse(const struct pkt *p, struct crl_dns_question *q, struct crl_err *e)
{
    memset(q, 0xa5, sizeof(*q));
    crl_err_clear(e);
    return crl_dns_parse_query(p->b, p->n, q, e);
}

/* The query p is refused as invalid, the message holding `sub`. */
static void refused(const struct pkt *p, const char *sub, const char *what)
{
    struct crl_dns_question q;
    struct crl_err e = CRL_ERR_INIT;
    int r = parse(p, &q, &e);
    if (!ok(r < 0 && e.code == CRL_E_INVALID, "refused: %s", what))
        diag("returned %d, code %s, message '%s'", r, crl_errc_name(e.code), e.msg);
    if (!ok(strstr(e.msg, sub) != NULL, "%s: the message says '%s'", what, sub))
        diag("message: '%s'", e.msg);
}

static ldns_pkt *read_back(const uint8_t *b, size_t n, const char *what)
{
    ldns_pkt *p = NULL;
    if (!ok(ldns_wire2pkt(&p, b, n) == LDNS_STATUS_OK, "%s: ldns reads it", what))
        return NULL;
    return p;
}

/* p's question is `qname` (case-insensitively, in its presentation form). */
static bool has_question(const ldns_pkt *p, const char *qname, unsigned type, unsigned class)
{
    if (ldns_pkt_qdcount(p) != 1 || ldns_rr_list_rr_count(ldns_pkt_question(p)) != 1)
        return false;
    ldns_rr *rr = ldns_rr_list_rr(ldns_pkt_question(p), 0);
    char *s = ldns_rdf2str(ldns_rr_owner(rr));
    bool same = s && strcasecmp(s, qname) == 0;
    if (!same)
        diag("question name '%s', expected '%s'", s ? s : "(null)", qname);
    free(s);
    return same && ldns_rr_get_type(rr) == type && ldns_rr_get_class(rr) == class;
}

/* ---- queries ---- */

static void test_parse_query(void)
{
    struct pkt p;
    struct crl_dns_question q;
    struct crl_err e = CRL_ERR_INIT;
    query(&p, 0x1234, "WWW.Example.COM", CRL_DNS_A);
    is_int(parse(&p, &q, &e), 0, "an A query parses");
    is_int(q.id, 0x1234, "its id");
    is_str(q.name, "www.example.com", "its name, lowercased, without the trailing dot");
    is_int(q.qtype, CRL_DNS_A, "its type");
    is_int(q.qclass, 1, "its class");
    ok(q.rd, "recursion desired");

    header(&p, 7, 0, 1, 0, 0, 0);
    question(&p, "example", CRL_DNS_AAAA, 3);
    is_int(parse(&p, &q, &e), 0, "an AAAA query of class CH, RD clear, parses");
    ok(!q.rd && q.qtype == CRL_DNS_AAAA && q.qclass == 3 && q.id == 7, "its fields");

    query(&p, 1, "", CRL_DNS_A);
    is_int(parse(&p, &q, &e), 0, "a query for the root parses");
    is_str(q.name, "", "the root's name is empty");

    /* EDNS (an OPT record in the additional section) is what stub resolvers send */
    query(&p, 2, "example.org", CRL_DNS_A);
    p.b[11] = 1; /* arcount */
    put8(&p, 0);
    put16(&p, 41);
    put16(&p, 1232);
    put32(&p, 0);
    put16(&p, 0);
    is_int(parse(&p, &q, &e), 0, "a query with an EDNS OPT record parses");
    is_str(q.name, "example.org", "its name");
}

static void test_refused(void)
{
    struct pkt p;
    header(&p, 1, QR | RD, 1, 0, 0, 0);
    question(&p, "example.com", CRL_DNS_A, 1);
    refused(&p, "not a query", "a response (QR 1)");

    header(&p, 1, (2u << 11) | RD, 1, 0, 0, 0); /* opcode STATUS */
    question(&p, "example.com", CRL_DNS_A, 1);
    refused(&p, "not a query", "opcode STATUS");
    header(&p, 1, (4u << 11), 1, 0, 0, 0); /* opcode NOTIFY */
    question(&p, "example.com", CRL_DNS_A, 1);
    refused(&p, "not a query", "opcode NOTIFY");

    header(&p, 1, RD, 0, 0, 0, 0);
    refused(&p, "not one question", "no question");
    header(&p, 1, RD, 2, 0, 0, 0);
    question(&p, "example.com", CRL_DNS_A, 1);
    question(&p, "example.net", CRL_DNS_A, 1);
    refused(&p, "not one question", "two questions");

    header(&p, 1, RD, 1, 1, 0, 0);
    question(&p, "example.com", CRL_DNS_A, 1);
    rr_a(&p, "example.com", 1, 60, 192, 0, 2, 1);
    refused(&p, "with answers", "a query carrying an answer record");
    header(&p, 1, RD, 1, 0, 1, 0);
    question(&p, "example.com", CRL_DNS_A, 1);
    rr_ns(&p, "example.com");
    refused(&p, "with answers", "a query carrying an authority record");

    /* TSIG records: libldns keeps the last of several and loses the rest */
    header(&p, 1, RD, 1, 0, 0, 2);
    question(&p, "example.com", CRL_DNS_A, 1);
    for (int i = 0; i < 2; i++) {
        name(&p, "key.example");
        put16(&p, 250);
        put16(&p, 255);
        put32(&p, 0);
        put16(&p, 2);
        put16(&p, 0xc00c); /* the key's algorithm: a pointer to the question's name */
    }
    refused(&p, "a TSIG record", "a query with two TSIG records");

    /* every proper prefix of a good query, and counts beyond the records */
    struct pkt good;
    query(&good, 9, "www.example.com", CRL_DNS_A);
    int bad = 0;
    for (size_t n = 0; n < good.n; n++) {
        struct pkt t = good;
        t.n = n;
        struct crl_dns_question q;
        struct crl_err e = CRL_ERR_INIT;
        if (parse(&t, &q, &e) == 0 || e.code != CRL_E_INVALID)
            bad++;
    }
    is_int(bad, 0, "each of the %zu truncations of a query is refused", good.n);
    struct pkt t = good;
    t.b[5] = 2; /* qdcount 2, one there */
    refused(&t, "malformed", "a question count beyond the packet");
    t = good;
    t.b[9] = 1; /* nscount 1, none there */
    refused(&t, "malformed", "an authority count beyond the packet");

    struct pkt big = good;
    while (big.n <= CRL_DNS_MAX_PACKET)
        put8(&big, 0);
    refused(&big, "too large", "a packet over CRL_DNS_MAX_PACKET");

    /* compression pointer loops */
    header(&p, 1, RD, 1, 0, 0, 0);
    putbytes(&p, "\xc0\x0c\x00\x01\x00\x01", 6); /* the name points at itself */
    refused(&p, "malformed", "a name pointing at itself");
    header(&p, 1, RD, 1, 0, 0, 0);
    putbytes(&p,
             "\x01"
             "a\xc0\x0c\x00\x01\x00\x01",
             8); /* a label, then back to it */
    refused(&p, "malformed", "a name looping through a label");
    header(&p, 1, RD, 1, 0, 0, 0);
    putbytes(&p, "\xc0\x0e\xc0\x0c\x00\x01\x00\x01", 8); /* two pointers at each other */
    refused(&p, "malformed", "two pointers at each other");
    header(&p, 1, RD, 1, 0, 0, 0);
    putbytes(&p, "\xc0\xff\x00\x01\x00\x01", 6); /* past the end */
    refused(&p, "malformed", "a pointer past the end");
    header(&p, 1, RD, 1, 0, 0, 0);
    putbytes(&p,
             "\x41"
             "a\x00\x00\x01\x00\x01",
             7); /* label type 01 (reserved) */
    refused(&p, "malformed", "a reserved label type");
}

/* Names whose labels hold '.', '\\', NUL, a space or bytes over 127: each is
 * refused or comes back the same on the wire (lowercased), never garbled. */
static void test_odd_names(void)
{
    static const struct {
        const char *label;
        size_t len;
    } odd[] = {
        {"a.b", 3},    {"a\\b", 3},  {"a\0b", 3},    {"a b", 3}, {"\xff\x80", 2},
        {"\\", 1},     {".", 1},     {"a\\", 2},     {"a.", 2},  {"\"", 1},
        {"(x);$@", 6}, {"\\065", 4}, {"AbC\x7f", 4}, {"", 0},
    };
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        struct pkt p;
        header(&p, 0x4242, RD, 1, 0, 0, 0);
        size_t start = p.n;
        put8(&p, (unsigned)odd[i].len);
        putbytes(&p, odd[i].label, odd[i].len);
        if (odd[i].len)
            name(&p, "example");
        size_t end = p.n;
        put16(&p, CRL_DNS_A);
        put16(&p, 1);
        uint8_t want[300];
        size_t wn = end - start;
        for (size_t k = 0; k < wn; k++) {
            uint8_t c = p.b[start + k];
            want[k] = c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c;
        }

        struct crl_dns_question q;
        struct crl_err e = CRL_ERR_INIT;
        if (parse(&p, &q, &e) < 0) {
            ok(e.code == CRL_E_INVALID, "odd name %zu: refused (%s)", i, e.msg);
            continue;
        }
        ok(memchr(q.name, 0, sizeof(q.name)) != NULL, "odd name %zu ('%s'): parsed", i, q.name);
        uint8_t *out = NULL;
        size_t n = 0;
        if (!ok(crl_dns_build_query(&q, 0x77, &out, &n) == 0, "odd name %zu: built upstream", i))
            continue;
        ok(n >= 12 + wn && memcmp(out + 12, want, wn) == 0,
           "odd name %zu: the upstream query asks for the same name", i);
        free(out);
        if (!ok(crl_dns_error_answer(&q, CRL_DNS_REFUSED, &out, &n) == 0,
                "odd name %zu: an error answer", i))
            continue;
        ok(n >= 12 + wn && memcmp(out + 12, want, wn) == 0,
           "odd name %zu: the answer's question is the same name", i);
        free(out);
    }

    /* the longest name (255 bytes on the wire) of escaped bytes: too long as text */
    struct pkt p;
    header(&p, 1, RD, 1, 0, 0, 0);
    for (int l = 0; l < 4; l++) {
        unsigned n = l < 3 ? 63 : 61;
        put8(&p, n);
        for (unsigned k = 0; k < n; k++)
            put8(&p, 0);
    }
    put8(&p, 0);
    put16(&p, CRL_DNS_A);
    put16(&p, 1);
    refused(&p, "too long", "a 255-byte name of NULs");
}

/* ---- answers we build ---- */

static void test_error_answer(void)
{
    struct pkt p;
    struct crl_dns_question q;
    struct crl_err e = CRL_ERR_INIT;
    query(&p, 0xabcd, "Mail.Example.ORG", CRL_DNS_A);
    if (parse(&p, &q, &e) < 0)
        bail_out("a good query refused");
    static const unsigned rcodes[] = {CRL_DNS_REFUSED, CRL_DNS_NXDOMAIN, CRL_DNS_SERVFAIL,
                                      CRL_DNS_NOERROR};
    for (size_t i = 0; i < sizeof(rcodes) / sizeof(rcodes[0]); i++) {
        uint8_t *out = NULL;
        size_t n = 0;
        if (!ok(crl_dns_error_answer(&q, rcodes[i], &out, &n) == 0, "rcode %u: built", rcodes[i]))
            continue;
        ldns_pkt *a = read_back(out, n, "the error answer");
        if (a) {
            is_int(ldns_pkt_id(a), 0xabcd, "rcode %u: the query's id", rcodes[i]);
            ok(ldns_pkt_qr(a) && ldns_pkt_get_opcode(a) == LDNS_PACKET_QUERY,
               "rcode %u: a response to a query", rcodes[i]);
            is_int(ldns_pkt_get_rcode(a), rcodes[i], "rcode %u: the rcode", rcodes[i]);
            ok(ldns_pkt_rd(a), "rcode %u: RD as asked", rcodes[i]);
            ok(has_question(a, "mail.example.org.", CRL_DNS_A, 1), "rcode %u: the same question",
               rcodes[i]);
            ok(!ldns_pkt_ancount(a) && !ldns_pkt_nscount(a) && !ldns_pkt_arcount(a),
               "rcode %u: no records", rcodes[i]);
            ldns_pkt_free(a);
        }
        struct crl_dns_question back;
        is_int(crl_dns_parse_query(out, n, &back, &e), -1, "rcode %u: not taken for a query",
               rcodes[i]);
        free(out);
    }
}

static void test_build_query(void)
{
    struct pkt p;
    struct crl_dns_question q, back;
    struct crl_err e = CRL_ERR_INIT;
    query(&p, 0x1111, "Deb.Debian.Org", CRL_DNS_AAAA);
    p.b[3] = 0; /* clear RD... */
    p.b[2] = 0;
    if (parse(&p, &q, &e) < 0)
        bail_out("a good query refused");
    for (int rd = 0; rd < 2; rd++) {
        q.rd = rd;
        uint8_t *out = NULL;
        size_t n = 0;
        if (!ok(crl_dns_build_query(&q, 0xbeef, &out, &n) == 0, "rd %d: built", rd))
            continue;
        memset(&back, 0, sizeof(back));
        is_int(crl_dns_parse_query(out, n, &back, &e), 0, "rd %d: parses as a query", rd);
        ok(back.id == 0xbeef && back.rd == q.rd && back.qtype == q.qtype &&
               back.qclass == q.qclass && strcmp(back.name, q.name) == 0,
           "rd %d: the same question, the new id", rd);
        free(out);
    }
    query(&p, 1, "", CRL_DNS_A);
    uint8_t *out = NULL;
    size_t n = 0;
    if (parse(&p, &q, &e) == 0 && crl_dns_build_query(&q, 2, &out, &n) == 0 &&
        crl_dns_parse_query(out, n, &back, &e) == 0)
        is_str(back.name, "", "the root round-trips");
    else
        fail("the root round-trips");
    free(out);
}

/* ---- upstream answers ---- */

struct kept {
    int calls;
    uint8_t addr[8][4];
    uint32_t ttl[8];
};

/* Keeps every address but 10.0.0.0/8; records what it was offered. */
static bool keep(const uint8_t addr[4], uint32_t ttl, void *ctx)
{
    struct kept *k = ctx;
    if (k->calls < 8) {
        memcpy(k->addr[k->calls], addr, 4);
        k->ttl[k->calls] = ttl;
    }
    k->calls++;
    return addr[0] != 10;
}

static struct crl_dns_question the_question(void)
{
    struct pkt p;
    struct crl_dns_question q;
    struct crl_err e = CRL_ERR_INIT;
    query(&p, 0x0101, "www.example.com", CRL_DNS_A);
    if (parse(&p, &q, &e) < 0)
        bail_out("a good query refused");
    return q;
}

enum { UPSTREAM_ID = 0x5555 };

/* An upstream's answer for www.example.com: a CNAME to cdn.example.net,
 * A 192.0.2.7 (TTL 300), A 10.1.2.3 (TTL 60), an AAAA, an A of class CH, an
 * NS in authority, an A in additional. */
static void full_answer(struct pkt *p)
{
    header(p, UPSTREAM_ID, QR | RD | RA, 1, 5, 1, 1);
    question(p, "www.example.com", CRL_DNS_A, 1);
    rr_cname(p, "www.example.com", "cdn.example.net");
    rr_a(p, "cdn.example.net", 1, 300, 192, 0, 2, 7);
    rr_a(p, "cdn.example.net", 1, 60, 10, 1, 2, 3);
    rr_aaaa(p, "cdn.example.net");
    rr_a(p, "cdn.example.net", 3, 60, 198, 51, 100, 1);
    rr_ns(p, "example.com");
    rr_a(p, "ns.example.com", 1, 60, 198, 51, 100, 2);
}

static int filter(const struct pkt *p, const struct crl_dns_question *q, struct kept *k,
                  uint8_t **out, size_t *n, struct crl_err *e)
{
    memset(k, 0, sizeof(*k));
    crl_err_clear(e);
    return crl_dns_filter_answer(p->b, p->n, q, UPSTREAM_ID, keep, k, out, n, e);
}

static void test_filter(void)
{
    struct crl_dns_question q = the_question();
    struct pkt p;
    struct kept k;
    struct crl_err e = CRL_ERR_INIT;
    uint8_t *out = NULL;
    size_t n = 0;
    full_answer(&p);
    if (!ok(filter(&p, &q, &k, &out, &n, &e) == 0, "an answer with CNAME and A is taken"))
        diag("%s", e.msg);
    is_int(k.calls, 2, "keep() is offered the two A records of class IN");
    ok(k.calls >= 2 && memcmp(k.addr[0], "\xc0\x00\x02\x07", 4) == 0 && k.ttl[0] == 300,
       "keep() sees 192.0.2.7 and its TTL 300");
    ok(k.calls >= 2 && memcmp(k.addr[1], "\x0a\x01\x02\x03", 4) == 0 && k.ttl[1] == 60,
       "keep() sees 10.1.2.3 and its TTL 60");
    ldns_pkt *a = out ? read_back(out, n, "the filtered answer") : NULL;
    if (a) {
        is_int(ldns_pkt_id(a), 0x0101, "the id is the sandbox's, not the upstream's");
        ok(ldns_pkt_qr(a) && ldns_pkt_rd(a) && ldns_pkt_get_rcode(a) == 0, "QR, RD, NOERROR");
        ok(has_question(a, "www.example.com.", CRL_DNS_A, 1), "the same question");
        is_int(ldns_pkt_ancount(a), 2, "two answers: the CNAME and the kept A");
        ldns_rr_list *an = ldns_pkt_answer(a);
        ok(ldns_pkt_ancount(a) == 2 &&
               ldns_rr_get_type(ldns_rr_list_rr(an, 0)) == LDNS_RR_TYPE_CNAME &&
               ldns_rr_get_type(ldns_rr_list_rr(an, 1)) == LDNS_RR_TYPE_A,
           "the CNAME, then the A");
        if (ldns_pkt_ancount(a) == 2) {
            ldns_rr *rr = ldns_rr_list_rr(an, 1);
            ldns_rdf *d = ldns_rr_rdf(rr, 0);
            ok(d && ldns_rdf_size(d) == 4 && memcmp(ldns_rdf_data(d), "\xc0\x00\x02\x07", 4) == 0,
               "the A kept is 192.0.2.7");
            is_int(ldns_rr_ttl(rr), 300, "with its TTL");
            char *t = ldns_rdf2str(ldns_rr_rdf(ldns_rr_list_rr(an, 0), 0));
            is_str(t, "cdn.example.net.", "the CNAME's target");
            free(t);
        }
        ok(!ldns_pkt_nscount(a) && !ldns_pkt_arcount(a), "no authority, no additional");
        ldns_pkt_free(a);
    }
    free(out);

    /* NXDOMAIN with an SOA in authority */
    header(&p, UPSTREAM_ID, QR | RD | RA | CRL_DNS_NXDOMAIN, 1, 0, 1, 0);
    question(&p, "www.example.com", CRL_DNS_A, 1);
    name(&p, "example.com");
    put16(&p, 6);
    put16(&p, 1);
    put32(&p, 900);
    put16(&p, 22);
    putbytes(&p, "\x00\x00", 2); /* mname, rname: the root */
    for (int i = 0; i < 5; i++)
        put32(&p, 60);
    out = NULL;
    if (!ok(filter(&p, &q, &k, &out, &n, &e) == 0, "an NXDOMAIN is taken"))
        diag("%s", e.msg);
    a = out ? read_back(out, n, "the NXDOMAIN") : NULL;
    if (a) {
        is_int(ldns_pkt_get_rcode(a), CRL_DNS_NXDOMAIN, "the upstream's rcode, NXDOMAIN");
        ok(!ldns_pkt_ancount(a) && !ldns_pkt_nscount(a), "no records");
        ok(has_question(a, "www.example.com.", CRL_DNS_A, 1), "the same question");
        ldns_pkt_free(a);
    }
    free(out);

    /* the question's name in another case is the same question */
    full_answer(&p);
    memcpy(p.b + 13, "WWW", 3);
    out = NULL;
    ok(filter(&p, &q, &k, &out, &n, &e) == 0, "an answer whose question is in capitals is taken");
    free(out);
}

/* An upstream packet that is not the answer to q: refused, keep() never asked. */
static void not_ours(const struct pkt *p, const struct crl_dns_question *q, const char *what)
{
    struct kept k;
    struct crl_err e = CRL_ERR_INIT;
    uint8_t *out = NULL;
    size_t n = 0;
    int r = filter(p, q, &k, &out, &n, &e);
    if (!ok(r < 0 && e.code == CRL_E_INVALID, "refused: %s", what))
        diag("returned %d, message '%s'", r, e.msg);
    ok(k.calls == 0, "%s: keep() not asked", what);
    if (r == 0)
        free(out);
}

static void test_filter_refused(void)
{
    struct crl_dns_question q = the_question();
    struct pkt p;
    full_answer(&p);
    p.b[0] = 0x12;
    not_ours(&p, &q, "the wrong upstream id");
    full_answer(&p);
    p.b[2] &= 0x7f;
    not_ours(&p, &q, "QR 0");
    full_answer(&p);
    p.b[2] |= 2u << 3;
    not_ours(&p, &q, "opcode STATUS");

    header(&p, UPSTREAM_ID, QR | RD | RA, 1, 1, 0, 0);
    question(&p, "www.example.net", CRL_DNS_A, 1);
    rr_a(&p, "www.example.net", 1, 60, 192, 0, 2, 9);
    not_ours(&p, &q, "another name");
    header(&p, UPSTREAM_ID, QR | RD | RA, 1, 1, 0, 0);
    question(&p, "www.example.com.evil", CRL_DNS_A, 1);
    rr_a(&p, "www.example.com.evil", 1, 60, 192, 0, 2, 9);
    not_ours(&p, &q, "a name our name is a prefix of");
    header(&p, UPSTREAM_ID, QR | RD | RA, 1, 1, 0, 0);
    question(&p, "www.example.com", CRL_DNS_AAAA, 1);
    rr_a(&p, "www.example.com", 1, 60, 192, 0, 2, 9);
    not_ours(&p, &q, "another type");
    header(&p, UPSTREAM_ID, QR | RD | RA, 1, 1, 0, 0);
    question(&p, "www.example.com", CRL_DNS_A, 3);
    rr_a(&p, "www.example.com", 3, 60, 192, 0, 2, 9);
    not_ours(&p, &q, "another class");
    header(&p, UPSTREAM_ID, QR | RD | RA, 0, 1, 0, 0);
    rr_a(&p, "www.example.com", 1, 60, 192, 0, 2, 9);
    not_ours(&p, &q, "no question");
    header(&p, UPSTREAM_ID, QR | RD | RA, 2, 1, 0, 0);
    question(&p, "www.example.com", CRL_DNS_A, 1);
    question(&p, "www.example.net", CRL_DNS_A, 1);
    rr_a(&p, "www.example.net", 1, 60, 192, 0, 2, 9);
    not_ours(&p, &q, "two questions");

    struct pkt good;
    full_answer(&good);
    int bad = 0;
    for (size_t n = 0; n < good.n; n++) {
        struct pkt t = good;
        t.n = n;
        struct kept k;
        struct crl_err e = CRL_ERR_INIT;
        uint8_t *out = NULL;
        size_t on = 0;
        if (filter(&t, &q, &k, &out, &on, &e) == 0) {
            bad++;
            free(out);
        }
    }
    is_int(bad, 0, "each of the %zu truncations of an answer is refused", good.n);
    while (good.n <= CRL_DNS_MAX_PACKET)
        put8(&good, 0);
    not_ours(&good, &q, "an answer over CRL_DNS_MAX_PACKET");

    /* an A record's owner looping on itself */
    header(&p, UPSTREAM_ID, QR | RD | RA, 1, 1, 0, 0);
    question(&p, "www.example.com", CRL_DNS_A, 1);
    size_t at = p.n;
    put8(&p, 0xc0);
    put8(&p, (unsigned)at);
    putbytes(&p, "\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\xc0\x00\x02\x09", 14);
    not_ours(&p, &q, "an answer's owner pointing at itself");
}

/* A CNAME whose rdata, read from each of its first 63 bytes, is a different
 * name of 193 bytes (labels of 63 bytes 63 and one 'z', rotated), and 62
 * CNAMEs pointing at those: 1.2 KiB that ldns would write out as 12. */
static void test_filter_expanding(void)
{
    struct crl_dns_question q = the_question();
    struct pkt p;
    header(&p, UPSTREAM_ID, QR | RD | RA, 1, 63, 0, 0);
    question(&p, "www.example.com", CRL_DNS_A, 1);
    put16(&p, 0xc00c);
    put16(&p, CRL_DNS_CNAME);
    put16(&p, 1);
    put32(&p, 60);
    put16(&p, 3 * 64 + 63);
    size_t blob = p.n;
    for (int l = 0; l < 3; l++) {
        for (int i = 0; i < 63; i++)
            put8(&p, 63);
        put8(&p, 'z');
    }
    for (int i = 0; i < 63; i++)
        put8(&p, 0);
    for (unsigned i = 1; i < 63; i++) {
        put16(&p, 0xc00c);
        put16(&p, CRL_DNS_CNAME);
        put16(&p, 1);
        put32(&p, 60);
        put16(&p, 2);
        put16(&p, 0xc000 | (unsigned)(blob + i));
    }
    ok(p.n < 1300, "the upstream's answer is %zu bytes", p.n);
    struct kept k;
    struct crl_err e = CRL_ERR_INIT;
    uint8_t *out = NULL;
    size_t n = 0;
    int r = filter(&p, &q, &k, &out, &n, &e);
    if (!ok(r < 0 && e.code == CRL_E_INVALID && strstr(e.msg, "too large"),
            "refused: it would rebuild to over CRL_DNS_MAX_PACKET"))
        diag("returned %d, %zu bytes, message '%s'", r, n, e.msg);
    if (r == 0)
        free(out);
}

int main(void)
{
    TAP_RUN(test_parse_query, 10);
    TAP_RUN(test_refused, 10);
    TAP_RUN(test_odd_names, 10);
    TAP_RUN(test_error_answer, 10);
    TAP_RUN(test_build_query, 10);
    TAP_RUN(test_filter, 10);
    TAP_RUN(test_filter_refused, 10);
    TAP_RUN(test_filter_expanding, 10);
    return done_testing();
}
