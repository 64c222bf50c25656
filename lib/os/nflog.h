/* The kernel's reports of packets a sandbox's chain dropped: an NFLOG group
 * (nfnetlink_log) that the chain's log rules send to (lib/os/vnet.h), read
 * here over libnetfilter_log, and the decoder of the packets it carries.
 *
 * A group is bound by one netlink socket at a time in a network namespace
 * (the kernel refuses a second with EPERM): crl_nflog_open takes the first
 * free one from `first`.  The payload is the sandbox's packet, so the decoder
 * trusts none of it. */
#ifndef CRL_OS_NFLOG_H
#define CRL_OS_NFLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

/* Bytes of each packet the kernel copies: an IPv4 header with every
 * option (60) and the first 8 of what follows it, with room to spare. */
#define CRL_NFLOG_COPY 128

/* What corrald tells of a dropped packet. */
struct crl_nflog_pkt {
    uint8_t proto;         /* IPPROTO_TCP, _UDP, _ICMP or another */
    uint8_t saddr[4];      /* network order */
    uint8_t daddr[4];      /* network order */
    bool has_ports;        /* TCP or UDP, and the first fragment */
    uint16_t sport, dport; /* host order, when has_ports */
    bool has_icmp;         /* ICMP, and the first fragment */
    uint8_t icmp_type, icmp_code;
};

/* Decode the start of an IPv4 packet (at most CRL_NFLOG_COPY bytes of it, or
 * all of it): 0 and *out, or -1 if it is not IPv4 or is cut before its
 * addresses.  A transport header cut short, or in a later fragment, leaves
 * has_ports / has_icmp false. */
int crl_nflog_decode(const uint8_t *pkt, size_t len, struct crl_nflog_pkt *out);

/* "tcp", "udp", "icmp", or NULL for another protocol. */
const char *crl_nflog_proto_name(uint8_t proto);

struct crl_nflog;

/* One reported packet: the log rule's prefix and the decoded packet (NULL
 * if it did not decode). */
typedef void (*crl_nflog_cb)(void *ctx, const char *prefix, const struct crl_nflog_pkt *pkt);

/* Bind the first free group of first..first+63 (wrapping past 65535 to 1)
 * in this network namespace, copying CRL_NFLOG_COPY bytes of each packet;
 * its descriptor is nonblocking.  Calls cb for each packet read. */
int crl_nflog_open(uint16_t first, crl_nflog_cb cb, void *ctx, struct crl_nflog **out,
                   struct crl_err *err);
void crl_nflog_free(struct crl_nflog *n);
uint16_t crl_nflog_group(const struct crl_nflog *n);
int crl_nflog_fd(const struct crl_nflog *n);
/* Read what has arrived, at most `budget` datagrams (each holds one or
 * more packets), without blocking.  Returns how many were read. */
unsigned crl_nflog_read(struct crl_nflog *n, unsigned budget);
/* Reports lost because the socket's buffer was full (ENOBUFS), and those
 * that did not decode. */
uint64_t crl_nflog_lost(const struct crl_nflog *n);
uint64_t crl_nflog_malformed(const struct crl_nflog *n);

#endif
