/* libFuzzer driver for lib/core/dns: the first byte picks what the rest is.
 *
 *   even: a query from a sandbox.  Once parsed, its name is lowercased text
 *         and both packets built from it (the upstream query, an error
 *         answer) parse back to the same question; the error answer passes
 *         the answer filter unchanged.
 *   odd:  an upstream's answer to a fixed question (www.example.com A IN),
 *         filtered with a keep() that keeps every other address.  What comes
 *         out is q's answer: q's id and question, only CNAMEs and the A
 *         records kept, no other section; filtering it again keeps it as is.
 *
 * A refusal is a CRL_E_INVALID with a message.
 *
 *   tests/fuzz/run.sh builds it; corpus: tests/fuzz/corpus/dns (written by
 *   tests/fuzz/make_dns_corpus.py), dictionary: tests/fuzz/dns.dict */
#include <ldns/ldns.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/dns.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_dns: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

enum { UPSTREAM_ID = 0x5555, SANDBOX_ID = 0x0101 };

struct keeper {
    unsigned offered, kept;
};

static bool keep_alternate(const uint8_t addr[4], uint32_t ttl, void *ctx)
{
    struct keeper *k = ctx;
    return k->offered++ % 2 == 0 ? (k->kept++, true) : false;
}

static bool keep_all(const uint8_t addr[4], uint32_t ttl, void *ctx)
{
    struct keeper *k = ctx;
    k->offered++;
    k->kept++;
    return true;
}

static void check_refusal(const struct crl_err *e)
{
    CHECK(e->code == CRL_E_INVALID);
    CHECK(e->msg[0] != 0);
    CHECK(memchr(e->msg, 0, sizeof(e->msg)) != NULL);
}

static bool same_question(const struct crl_dns_question *a, const struct crl_dns_question *b)
{
    return a->qtype == b->qtype && a->qclass == b->qclass && a->rd == b->rd &&
           strcmp(a->name, b->name) == 0;
}

/* `out` is the answer to q the filter promises: q's id and question, QR,
 * only CNAME and A records of q's class in the answer section, `a_count` A. */
static void check_answer(const uint8_t *out, size_t len, const struct crl_dns_question *q,
                         unsigned a_count)
{
    ldns_pkt *p = NULL;
    CHECK(ldns_wire2pkt(&p, out, len) == LDNS_STATUS_OK);
    CHECK(ldns_pkt_id(p) == q->id && ldns_pkt_qr(p) && ldns_pkt_rd(p) == q->rd);
    CHECK(ldns_pkt_get_opcode(p) == LDNS_PACKET_QUERY);
    CHECK(ldns_pkt_qdcount(p) == 1 && ldns_pkt_nscount(p) == 0 && ldns_pkt_arcount(p) == 0);
    ldns_rr *qr = ldns_rr_list_rr(ldns_pkt_question(p), 0);
    CHECK((uint16_t)ldns_rr_get_type(qr) == q->qtype);
    CHECK((uint16_t)ldns_rr_get_class(qr) == q->qclass);
    ldns_rr_list *an = ldns_pkt_answer(p);
    unsigned as = 0;
    for (size_t i = 0; an && i < ldns_rr_list_rr_count(an); i++) {
        ldns_rr *rr = ldns_rr_list_rr(an, i);
        CHECK((uint16_t)ldns_rr_get_class(rr) == q->qclass);
        if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_A)
            as++;
        else
            CHECK(ldns_rr_get_type(rr) == LDNS_RR_TYPE_CNAME);
    }
    CHECK(as == a_count);
    ldns_pkt_free(p);
}

static void fuzz_query(const uint8_t *pkt, size_t len, unsigned rcode)
{
    struct crl_dns_question q;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_dns_parse_query(pkt, len, &q, &e) < 0) {
        check_refusal(&e);
        return;
    }
    size_t n = strnlen(q.name, sizeof(q.name));
    CHECK(n < sizeof(q.name));
    for (size_t i = 0; i < n; i++)
        CHECK(!(q.name[i] >= 'A' && q.name[i] <= 'Z'));

    uint8_t *out = NULL;
    size_t outlen = 0;
    CHECK(crl_dns_build_query(&q, 0x7777, &out, &outlen) == 0);
    struct crl_dns_question back;
    if (crl_dns_parse_query(out, outlen, &back, &e) < 0) {
        fprintf(stderr, "fuzz_dns: the upstream query for '%s' refused: %s\n", q.name, e.msg);
        abort();
    }
    CHECK(back.id == 0x7777 && same_question(&back, &q));
    free(out);

    CHECK(crl_dns_error_answer(&q, rcode, &out, &outlen) == 0);
    CHECK(crl_dns_parse_query(out, outlen, &back, &e) < 0); /* an answer, not a query */
    check_answer(out, outlen, &q, 0);
    struct keeper k = {0, 0};
    uint8_t *again = NULL;
    size_t againlen = 0;
    if (crl_dns_filter_answer(out, outlen, &q, q.id, keep_all, &k, &again, &againlen, &e) < 0) {
        fprintf(stderr, "fuzz_dns: the error answer for '%s' refused: %s\n", q.name, e.msg);
        abort();
    }
    CHECK(k.offered == 0);
    CHECK(againlen == outlen && memcmp(again, out, outlen) == 0);
    free(again);
    free(out);
}

static void fuzz_answer(const uint8_t *pkt, size_t len)
{
    static const uint8_t query[] = {
        0x01, 0x01, 0x01, 0x00, 0, 1,   0,   0,   0,   0,   0,   0, /* header */
        3,    'w',  'w',  'w',  7, 'e', 'x', 'a', 'm', 'p', 'l', 'e',
        3,    'c',  'o',  'm',  0, 0,   1,   0,   1};
    struct crl_dns_question q;
    struct crl_err e = CRL_ERR_INIT;
    CHECK(crl_dns_parse_query(query, sizeof(query), &q, &e) == 0 && q.id == SANDBOX_ID);

    struct keeper k = {0, 0};
    uint8_t *out = NULL;
    size_t outlen = 0;
    if (crl_dns_filter_answer(pkt, len, &q, UPSTREAM_ID, keep_alternate, &k, &out, &outlen, &e) <
        0) {
        check_refusal(&e);
        return;
    }
    CHECK(outlen <= CRL_DNS_MAX_PACKET);
    check_answer(out, outlen, &q, k.kept);

    /* the filter's output is its own fixed point */
    struct keeper all = {0, 0};
    uint8_t *again = NULL;
    size_t againlen = 0;
    if (crl_dns_filter_answer(out, outlen, &q, q.id, keep_all, &all, &again, &againlen, &e) < 0) {
        fprintf(stderr, "fuzz_dns: the filtered answer refused: %s\n", e.msg);
        abort();
    }
    CHECK(all.offered == k.kept);
    CHECK(againlen == outlen && memcmp(again, out, outlen) == 0);
    free(again);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* A heap copy of exactly the packet, so a read past its end is caught. */
    size_t len = size - 1;
    uint8_t *pkt = malloc(len ? len : 1);
    if (!pkt)
        return 0;
    memcpy(pkt, data + 1, len);
    if (data[0] % 2 == 0)
        fuzz_query(pkt, len, data[0] >> 4);
    else
        fuzz_answer(pkt, len);
    free(pkt);
    return 0;
}
