#include "nflog.h"

#include <errno.h>
#include <fcntl.h>
#include <libnetfilter_log/libnetfilter_log.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../util/fdio.h"

#define GROUPS_TRIED 64
#define RCVBUF (1 << 20)
/* nfnetlink_log flushes a group's batch at this many packets, or after
 * this long (1/100 s): a denial shows within 10 ms, a flood comes batched. */
#define QTHRESH 32
#define FLUSH_CS 1

struct crl_nflog {
    struct nflog_handle *h;
    struct nflog_g_handle *gh;
    uint16_t group;
    bool closing;
    crl_nflog_cb cb;
    void *ctx;
    uint64_t lost, malformed;
    char buf[65536]; /* a datagram: a batch of up to nlbufsiz (default 4 KiB) */
};

const char *crl_nflog_proto_name(uint8_t proto)
{
    switch (proto) {
    case IPPROTO_TCP: return "tcp";
    case IPPROTO_UDP: return "udp";
    case IPPROTO_ICMP: return "icmp";
    default: return NULL;
    }
}

int crl_nflog_decode(const uint8_t *p, size_t len, struct crl_nflog_pkt *out)
{
    memset(out, 0, sizeof(*out));
    if (len < 20 || p[0] >> 4 != 4)
        return -1;
    size_t ihl = (size_t)(p[0] & 0x0f) * 4;
    if (ihl < 20)
        return -1;
    out->proto = p[9];
    memcpy(out->saddr, p + 12, 4);
    memcpy(out->daddr, p + 16, 4);
    if (((p[6] << 8 | p[7]) & 0x1fff) != 0)
        return 0; /* a later fragment: its start is not a transport header */
    /* What the packet says it holds bounds what we read, if it is less. */
    size_t total = (size_t)(p[2] << 8 | p[3]);
    if (total < len)
        len = total;
    if (ihl >= len)
        return 0;
    const uint8_t *t = p + ihl;
    size_t tl = len - ihl;
    if ((out->proto == IPPROTO_TCP || out->proto == IPPROTO_UDP) && tl >= 4) {
        out->has_ports = true;
        out->sport = (uint16_t)(t[0] << 8 | t[1]);
        out->dport = (uint16_t)(t[2] << 8 | t[3]);
    } else if (out->proto == IPPROTO_ICMP && tl >= 2) {
        out->has_icmp = true;
        out->icmp_type = t[0];
        out->icmp_code = t[1];
    }
    return 0;
}

static int on_packet(struct nflog_g_handle *gh, struct nfgenmsg *nfmsg, struct nflog_data *nfd,
                     void *data)
{
    struct crl_nflog *n = data;
    if (n->closing)
        return 0;
    char *payload = NULL;
    int len = nflog_get_payload(nfd, &payload);
    const char *prefix = nflog_get_prefix(nfd);
    struct crl_nflog_pkt pkt;
    bool ok =
        len > 0 && payload && crl_nflog_decode((const uint8_t *)payload, (size_t)len, &pkt) == 0;
    if (!ok)
        n->malformed++;
    n->cb(n->ctx, prefix ? prefix : "", ok ? &pkt : NULL);
    return 0;
}

int crl_nflog_open(uint16_t first, crl_nflog_cb cb, void *ctx, struct crl_nflog **out,
                   struct crl_err *err)
{
    struct crl_nflog *n = calloc(1, sizeof(*n));
    if (!n)
        return crl_err_sys(err, ENOMEM, "nflog");
    n->cb = cb;
    n->ctx = ctx;
    if (!(n->h = nflog_open())) {
        crl_err_sys(err, errno, "nflog_open (a NETLINK_NETFILTER socket)");
        goto fail;
    }
    int fd = nflog_fd(n->h);
    /* libnfnetlink's socket is made without SOCK_CLOEXEC: corrald's children must not get it. */
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
        crl_err_sys(err, errno, "fcntl(netlink socket, F_SETFD, FD_CLOEXEC)");
        goto fail;
    }
    /* A group is the kernel's per network namespace; one bound by another
     * socket (another daemon's, a stray listener's) is refused with EPERM
     * (nfulnl_recv_config; EBUSY is for a socket's own group): take the
     * next.  Without CAP_NET_ADMIN every one is EPERM, and the error says so. */
    uint16_t g = first ? first : 1;
    int e = 0;
    for (unsigned i = 0; i < GROUPS_TRIED && !n->gh; i++, g = g == UINT16_MAX ? 1 : g + 1) {
        if ((n->gh = nflog_bind_group(n->h, g)))
            n->group = g;
        else if ((e = errno) != EPERM && e != EBUSY)
            break;
    }
    if (!n->gh) {
        crl_err_sys(err, e ? e : EPERM, "bind NFLOG group %u (and the %u after)", first,
                    GROUPS_TRIED - 1);
        goto fail;
    }
    if (nflog_set_mode(n->gh, NFULNL_COPY_PACKET, CRL_NFLOG_COPY) < 0 ||
        nflog_set_qthresh(n->gh, QTHRESH) < 0 || nflog_set_timeout(n->gh, FLUSH_CS) < 0) {
        crl_err_sys(err, errno, "configure NFLOG group %u", n->group);
        goto fail;
    }
    nflog_callback_register(n->gh, on_packet, n);
    int size = RCVBUF;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) < 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)); /* capped: still works */
    if (crl_set_nonblock(fd, 1) < 0) {
        crl_err_sys(err, errno, "set the NFLOG socket nonblocking");
        goto fail;
    }
    *out = n;
    return 0;
fail:
    crl_nflog_free(n);
    return -1;
}

void crl_nflog_free(struct crl_nflog *n)
{
    if (!n)
        return;
    if (n->gh) {
        /* The unbind waits for its answer, past reports queued before it
         * (dropped: closing); blocking, so that EAGAIN does not end it early. */
        n->closing = true;
        crl_set_nonblock(nflog_fd(n->h), 0);
        for (int i = 0; i < 3 && n->gh; i++)
            if (nflog_unbind_group(n->gh) == 0)
                n->gh = NULL;
    }
    /* Closing the socket unbinds a group still bound, in the kernel; the
     * library's handle of it leaks then, which only a failed unbind leaves. */
    if (n->h)
        nflog_close(n->h);
    free(n);
}

uint16_t crl_nflog_group(const struct crl_nflog *n)
{
    return n->group;
}

int crl_nflog_fd(const struct crl_nflog *n)
{
    return nflog_fd(n->h);
}

unsigned crl_nflog_read(struct crl_nflog *n, unsigned budget)
{
    int fd = nflog_fd(n->h);
    unsigned got = 0;
    while (got < budget) {
        ssize_t len = recv(fd, n->buf, sizeof(n->buf), MSG_DONTWAIT);
        if (len < 0 && errno == EINTR)
            continue;
        if (len < 0 && errno == ENOBUFS) {
            n->lost++; /* the kernel dropped reports: how many, it does not say */
            continue;
        }
        if (len <= 0)
            break;
        got++;
        nflog_handle_packet(n->h, n->buf, (int)len);
    }
    return got;
}

uint64_t crl_nflog_lost(const struct crl_nflog *n)
{
    return n->lost;
}

uint64_t crl_nflog_malformed(const struct crl_nflog *n)
{
    return n->malformed;
}
