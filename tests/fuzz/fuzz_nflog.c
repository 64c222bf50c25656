/* libFuzzer driver for lib/os/nflog's decoder: the start of a packet a
 * sandbox sent and its chain dropped, as the kernel copies it (at most
 * CRL_NFLOG_COPY bytes).  Whatever the bytes, it reads none past the end
 * (ASan), and what it says holds:
 *   - refused: shorter than an IPv4 header, not version 4, or IHL under 5;
 *   - accepted: protocol and addresses are the header's; ports only for
 *     TCP or UDP, in the first fragment, read within the header's IHL and
 *     the smaller of the input and its total length; likewise ICMP's type.
 *
 *   tests/fuzz/run.sh builds it; corpus: tests/fuzz/corpus/nflog (written by
 *   tests/fuzz/make_nflog_corpus.py), dictionary: tests/fuzz/nflog.dict */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/os/nflog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz_nflog: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > CRL_NFLOG_COPY)
        size = CRL_NFLOG_COPY;
    /* A copy of exactly `size` bytes, so that ASan sees a read past it. */
    uint8_t *p = malloc(size ? size : 1);
    if (!p)
        return 0;
    memcpy(p, data, size);
    struct crl_nflog_pkt k;
    int r = crl_nflog_decode(p, size, &k);
    size_t ihl = size ? (size_t)(p[0] & 0x0f) * 4 : 0;
    if (size < 20 || p[0] >> 4 != 4 || ihl < 20) {
        CHECK(r < 0);
    } else {
        CHECK(r == 0);
        CHECK(k.proto == p[9]);
        CHECK(memcmp(k.saddr, p + 12, 4) == 0 && memcmp(k.daddr, p + 16, 4) == 0);
        size_t total = (size_t)(p[2] << 8 | p[3]), end = total < size ? total : size;
        bool first = ((p[6] << 8 | p[7]) & 0x1fff) == 0;
        CHECK(!k.has_ports ||
              (first && (k.proto == IPPROTO_TCP || k.proto == IPPROTO_UDP) && ihl + 4 <= end &&
               k.sport == (p[ihl] << 8 | p[ihl + 1]) && k.dport == (p[ihl + 2] << 8 | p[ihl + 3])));
        CHECK(!k.has_icmp || (first && k.proto == IPPROTO_ICMP && ihl + 2 <= end &&
                              k.icmp_type == p[ihl] && k.icmp_code == p[ihl + 1]));
        CHECK(k.has_ports ==
              (first && (k.proto == IPPROTO_TCP || k.proto == IPPROTO_UDP) && ihl + 4 <= end));
        CHECK(!k.has_ports || !k.has_icmp);
    }
    free(p);
    return 0;
}
