/* lib/os/vnet in network namespaces of the test's own: each case first
 * unshares one to play corrald's ("the host"), so nothing here touches this
 * machine's links, routes or nftables.  Sandboxes' namespaces come from
 * lib/os/netns, as corrald's do.  Needs root (netlink, nftables). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/os/netns.h"
#include "../../lib/os/vnet.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

#define RANGE "10.213.0.0/24"
#define DNS_PORT 5353

static int host_netns = -1;

static void become_host(void)
{
    if (unshare(CLONE_NEWNET) < 0) {
        printf("Bail out! unshare(CLONE_NEWNET): %s\n", strerror(errno));
        exit(255);
    }
    host_netns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int lo = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    ioctl(lo, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP;
    ioctl(lo, SIOCSIFFLAGS, &ifr);
    close(lo);
}

static struct crl_vnet *new_vnet(uint32_t tag)
{
    struct crl_vnet_config cfg = {.tag = tag, .dns_port = DNS_PORT};
    struct crl_err e = CRL_ERR_INIT;
    struct crl_vnet *v = NULL;
    if (crl_vnet_parse_range(RANGE, &cfg, &e) < 0 || crl_vnet_new(&cfg, &v, &e) < 0)
        diag("vnet: %s", e.msg);
    return v;
}

/* A socket made in netns `ns` (the test comes back to its own). */
static int socket_in(int ns, int type, int proto)
{
    if (ns >= 0 && setns(ns, CLONE_NEWNET) < 0)
        return -1;
    int s = socket(AF_INET, type | SOCK_CLOEXEC, proto);
    if (ns >= 0 && setns(host_netns, CLONE_NEWNET) < 0)
        abort();
    return s;
}

static struct sockaddr_in sin_of(uint32_t a, uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(a);
    return sa;
}

/* A TCP listener on a:port in netns ns (-1: the test's). */
static int listen_in(int ns, uint32_t a, uint16_t port)
{
    int s = socket_in(ns, SOCK_STREAM, 0);
    struct sockaddr_in sa = sin_of(a, port);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 8) < 0) {
        diag("listen on %u: %s", port, strerror(errno));
        return -1;
    }
    return s;
}

/* Does a TCP connect from netns ns to a:port succeed within 300 ms? */
static bool connects(int ns, uint32_t a, uint16_t port)
{
    int s = socket_in(ns, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = sin_of(a, port);
    bool ok = false;
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        ok = true;
    } else if (errno == EINPROGRESS) {
        struct pollfd p = {.fd = s, .events = POLLOUT};
        int e = 0;
        socklen_t l = sizeof(e);
        ok = poll(&p, 1, 300) == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e == 0;
    }
    close(s);
    return ok;
}

/* An ICMP echo from netns ns to a, as an unprivileged ping does. */
static bool pings(int ns, uint32_t a)
{
    int s = socket_in(ns, SOCK_DGRAM, IPPROTO_ICMP);
    if (s < 0) {
        diag("ICMP socket: %s", strerror(errno));
        return false;
    }
    struct icmphdr h = {.type = ICMP_ECHO};
    struct sockaddr_in sa = sin_of(a, 0);
    struct pollfd p = {.fd = s, .events = POLLIN};
    char reply[64];
    bool ok = sendto(s, &h, sizeof(h), 0, (struct sockaddr *)&sa, sizeof(sa)) == sizeof(h) &&
              poll(&p, 1, 300) == 1 && recv(s, reply, sizeof(reply), 0) > 0;
    close(s);
    return ok;
}

static bool link_exists(int ns, const char *name)
{
    if (ns >= 0 && setns(ns, CLONE_NEWNET) < 0)
        return false;
    bool r = if_nametoindex(name) != 0;
    if (ns >= 0 && setns(host_netns, CLONE_NEWNET) < 0)
        abort();
    return r;
}

/* Is the link's queue ready (IFF_RUNNING: the kernel's link watch ran)? */
static bool running(int ns, const char *name)
{
    int s = socket_in(ns, SOCK_DGRAM, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    bool r = s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_RUNNING);
    if (s >= 0)
        close(s);
    return r;
}

static bool table_exists(const char *table)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "nft list table inet %s >/dev/null 2>&1", table);
    FILE *f = popen(cmd, "r");
    return f && pclose(f) == 0;
}

static void test_ranges(void)
{
    struct crl_vnet_config c = {0};
    struct crl_err e = CRL_ERR_INIT;
    is_int(crl_vnet_parse_range("10.213.0.0/16", &c, &e), 0, "a /16 range");
    ok(c.range == 0x0ad50000 && c.prefix == 16, "its address and prefix");
    like(crl_vnet_parse_range("10.213.0.1/16", &c, &e) < 0 ? e.msg : "", "host bits",
         "host bits set: refused");
    like(crl_vnet_parse_range("10.213.0.0/30", &c, &e) < 0 ? e.msg : "", "8-28",
         "a /30 holds no sandbox: refused");
    like(crl_vnet_parse_range("10.213.0.0", &c, &e) < 0 ? e.msg : "", "A.B.C.D/N",
         "no prefix: refused");
    like(crl_vnet_parse_range("10.213.0.0/1x", &c, &e) < 0 ? e.msg : "", "A.B.C.D/N",
         "a bad prefix: refused");
}

static void case_attach(void)
{
    become_host();
    struct crl_vnet *v = new_vnet(0xabc001);
    if (!ok(v != NULL, "a vnet in a namespace of the test's"))
        return;
    is_int((int)crl_vnet_slots(v), 64, "a /24 holds 64 sandboxes");
    ok(table_exists("corral_abc001"), "its table exists");
    struct crl_netns_pool *pool;
    struct crl_err e = CRL_ERR_INIT;
    crl_netns_pool_new(4, &pool, &e);
    int ns0 = crl_netns_get(pool, &e), ns1 = crl_netns_get(pool, &e);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r0 = crl_vnet_attach(v, 0, ns0, "accept", &e);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!is_int(r0, 0, "attach slot 0"))
        diag("%s", e.msg);
    diag("attach took %.2f ms",
         (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    if (!is_int(crl_vnet_attach(v, 1, ns1, "accept", &e), 0, "attach slot 1"))
        diag("%s", e.msg);
    char name[IFNAMSIZ];
    crl_vnet_link_name(v, 0, name, sizeof(name));
    is_str(name, "crabc001s0", "the host end's name");
    ok(link_exists(-1, name) && link_exists(ns0, "eth0"), "both ends exist");

    uint32_t gw0 = crl_vnet_gateway(v, 0), a1 = crl_vnet_address(v, 1);
    int dns = listen_in(-1, gw0, DNS_PORT), other = listen_in(-1, gw0, DNS_PORT + 1);
    ok(connects(ns0, gw0, DNS_PORT), "a sandbox reaches the resolver's port on its gateway");
    ok(!connects(ns0, gw0, DNS_PORT + 1), "and no other port of the host");
    ok(pings(ns0, gw0), "it pings its gateway, without CAP_NET_RAW");
    int in1 = listen_in(ns1, a1, 80);
    ok(!connects(ns0, a1, 80), "a sandbox does not reach another");
    ok(connects(-1, a1, 80), "the host (corrald's port proxy) reaches a sandbox's port");
    ok(!connects(ns0, 0xa9fea9fe, 80), "nor the metadata address");

    if (!is_int(crl_vnet_set_rules(v, 0, "drop", &e), 0, "replace slot 0's rules"))
        diag("%s", e.msg);
    ok(connects(ns0, gw0, DNS_PORT), "the resolver's port does not depend on the rules");

    crl_vnet_park(v, 0, ns0);
    ok(link_exists(-1, name), "a parked slot keeps its link");
    int back = crl_vnet_unpark(v, 0, "accept", &e);
    is_int(back, ns0, "unpark gives the parked namespace back");
    ok(crl_vnet_unpark(v, 0, "accept", &e) < 0 && errno == ENOENT, "once");
    ok(connects(ns0, gw0, DNS_PORT), "and it works again");
    crl_vnet_detach(v, 0);
    ok(!link_exists(-1, name) && !link_exists(ns0, "eth0"), "detach removes both ends");
    if (!is_int(crl_vnet_attach(v, 0, ns0, "accept", &e), 0, "the namespace is attached again"))
        diag("%s", e.msg);
    ok(running(ns0, "eth0") && running(-1, name), "with both ends running when attach returns");
    ok(connects(ns0, gw0, DNS_PORT), "and works");
    like(crl_vnet_attach(v, 64, ns0, "accept", &e) < 0 ? e.msg : "", "past the range",
         "a slot past the range is refused");
    like(crl_vnet_attach(v, 2, ns0, "accept", &e) < 0 ? e.msg : "", "veth",
         "a namespace that has an eth0 already is refused");
    ok(!link_exists(-1, "crabc001s2"), "and leaves no link");
    like(crl_vnet_set_rules(v, 1, "bogus rule", &e) < 0 ? e.msg : "", "nftables",
         "bad rules are refused with nft's message");

    /* A crashed run's links and table: the next vnet of the tag removes them. */
    struct crl_vnet *again = new_vnet(0xabc001);
    ok(again && !link_exists(-1, "crabc001s0") && !link_exists(-1, "crabc001s1"),
       "a new vnet of the tag removes the old one's links");
    crl_vnet_free(again);
    ok(!table_exists("corral_abc001"), "free removes the table");
    crl_vnet_free(v);
    close(dns);
    close(other);
    close(in1);
    crl_netns_put(pool, ns0);
    crl_netns_put(pool, ns1);
    crl_netns_pool_free(pool);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void case_timing(void)
{
    become_host();
    struct crl_vnet *v = new_vnet(0xabc002);
    struct crl_netns_pool *pool;
    struct crl_err e = CRL_ERR_INIT;
    crl_netns_pool_new(4, &pool, &e);
    int ns = crl_netns_get(pool, &e);
    enum { N = 50 };
    double attach = 0, detach = 0, park = 0, unpark = 0;
    int fails = 0;
    for (int i = 0; i < N; i++) {
        double t0 = now_ms();
        fails += crl_vnet_attach(v, (unsigned)i, ns, "accept", &e) < 0;
        double t1 = now_ms();
        crl_vnet_detach(v, (unsigned)i);
        attach += t1 - t0;
        detach += now_ms() - t1;
    }
    is_int(fails, 0, "50 attach and detach");
    fails += crl_vnet_attach(v, 0, ns, "accept", &e) < 0;
    for (int i = 0; i < N; i++) {
        double t0 = now_ms();
        crl_vnet_park(v, 0, ns);
        double t1 = now_ms();
        ns = crl_vnet_unpark(v, 0, "accept", &e);
        fails += ns < 0;
        park += t1 - t0;
        unpark += now_ms() - t1;
    }
    is_int(fails, 0, "50 park and unpark");
    diag("attach %.2f ms, detach %.2f ms, park %.2f ms, unpark %.2f ms (means of %d)", attach / N,
         detach / N, park / N, unpark / N, N);
    crl_vnet_free(v);
    crl_netns_put(pool, ns);
    crl_netns_pool_free(pool);
}

int main(void)
{
    if (geteuid() != 0)
        skip_all("needs root: network namespaces, netlink, nftables");
    test_ranges();
    tap_run("attach, rules, detach, leftovers", case_attach, 60);
    tap_run("timing", case_timing, 120);
    return done_testing();
}
