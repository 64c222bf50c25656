/* lib/os/nflog: the decoder of a dropped packet's start (hostile bytes),
 * and, as root in a network namespace of the test's own, the reader of an
 * NFLOG group: two readers get two groups, and a packet logged by an
 * nftables rule arrives with its prefix. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../lib/os/nflog.h"
#include "tap.h"

/* An IPv4 header (ihl words) to 203.0.113.7 from 10.213.0.2, then `rest`. */
static size_t ip4(uint8_t *p, unsigned ihl, uint8_t proto, const uint8_t *rest, size_t n)
{
    memset(p, 0, ihl * 4);
    p[0] = (uint8_t)(0x40 | ihl);
    size_t total = ihl * 4 + n;
    p[2] = (uint8_t)(total >> 8);
    p[3] = (uint8_t)total;
    p[8] = 64;
    p[9] = proto;
    const uint8_t src[4] = {10, 213, 0, 2}, dst[4] = {203, 0, 113, 7};
    memcpy(p + 12, src, 4);
    memcpy(p + 16, dst, 4);
    memcpy(p + ihl * 4, rest, n);
    return total;
}

static void test_decode(void)
{
    uint8_t p[128];
    struct crl_nflog_pkt k;
    const uint8_t tcp[20] = {0xc3, 0x50, 0x01, 0xbb}; /* 50000 -> 443 */
    size_t n = ip4(p, 5, IPPROTO_TCP, tcp, sizeof(tcp));
    ok(crl_nflog_decode(p, n, &k) == 0 && k.proto == IPPROTO_TCP && k.has_ports &&
           k.sport == 50000 && k.dport == 443,
       "TCP: its ports");
    ok(k.daddr[0] == 203 && k.daddr[3] == 7 && k.saddr[0] == 10 && k.saddr[3] == 2,
       "and its addresses");
    is_str(crl_nflog_proto_name(k.proto), "tcp", "named tcp");

    const uint8_t udp[8] = {0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0};
    n = ip4(p, 15, IPPROTO_UDP, udp, sizeof(udp)); /* with 40 bytes of options */
    ok(crl_nflog_decode(p, n, &k) == 0 && k.has_ports && k.dport == 53 && k.sport == 12345,
       "UDP after options: its ports");

    const uint8_t icmp[8] = {8, 0};
    n = ip4(p, 5, IPPROTO_ICMP, icmp, sizeof(icmp));
    ok(crl_nflog_decode(p, n, &k) == 0 && k.has_icmp && k.icmp_type == 8 && !k.has_ports,
       "ICMP: its type, no ports");

    n = ip4(p, 5, IPPROTO_TCP, tcp, sizeof(tcp));
    ok(crl_nflog_decode(p, 22, &k) == 0 && !k.has_ports, "a TCP header cut short: no ports");
    ok(crl_nflog_decode(p, 19, &k) < 0, "an IPv4 header cut short is refused");
    p[3] = 22; /* the packet says it ends two bytes into TCP: what follows is not its */
    ok(crl_nflog_decode(p, n, &k) == 0 && !k.has_ports, "the total length bounds the read");
    n = ip4(p, 15, IPPROTO_TCP, tcp, sizeof(tcp));
    ok(crl_nflog_decode(p, 40, &k) == 0 && !k.has_ports && k.daddr[0] == 203,
       "options cut short: the addresses, no ports");
    n = ip4(p, 5, IPPROTO_UDP, udp, sizeof(udp));
    p[6] = 0x00, p[7] = 0x10; /* fragment offset 16 */
    ok(crl_nflog_decode(p, n, &k) == 0 && !k.has_ports, "a later fragment: no ports");
    n = ip4(p, 4, IPPROTO_TCP, tcp, sizeof(tcp));
    ok(crl_nflog_decode(p, n, &k) < 0, "an IHL under 5 is refused");
    n = ip4(p, 5, IPPROTO_TCP, tcp, sizeof(tcp));
    p[0] = 0x65;
    ok(crl_nflog_decode(p, n, &k) < 0, "IPv6 (or any version but 4) is refused");
    n = ip4(p, 5, 132, tcp, sizeof(tcp));
    ok(crl_nflog_decode(p, n, &k) == 0 && k.proto == 132 && !k.has_ports &&
           crl_nflog_proto_name(132) == NULL,
       "another protocol: its number, no name");
    ok(crl_nflog_decode(p, 0, &k) < 0, "nothing is refused");
}

struct seen {
    unsigned n, bad;
    char prefix[128];
    struct crl_nflog_pkt pkt;
};

static void on_pkt(void *ctx, const char *prefix, const struct crl_nflog_pkt *pkt)
{
    struct seen *s = ctx;
    if (!pkt) {
        s->bad++;
        return;
    }
    s->n++;
    snprintf(s->prefix, sizeof(s->prefix), "%s", prefix);
    s->pkt = *pkt;
}

static int nft(const char *script)
{
    struct nft_ctx *c = nft_ctx_new(NFT_CTX_DEFAULT);
    int r = nft_run_cmd_from_buffer(c, script);
    nft_ctx_free(c);
    return r;
}

static void case_reader(void)
{
    if (unshare(CLONE_NEWNET) < 0) {
        diag("unshare(CLONE_NEWNET): %s", strerror(errno));
        ok(0, "a network namespace of the test's own");
        return;
    }
    int lo = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    ioctl(lo, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP;
    ioctl(lo, SIOCSIFFLAGS, &ifr);

    struct crl_err e = CRL_ERR_INIT;
    struct seen a = {0}, b = {0};
    struct crl_nflog *na = NULL, *nb = NULL;
    if (!ok(crl_nflog_open(4000, on_pkt, &a, &na, &e) == 0, "open a reader")) {
        diag("%s", e.msg);
        close(lo);
        return;
    }
    is_int(crl_nflog_group(na), 4000, "it has the group asked for");
    ok(fcntl(crl_nflog_fd(na), F_GETFD) & FD_CLOEXEC, "its socket is close-on-exec");
    if (!ok(crl_nflog_open(4000, on_pkt, &b, &nb, &e) == 0, "a second reader from the same group"))
        diag("%s", e.msg);
    is_int(nb ? crl_nflog_group(nb) : 0, 4001,
           "gets the next (the kernel refused the first: EPERM)");

    char script[512];
    snprintf(script, sizeof(script),
             "table ip t {\n chain out {\n  type filter hook output priority 0;\n"
             "  ip daddr 127.0.0.9 udp dport 9 log group %u prefix \"s3 not allowed\"\n"
             "  ip daddr 127.0.0.9 udp dport 9 drop\n }\n}\n",
             crl_nflog_group(na));
    is_int(nft(script), 0, "a log rule to its group");
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9)};
    inet_pton(AF_INET, "127.0.0.9", &to.sin_addr);
    sendto(lo, "x", 1, 0, (struct sockaddr *)&to, sizeof(to));
    for (int i = 0; i < 20 && a.n == 0; i++) {
        struct pollfd p = {.fd = crl_nflog_fd(na), .events = POLLIN};
        if (poll(&p, 1, 100) == 1)
            crl_nflog_read(na, 8);
    }
    is_int(a.n, 1, "the dropped packet is reported");
    is_str(a.prefix, "s3 not allowed", "with the rule's prefix");
    ok(a.pkt.proto == IPPROTO_UDP && a.pkt.has_ports && a.pkt.dport == 9 && a.pkt.daddr[3] == 9,
       "and what it was: UDP to 127.0.0.9:9");
    is_int(b.n + b.bad, 0, "the other group saw nothing");
    is_int(crl_nflog_read(na, 8), 0, "then nothing more, without blocking");
    crl_nflog_free(nb);
    crl_nflog_free(na);
    close(lo);
}

int main(void)
{
    test_decode();
    if (geteuid() != 0) {
        skip(1, "the reader needs root: a network namespace, netlink, nftables");
    } else {
        tap_run("reader", case_reader, 30);
    }
    return done_testing();
}
