/* The DNS packets of corrald's resolver for sandboxes, over ldns.  What a
 * sandbox sends and what an upstream answers are both hostile: each packet
 * is parsed in full by ldns before anything of it is used, and what goes
 * back to a sandbox is built anew, never a packet passed through. */
#ifndef CRL_CORE_DNS_H
#define CRL_CORE_DNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

#define CRL_DNS_MAX_PACKET 4096 /* larger queries and answers are refused */

enum {
    CRL_DNS_NOERROR = 0,
    CRL_DNS_SERVFAIL = 2,
    CRL_DNS_NXDOMAIN = 3,
    CRL_DNS_REFUSED = 5,
};
enum { CRL_DNS_A = 1, CRL_DNS_CNAME = 5, CRL_DNS_AAAA = 28 };

struct crl_dns_question {
    uint16_t id;
    uint16_t qtype, qclass;
    bool rd;        /* recursion desired */
    char name[256]; /* lowercased, without its trailing dot ("" for the root) */
};

/* A query: QR 0, opcode QUERY, exactly one question, no answer records.
 * Fills *q; CRL_E_INVALID naming what is wrong. */
int crl_dns_parse_query(const uint8_t *pkt, size_t len, struct crl_dns_question *q,
                        struct crl_err *err);

/* An answer to q with `rcode` and no records, into out (malloc'd). */
int crl_dns_error_answer(const struct crl_dns_question *q, unsigned rcode, uint8_t **out,
                         size_t *outlen);

/* An answer to q (an A question) with one A record: addr (network order)
 * for ttl seconds, into out (malloc'd). */
int crl_dns_a_answer(const struct crl_dns_question *q, const uint8_t addr[4], uint32_t ttl,
                     uint8_t **out, size_t *outlen);

/* For crl_dns_filter_answer: keep this A record's address (4 bytes,
 * network order), which the answer gives for `ttl` seconds? */
typedef bool (*crl_dns_keep_fn)(const uint8_t addr[4], uint32_t ttl, void *ctx);

/* An upstream's answer to the question q (sent with id `upstream_id`),
 * rebuilt for the sandbox: q's id and question, the upstream's rcode, its
 * answer section's CNAME and A records of the right class, each A offered
 * to keep() and dropped unless kept; no AAAA (IPv6 is off in a sandbox), no
 * authority or additional records.  -1 (CRL_E_INVALID) if the packet is not
 * an answer to q (its id, QR, opcode or question differ) or if the answer
 * rebuilt would be over CRL_DNS_MAX_PACKET. */
int crl_dns_filter_answer(const uint8_t *pkt, size_t len, const struct crl_dns_question *q,
                          uint16_t upstream_id, crl_dns_keep_fn keep, void *ctx, uint8_t **out,
                          size_t *outlen, struct crl_err *err);

/* The query `q` with id `id`, as sent upstream (rebuilt: only q's question,
 * RD as q asked), into out (malloc'd). */
int crl_dns_build_query(const struct crl_dns_question *q, uint16_t id, uint8_t **out,
                        size_t *outlen);

#endif
