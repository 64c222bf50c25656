#include "dns.h"

#include <ctype.h>
#include <ldns/ldns.h>
#include <stdlib.h>
#include <string.h>

static int invalid(struct crl_err *err, const char *what)
{
    return crl_err_set(err, CRL_E_INVALID, "DNS: %s", what);
}

/* The packet's one question: its name (lowercased, no trailing dot), type
 * and class.  -1 unless there is exactly one. */
static int question(const ldns_pkt *p, struct crl_dns_question *q, struct crl_err *err)
{
    ldns_rr_list *qs = ldns_pkt_question(p);
    if (ldns_pkt_qdcount(p) != 1 || !qs || ldns_rr_list_rr_count(qs) != 1)
        return invalid(err, "not one question");
    ldns_rr *rr = ldns_rr_list_rr(qs, 0);
    char *name = ldns_rdf2str(ldns_rr_owner(rr));
    if (!name)
        return invalid(err, "a question without a name");
    size_t n = strlen(name);
    if (n && name[n - 1] == '.')
        name[--n] = '\0';
    int r = 0;
    if (n >= sizeof(q->name)) {
        r = invalid(err, "a name too long");
    } else {
        for (size_t i = 0; i <= n; i++)
            q->name[i] = (char)tolower((unsigned char)name[i]);
        q->qtype = (uint16_t)ldns_rr_get_type(rr);
        q->qclass = (uint16_t)ldns_rr_get_class(rr);
    }
    free(name);
    return r;
}

/* Whether the packet has a TSIG record (type 250) in any section: libldns
 * (1.8.3) keeps the last of several as the packet's and loses the others
 * (a leak a sandbox could repeat at will), and nothing here signs or
 * checks one.  A walk of the records' headers only; a packet it cannot
 * walk is left to ldns_wire2pkt to refuse. */
static bool has_tsig(const uint8_t *pkt, size_t len)
{
    if (len < 12)
        return false;
    size_t pos = 12, n = 0;
    for (int i = 0; i < 4; i++)
        n += (size_t)(pkt[4 + 2 * i] << 8 | pkt[5 + 2 * i]);
    for (size_t r = 0; r < n; r++) {
        while (pos < len && pkt[pos] != 0 && (pkt[pos] & 0xc0) != 0xc0) /* labels */
            pos += 1u + pkt[pos];
        pos += pos < len && pkt[pos] != 0 ? 2 : 1; /* a pointer, or the root */
        if (pos + 4 > len)
            return false;
        if ((pkt[pos] << 8 | pkt[pos + 1]) == LDNS_RR_TYPE_TSIG)
            return true;
        if (r < (size_t)(pkt[4] << 8 | pkt[5])) { /* a question: type and class */
            pos += 4;
            continue;
        }
        if (pos + 10 > len)
            return false;
        pos += 10u + (size_t)(pkt[pos + 8] << 8 | pkt[pos + 9]);
    }
    return false;
}

static int parse(const uint8_t *pkt, size_t len, ldns_pkt **out, struct crl_err *err)
{
    if (len > CRL_DNS_MAX_PACKET)
        return invalid(err, "a packet too large");
    if (has_tsig(pkt, len))
        return invalid(err, "a TSIG record (none is signed or checked here)");
    if (ldns_wire2pkt(out, pkt, len) != LDNS_STATUS_OK)
        return invalid(err, "a malformed packet");
    return 0;
}

int crl_dns_parse_query(const uint8_t *pkt, size_t len, struct crl_dns_question *q,
                        struct crl_err *err)
{
    ldns_pkt *p = NULL;
    if (parse(pkt, len, &p, err) < 0)
        return -1;
    int r = 0;
    if (ldns_pkt_qr(p) || ldns_pkt_get_opcode(p) != LDNS_PACKET_QUERY)
        r = invalid(err, "not a query");
    else if (ldns_pkt_ancount(p) || ldns_pkt_nscount(p))
        r = invalid(err, "a query with answers");
    else
        r = question(p, q, err);
    if (r == 0) {
        q->id = ldns_pkt_id(p);
        q->rd = ldns_pkt_rd(p);
    }
    ldns_pkt_free(p);
    return r;
}

/* A packet with q's question and nothing else, `qr` and `rcode` set. */
static ldns_pkt *with_question(const struct crl_dns_question *q, uint16_t id, bool qr,
                               unsigned rcode)
{
    ldns_pkt *p = ldns_pkt_new();
    ldns_rr *rr = ldns_rr_new();
    char name[260];
    snprintf(name, sizeof(name), "%s.", q->name);
    ldns_rdf *owner = NULL;
    if (!p || !rr || ldns_str2rdf_dname(&owner, name) != LDNS_STATUS_OK) {
        ldns_pkt_free(p);
        ldns_rr_free(rr);
        return NULL;
    }
    ldns_rr_set_owner(rr, owner);
    ldns_rr_set_type(rr, (ldns_rr_type)q->qtype);
    ldns_rr_set_class(rr, (ldns_rr_class)q->qclass);
    ldns_rr_set_question(rr, true);
    ldns_pkt_set_id(p, id);
    ldns_pkt_set_opcode(p, LDNS_PACKET_QUERY);
    ldns_pkt_set_rd(p, q->rd);
    ldns_pkt_set_qr(p, qr);
    ldns_pkt_set_ra(p, qr);
    ldns_pkt_set_rcode(p, (uint8_t)rcode);
    if (!ldns_pkt_push_rr(p, LDNS_SECTION_QUESTION, rr)) {
        ldns_rr_free(rr);
        ldns_pkt_free(p);
        return NULL;
    }
    return p;
}

static int to_wire(ldns_pkt *p, uint8_t **out, size_t *outlen)
{
    if (!p)
        return -1;
    int r = ldns_pkt2wire(out, p, outlen) == LDNS_STATUS_OK ? 0 : -1;
    ldns_pkt_free(p);
    return r;
}

int crl_dns_error_answer(const struct crl_dns_question *q, unsigned rcode, uint8_t **out,
                         size_t *outlen)
{
    return to_wire(with_question(q, q->id, true, rcode), out, outlen);
}

int crl_dns_a_answer(const struct crl_dns_question *q, const uint8_t addr[4], uint32_t ttl,
                     uint8_t **out, size_t *outlen)
{
    ldns_pkt *p = with_question(q, q->id, true, CRL_DNS_NOERROR);
    ldns_rr *rr = p ? ldns_rr_clone(ldns_rr_list_rr(ldns_pkt_question(p), 0)) : NULL;
    ldns_rdf *a = rr ? ldns_rdf_new_frm_data(LDNS_RDF_TYPE_A, 4, addr) : NULL;
    if (!a || !ldns_rr_push_rdf(rr, a)) {
        ldns_rdf_deep_free(a);
        ldns_rr_free(rr);
        ldns_pkt_free(p);
        return -1;
    }
    ldns_rr_set_question(rr, false);
    ldns_rr_set_type(rr, LDNS_RR_TYPE_A);
    ldns_rr_set_ttl(rr, ttl);
    if (!ldns_pkt_push_rr(p, LDNS_SECTION_ANSWER, rr)) {
        ldns_rr_free(rr);
        ldns_pkt_free(p);
        return -1;
    }
    return to_wire(p, out, outlen);
}

int crl_dns_build_query(const struct crl_dns_question *q, uint16_t id, uint8_t **out,
                        size_t *outlen)
{
    return to_wire(with_question(q, id, false, 0), out, outlen);
}

int crl_dns_filter_answer(const uint8_t *pkt, size_t len, const struct crl_dns_question *q,
                          uint16_t upstream_id, crl_dns_keep_fn keep, void *ctx, uint8_t **out,
                          size_t *outlen, struct crl_err *err)
{
    ldns_pkt *p = NULL;
    if (parse(pkt, len, &p, err) < 0)
        return -1;
    struct crl_dns_question got;
    ldns_pkt *a = NULL;
    int r = 0;
    if (!ldns_pkt_qr(p) || ldns_pkt_id(p) != upstream_id ||
        ldns_pkt_get_opcode(p) != LDNS_PACKET_QUERY) {
        r = invalid(err, "not the answer to our query");
    } else if (question(p, &got, err) < 0) {
        r = -1;
    } else if (got.qtype != q->qtype || got.qclass != q->qclass || strcmp(got.name, q->name)) {
        r = invalid(err, "an answer to another question");
    } else if (!(a = with_question(q, q->id, true, ldns_pkt_get_rcode(p)))) {
        r = crl_err_sys(err, ENOMEM, "DNS answer");
    }
    ldns_rr_list *an = r == 0 ? ldns_pkt_answer(p) : NULL;
    for (size_t i = 0; an && i < ldns_rr_list_rr_count(an); i++) {
        ldns_rr *rr = ldns_rr_list_rr(an, i);
        ldns_rr_type t = ldns_rr_get_type(rr);
        if (ldns_rr_get_class(rr) != (ldns_rr_class)q->qclass)
            continue;
        if (t == LDNS_RR_TYPE_A) {
            ldns_rdf *d = ldns_rr_rdf(rr, 0);
            if (!d || ldns_rdf_size(d) != 4 || !keep(ldns_rdf_data(d), ldns_rr_ttl(rr), ctx))
                continue;
        } else if (t != LDNS_RR_TYPE_CNAME) {
            continue;
        }
        ldns_rr *c = ldns_rr_clone(rr);
        if (!c || !ldns_pkt_push_rr(a, LDNS_SECTION_ANSWER, c)) {
            ldns_rr_free(c);
            r = crl_err_sys(err, ENOMEM, "DNS answer");
            break;
        }
    }
    ldns_pkt_free(p);
    if (r < 0) {
        ldns_pkt_free(a);
        return -1;
    }
    if (to_wire(a, out, outlen) < 0)
        return crl_err_sys(err, ENOMEM, "DNS answer");
    /* Names the upstream packed into one another (pointers into the middle
     * of a name, each a different name) are each written out whole: a
     * packet of 1 KiB can rebuild to 12. */
    if (*outlen > CRL_DNS_MAX_PACKET) {
        free(*out);
        *out = NULL;
        return invalid(err, "an answer too large once rebuilt");
    }
    return 0;
}
