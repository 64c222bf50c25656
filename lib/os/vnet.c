#include "vnet.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <linux/if_tun.h>
#include <netlink/route/link.h>
#include <netlink/route/link/bridge.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>
#include <jansson.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <nftables/libnftables.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "netns.h"

#define VNET_LINK_PREFIX "cr%06x"

/* A slot's sets (vnet.h), declared: "add" makes them if absent.  Formats
 * with the table (%1$s) and the slot (%2$u) as its first two arguments. */
#define SLOT_SETS                                                                            \
    "add set inet %1$s s%2$ua { type ipv4_addr . inet_service; flags interval, timeout; }\n" \
    "add set inet %1$s s%2$uh { type ipv4_addr; flags timeout; }\n"                          \
    "add set inet %1$s s%2$ud { type ipv4_addr . inet_service; flags interval, timeout; }\n" \
    "add limit inet %1$s s%2$ul { rate " CRL_VNET_LOG_RATE "; }\n"

/* A netlink socket and an nftables context: neither may be used by two
 * threads at once, so the loop and the set-up each have their own. */
struct vnet_io {
    struct nl_sock *sk;
    struct nft_ctx *nft;
};

struct crl_vnet {
    struct crl_vnet_config cfg;
    char table[32];             /* corral_<tag> */
    char prefix[16];            /* cr<tag>: every link of this daemon's starts so */
    struct vnet_io io;          /* the loop's */
    struct vnet_io setup;       /* attach, unpark and detach's (crl_vnet_attach) */
    pthread_mutex_t setup_lock; /* held around each use of setup */
    int host_netns;             /* corrald's own, to come back to */
    int *parked;                /* by slot: a namespace kept with its link, or -1 */
};

static int nl_failed(struct crl_err *err, int nle, const char *what, const char *name)
{
    return crl_err_set(err, CRL_E_INTERNAL, "%s %s: %s", what, name, nl_geterror(nle));
}

int crl_vnet_parse_range(const char *s, struct crl_vnet_config *cfg, struct crl_err *err)
{
    char addr[INET_ADDRSTRLEN];
    const char *slash = strchr(s, '/');
    if (!slash || (size_t)(slash - s) >= sizeof(addr))
        return crl_err_set(err, CRL_E_INVALID, "network range '%s': expected A.B.C.D/N", s);
    memcpy(addr, s, (size_t)(slash - s));
    addr[slash - s] = '\0';
    struct in_addr in;
    char *end;
    errno = 0;
    unsigned long n = strtoul(slash + 1, &end, 10);
    if (inet_pton(AF_INET, addr, &in) != 1 || end == slash + 1 || *end || errno)
        return crl_err_set(err, CRL_E_INVALID, "network range '%s': expected A.B.C.D/N", s);
    if (n < 8 || n > 28)
        return crl_err_set(err, CRL_E_INVALID,
                           "network range '%s': the prefix must be 8-28 (a /30 per sandbox)", s);
    uint32_t a = ntohl(in.s_addr);
    if (a & ~(0xffffffffu << (32 - n)))
        return crl_err_set(err, CRL_E_INVALID, "network range '%s': host bits are set", s);
    cfg->range = a;
    cfg->prefix = (unsigned)n;
    return 0;
}

unsigned crl_vnet_slots(const struct crl_vnet *v)
{
    return 1u << (32 - v->cfg.prefix - 2);
}

uint32_t crl_vnet_gateway(const struct crl_vnet *v, unsigned slot)
{
    return v->cfg.range + 4 * slot + 1;
}

uint32_t crl_vnet_address(const struct crl_vnet *v, unsigned slot)
{
    return v->cfg.range + 4 * slot + 2;
}

void crl_vnet_link_name(const struct crl_vnet *v, unsigned slot, char *buf, size_t cap)
{
    snprintf(buf, cap, "%ss%u", v->prefix, slot);
}

const char *crl_vnet_table(const struct crl_vnet *v)
{
    return v->table;
}

static void ip4(uint32_t a, char *buf, size_t cap)
{
    struct in_addr in = {.s_addr = htonl(a)};
    inet_ntop(AF_INET, &in, buf, (socklen_t)cap);
}

static int run_nft(struct crl_vnet *v, struct vnet_io *io, const char *script, struct crl_err *err)
{
    if (nft_run_cmd_from_buffer(io->nft, script) == 0)
        return 0;
    const char *e = nft_ctx_get_error_buffer(io->nft);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", e && *e ? e : "failed");
    msg[strcspn(msg, "\n")] = '\0'; /* its first line names the error */
    crl_debug(NULL, "network: nftables refused:\n%s\n%s", script, e ? e : "");
    return crl_err_set(err, CRL_E_INTERNAL, "nftables (table %s): %s", v->table, msg);
}

int crl_vnet_nft(struct crl_vnet *v, const char *script, struct crl_err *err)
{
    return run_nft(v, &v->io, script, err);
}

/* Delete every link whose name starts with this daemon's prefix (a
 * crashed run's; the sandbox end of each pair goes with it). */
static void delete_links(struct crl_vnet *v)
{
    struct nl_cache *cache = NULL;
    if (rtnl_link_alloc_cache(v->io.sk, AF_UNSPEC, &cache) < 0)
        return;
    size_t plen = strlen(v->prefix);
    for (struct nl_object *o = nl_cache_get_first(cache); o; o = nl_cache_get_next(o)) {
        struct rtnl_link *l = (struct rtnl_link *)o;
        const char *name = rtnl_link_get_name(l);
        if (name && strncmp(name, v->prefix, plen) == 0)
            rtnl_link_delete(v->io.sk, l);
    }
    nl_cache_free(cache);
}

static int write_sysctl(const char *path, const char *value, struct crl_err *err)
{
    if (crl_write_file_at(AT_FDCWD, path, value) < 0)
        return crl_err_sys(err, errno, "write %s to %s", value, path);
    return 0;
}

static int base_table(struct crl_vnet *v, struct crl_err *err)
{
    char range[INET_ADDRSTRLEN], dns[96] = "", redirect[160] = "", svc_net[INET_ADDRSTRLEN],
                                 svc_in[256] = "", svc_redirect[160] = "";
    ip4(v->cfg.range, range, sizeof(range));
    ip4(v->cfg.service_net, svc_net, sizeof(svc_net));
    if (v->cfg.service_port) {
        /* Its services' connections count toward its limit as others do. */
        snprintf(svc_in, sizeof(svc_in),
                 "iifname \"%1$s*\" tcp dport %2$u ct state new"
                 " add @conns { ip saddr ct count over %3$u } drop\n"
                 "    iifname \"%1$s*\" tcp dport %2$u accept",
                 v->prefix, v->cfg.service_port, v->cfg.max_conns);
        snprintf(svc_redirect, sizeof(svc_redirect),
                 "iifname \"%s*\" ip daddr %s/24 tcp dport 1-65535 redirect to :%u", v->prefix,
                 svc_net, v->cfg.service_port);
    }
    if (v->cfg.dns_port) {
        snprintf(dns, sizeof(dns), "iifname \"%s*\" meta l4proto { tcp, udp } th dport %u accept",
                 v->prefix, v->cfg.dns_port);
        /* Whatever server a sandbox asks, corrald's resolver answers. */
        snprintf(redirect, sizeof(redirect),
                 "iifname \"%s*\" meta l4proto { tcp, udp } th dport 53 redirect to :%u", v->prefix,
                 v->cfg.dns_port);
    }
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    /* "add" then "delete": a table of a crashed run goes, a missing one is no error. */
    crl_buf_printf(
        &b,
        "add table inet %1$s\n"
        "delete table inet %1$s\n"
        "table inet %1$s {\n"
        "  map links { type ifname : verdict; }\n"
        "  set conns { type ipv4_addr; flags dynamic; size 65536; }\n"
        "  set peers { type ipv4_addr; }\n"
        "  chain forward {\n"
        "    type filter hook forward priority filter - 1; policy accept;\n"
        "    iifname \"%2$s*\" jump from_sandbox\n"
        "    oifname \"%2$s*\" ct state established,related accept\n"
        "    oifname \"%2$s*\" drop\n"
        "  }\n"
        "  chain from_sandbox {\n"
        "    ct state established,related accept\n"
        "    meta nfproto ipv6 drop\n"
        "    ip daddr { %3$s/%4$u, %7$s/24, 169.254.0.0/16, 224.0.0.0/4, 255.255.255.255 }"
        " drop\n"
        "    ip daddr @peers drop\n"
        "    iifname vmap @links\n"
        "    drop\n"
        "  }\n"
        "  chain prerouting {\n"
        "    type nat hook prerouting priority dstnat; policy accept;\n"
        "    %6$s\n"
        "    %8$s\n"
        "  }\n"
        "  chain input {\n"
        "    type filter hook input priority filter - 1; policy accept;\n"
        "    ip saddr %3$s/%4$u iifname != \"%2$s*\" drop\n"
        "    iifname \"%2$s*\" ct state established,related accept\n"
        "    iifname \"%2$s*\" icmp type echo-request accept\n"
        "    %5$s\n"
        "    %9$s\n"
        "    iifname \"%2$s*\" drop\n"
        "  }\n"
        "  chain postrouting {\n"
        "    type nat hook postrouting priority srcnat; policy accept;\n"
        "    ip saddr %3$s/%4$u oifname != \"%2$s*\" masquerade\n"
        "  }\n"
        "}\n",
        v->table, v->prefix, range, v->cfg.prefix, dns, redirect, svc_net, svc_redirect, svc_in);
    int r = b.data ? crl_vnet_nft(v, b.data, err) : crl_err_sys(err, ENOMEM, "nftables script");
    crl_buf_free(&b);
    return r;
}

void crl_vnet_reconcile(uint32_t tag)
{
    struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
    struct nl_sock *sk = nl_socket_alloc();
    if (nft && sk && nl_connect(sk, NETLINK_ROUTE) == 0 && nft_ctx_buffer_output(nft) == 0 &&
        nft_ctx_buffer_error(nft) == 0) {
        struct crl_vnet v = {.io = {.sk = sk, .nft = nft}};
        snprintf(v.table, sizeof(v.table), "corral_%06x", tag & 0xffffff);
        snprintf(v.prefix, sizeof(v.prefix), VNET_LINK_PREFIX, tag & 0xffffff);
        char script[96];
        snprintf(script, sizeof(script), "list table inet %s\n", v.table);
        if (crl_vnet_nft(&v, script, NULL) == 0) {
            crl_info(NULL, "network: removing table inet %s of a previous run", v.table);
            snprintf(script, sizeof(script), "delete table inet %s\n", v.table);
            crl_vnet_nft(&v, script, NULL);
        }
        delete_links(&v);
    }
    if (sk)
        nl_socket_free(sk);
    if (nft)
        nft_ctx_free(nft);
}

static int io_open(struct vnet_io *io, struct crl_err *err)
{
    int r;
    if (!(io->sk = nl_socket_alloc()) || !(io->nft = nft_ctx_new(NFT_CTX_DEFAULT)))
        return crl_err_sys(err, ENOMEM, "netlink or nftables context");
    if ((r = nl_connect(io->sk, NETLINK_ROUTE)) < 0)
        return nl_failed(err, r, "netlink", "connect");
    if (nft_ctx_buffer_output(io->nft) < 0 || nft_ctx_buffer_error(io->nft) < 0)
        return crl_err_sys(err, ENOMEM, "nftables buffers");
    return 0;
}

static void io_close(struct vnet_io *io)
{
    if (io->nft)
        nft_ctx_free(io->nft);
    if (io->sk)
        nl_socket_free(io->sk);
}

int crl_vnet_new(const struct crl_vnet_config *cfg, struct crl_vnet **out, struct crl_err *err)
{
    struct crl_vnet *v = calloc(1, sizeof(*v));
    if (!v)
        return crl_err_sys(err, ENOMEM, "vnet");
    v->cfg = *cfg;
    if (!v->cfg.max_conns)
        v->cfg.max_conns = 1024;
    v->host_netns = -1;
    pthread_mutex_init(&v->setup_lock, NULL);
    if (!(v->parked = malloc(crl_vnet_slots(v) * sizeof(int)))) {
        free(v);
        return crl_err_sys(err, ENOMEM, "vnet");
    }
    for (unsigned i = 0; i < crl_vnet_slots(v); i++)
        v->parked[i] = -1;
    snprintf(v->table, sizeof(v->table), "corral_%06x", cfg->tag & 0xffffff);
    snprintf(v->prefix, sizeof(v->prefix), VNET_LINK_PREFIX, cfg->tag & 0xffffff);
    if (io_open(&v->io, err) < 0 || io_open(&v->setup, err) < 0)
        goto fail;
    v->host_netns = crl_openat(AT_FDCWD, "/proc/thread-self/ns/net", O_RDONLY, 0);
    if (v->host_netns < 0) {
        crl_err_sys(err, errno, "open /proc/thread-self/ns/net");
        goto fail;
    }
    delete_links(v);
    /* A sandbox's packets are routed through this namespace. */
    if (write_sysctl("/proc/sys/net/ipv4/ip_forward", "1", err) < 0 || base_table(v, err) < 0)
        goto fail;
    *out = v;
    return 0;
fail:
    crl_vnet_free(v);
    return -1;
}

void crl_vnet_free(struct crl_vnet *v)
{
    if (!v)
        return;
    if (v->io.sk && v->io.nft) {
        char script[96];
        snprintf(script, sizeof(script), "add table inet %1$s\ndelete table inet %1$s\n", v->table);
        struct crl_err e = CRL_ERR_INIT;
        if (crl_vnet_nft(v, script, &e) < 0)
            crl_warn(NULL, "network: %s", e.msg);
    }
    for (unsigned i = 0; v->parked && i < crl_vnet_slots(v); i++)
        close_fd(&v->parked[i]);
    free(v->parked);
    io_close(&v->io);
    io_close(&v->setup);
    pthread_mutex_destroy(&v->setup_lock);
    if (v->host_netns >= 0)
        close(v->host_netns);
    free(v);
}

enum addr_op { ADDR_ADD, ADDR_ADD_IF_MISSING, ADDR_DELETE };

/* Add (ADDR_ADD_IF_MISSING: there already is no error) or remove an
 * address of the link `name`. */
static int address(struct nl_sock *sk, int ifindex, uint32_t a, unsigned prefix, const char *name,
                   enum addr_op op, struct crl_err *err)
{
    uint32_t be = htonl(a);
    struct rtnl_addr *ra = rtnl_addr_alloc();
    struct nl_addr *local = nl_addr_build(AF_INET, &be, sizeof(be));
    int r = -NLE_NOMEM;
    if (ra && local) {
        nl_addr_set_prefixlen(local, (int)prefix);
        rtnl_addr_set_ifindex(ra, ifindex);
        rtnl_addr_set_local(ra, local);
        r = op == ADDR_DELETE ? rtnl_addr_delete(sk, ra, 0) : rtnl_addr_add(sk, ra, 0);
    }
    if (local)
        nl_addr_put(local);
    if (ra)
        rtnl_addr_put(ra);
    if (r == -NLE_EXIST && op == ADDR_ADD_IF_MISSING)
        return 0;
    return r < 0
               ? nl_failed(err, r,
                           op == ADDR_DELETE ? "remove the address of" : "add an address to", name)
               : 0;
}

static int link_up(int sock, const char *name, int *ifindex, struct crl_err *err)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    if (ioctl(sock, SIOCGIFINDEX, &ifr) < 0)
        return crl_err_sys(err, errno, "SIOCGIFINDEX %s", name);
    *ifindex = ifr.ifr_ifindex;
    if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0)
        return crl_err_sys(err, errno, "SIOCGIFFLAGS %s", name);
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(sock, SIOCSIFFLAGS, &ifr) < 0)
        return crl_err_sys(err, errno, "SIOCSIFFLAGS %s up", name);
    return 0;
}

/* Up, a veth pair has its carrier at once but the kernel's link watch
 * readies its queue later, from a work queue: a packet sent before that is
 * dropped (a first SYN, sent again a second later). ETHTOOL_GLINK runs the
 * device's pending link-watch event now (linkwatch_sync_dev); IFF_RUNNING
 * says it ran, on a kernel that lacks that too. */
static int link_settle(int sock, const char *name, struct crl_err *err)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    struct ethtool_value ev = {.cmd = ETHTOOL_GLINK};
    ifr.ifr_data = (void *)&ev;
    (void)ioctl(sock, SIOCETHTOOL, &ifr);
    for (int ms = 0; ms < 2000; ms++) {
        if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0)
            return crl_err_sys(err, errno, "SIOCGIFFLAGS %s", name);
        if (ifr.ifr_flags & IFF_RUNNING)
            return 0;
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    return crl_err_set(err, CRL_E_INTERNAL, "network: %s was not running 2 s after it was up",
                       name);
}

static int default_route(struct nl_sock *sk, int ifindex, uint32_t gw, bool exist_ok,
                         struct crl_err *err)
{
    uint32_t zero = 0, be = htonl(gw);
    struct rtnl_route *rt = rtnl_route_alloc();
    struct rtnl_nexthop *nh = rtnl_route_nh_alloc();
    struct nl_addr *dst = nl_addr_build(AF_INET, &zero, sizeof(zero));
    struct nl_addr *via = nl_addr_build(AF_INET, &be, sizeof(be));
    int r = -NLE_NOMEM;
    if (rt && nh && dst && via) {
        nl_addr_set_prefixlen(dst, 0);
        rtnl_route_set_family(rt, AF_INET);
        rtnl_route_set_dst(rt, dst);
        rtnl_route_nh_set_ifindex(nh, ifindex);
        rtnl_route_nh_set_gateway(nh, via);
        rtnl_route_add_nexthop(rt, nh);
        nh = NULL; /* the route's now */
        r = rtnl_route_add(sk, rt, NLM_F_CREATE | NLM_F_EXCL);
    }
    if (nh)
        rtnl_route_nh_free(nh);
    if (dst)
        nl_addr_put(dst);
    if (via)
        nl_addr_put(via);
    if (rt)
        rtnl_route_put(rt);
    return r < 0 && !(exist_ok && r == -NLE_EXIST)
               ? nl_failed(err, r, "add the default route of", "eth0")
               : 0;
}

/* Sockets and sysctl files of the sandbox's namespace: each is of the
 * namespace it was made in, so corrald enters it only to make them. */
struct inside {
    int sock;
    struct nl_sock *sk;
    int no_ipv6, ping;
};

static void inside_close(struct inside *in)
{
    if (in->sk)
        nl_socket_free(in->sk);
    close_fd(&in->sock);
    close_fd(&in->no_ipv6);
    close_fd(&in->ping);
}

static int enter(struct crl_vnet *v, int netns_fd, struct inside *in, struct crl_err *err)
{
    in->sock = in->no_ipv6 = in->ping = -1;
    in->sk = NULL;
    if (setns(netns_fd, CLONE_NEWNET) < 0)
        return crl_err_sys(err, errno, "setns(the sandbox's netns)");
    int r = 0;
    in->sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    in->no_ipv6 = crl_openat(AT_FDCWD, "/proc/sys/net/ipv6/conf/eth0/disable_ipv6", O_WRONLY, 0);
    /* ICMP echo without CAP_NET_RAW, for every group, as on a normal machine. */
    in->ping = crl_openat(AT_FDCWD, "/proc/sys/net/ipv4/ping_group_range", O_WRONLY, 0);
    if (in->sock < 0 || in->no_ipv6 < 0 || in->ping < 0)
        r = crl_err_sys(err, errno, "a socket or sysctl in the sandbox's netns");
    else if (!(in->sk = nl_socket_alloc()) || nl_connect(in->sk, NETLINK_ROUTE) < 0)
        r = crl_err_set(err, CRL_E_INTERNAL, "netlink in the sandbox's netns");
    crl_netns_return(v->host_netns);
    if (r < 0)
        inside_close(in);
    return r;
}

int crl_vnet_log_rule(uint16_t group, unsigned slot, const char *what, struct crl_buf *out)
{
    if (!group)
        return 0;
    return crl_buf_printf(out,
                          " ct state new limit name \"s%u%c\" log group %u prefix \"s%u %.100s\"\n",
                          slot, CRL_VNET_LOG_LIMIT, group, slot, what);
}

uint16_t crl_vnet_log_group(const struct crl_vnet *v)
{
    return v->cfg.log_group;
}

/* The limit on connections open at once, and its log.  Not a log rule of
 * the same match before it, as for the other drops: that would add the
 * connection to @conns twice (the kernel counts an unconfirmed one again),
 * halving the limit.  The rule goes to a chain of the slot's ("s<slot>c")
 * that logs and drops; its counter and comment stay in the slot's chain. */
static int conn_limit(struct crl_vnet *v, unsigned slot, struct crl_buf *b)
{
    char what[64];
    snprintf(what, sizeof(what), "connections: over %u at once", v->cfg.max_conns);
    if (!v->cfg.log_group)
        return crl_buf_printf(b,
                              "ct state new add @conns { ip saddr ct count over %u } counter drop"
                              " comment \"%s\"\n",
                              v->cfg.max_conns, what);
    return crl_buf_printf(b,
                          "ct state new add @conns { ip saddr ct count over %u } counter"
                          " goto s%uc comment \"%s\"\n",
                          v->cfg.max_conns, slot, what);
}

/* The chain conn_limit goes to (made, or emptied, whether or not it is used). */
static int conn_limit_chain(struct crl_vnet *v, unsigned slot, struct crl_buf *b)
{
    char what[64];
    snprintf(what, sizeof(what), "connections: over %u at once", v->cfg.max_conns);
    int r = crl_buf_printf(b,
                           "add chain inet %1$s s%2$uc\n"
                           "flush chain inet %1$s s%2$uc\n"
                           "table inet %1$s {\n  chain s%2$uc {\n",
                           v->table, slot);
    if (r == 0)
        r = crl_vnet_log_rule(v->cfg.log_group, slot, what, b);
    return r == 0 ? crl_buf_printf(b, "drop\n  }\n}\n") : -1;
}

static int set_chain(struct crl_vnet *v, struct vnet_io *io, unsigned slot, const char *rules,
                     bool link, struct crl_err *err)
{
    char name[IFNAMSIZ];
    crl_vnet_link_name(v, slot, name, sizeof(name));
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    /* The sets first (the rules refer to them), emptied: what a name
     * resolved to under the old rules is asked again under the new. */
    int r = crl_buf_printf(&b,
                           SLOT_SETS "flush set inet %1$s s%2$ua\n"
                                     "flush set inet %1$s s%2$uh\n"
                                     "flush set inet %1$s s%2$ud\n",
                           v->table, slot);
    if (r == 0)
        r = conn_limit_chain(v, slot, &b);
    if (r == 0)
        r = crl_buf_printf(&b,
                           "add chain inet %1$s s%2$u\n"
                           "flush chain inet %1$s s%2$u\n"
                           "table inet %1$s {\n  chain s%2$u {\n",
                           v->table, slot);
    if (r == 0)
        r = conn_limit(v, slot, &b);
    if (r == 0)
        r = crl_buf_printf(&b, "%s\n  }\n}\n", rules);
    if (r == 0 && link)
        r = crl_buf_printf(&b, "add element inet %s links { \"%s\" : jump s%u }\n", v->table, name,
                           slot);
    r = r == 0 ? run_nft(v, io, b.data, err) : crl_err_sys(err, ENOMEM, "nftables script");
    crl_buf_free(&b);
    return r;
}

static void detach(struct crl_vnet *v, struct vnet_io *io, unsigned slot);

static int attach(struct crl_vnet *v, unsigned slot, int netns_fd, const char *rules,
                  struct crl_err *err)
{
    if (slot >= crl_vnet_slots(v))
        return crl_err_set(err, CRL_E_CAPACITY, "network: slot %u is past the range's %u sandboxes",
                           slot, crl_vnet_slots(v));
    char name[IFNAMSIZ];
    crl_vnet_link_name(v, slot, name, sizeof(name));
    struct rtnl_link *veth = rtnl_link_veth_alloc();
    if (!veth)
        return crl_err_sys(err, ENOMEM, "veth");
    struct rtnl_link *peer = rtnl_link_veth_get_peer(veth);
    rtnl_link_set_name(veth, name);
    rtnl_link_set_name(peer, "eth0");
    rtnl_link_set_ns_fd(peer, netns_fd);
    rtnl_link_put(peer);
    int r = rtnl_link_add(v->setup.sk, veth, NLM_F_CREATE | NLM_F_EXCL);
    rtnl_link_veth_release(veth);
    if (r < 0)
        return nl_failed(err, r, "create the veth pair", name);

    struct inside in;
    int ifindex, sb_ifindex;
    cleanup_close int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) {
        crl_err_sys(err, errno, "socket");
        goto undo;
    }
    if (link_up(sock, name, &ifindex, err) < 0 ||
        address(v->setup.sk, ifindex, crl_vnet_gateway(v, slot), 30, name, ADDR_ADD, err) < 0 ||
        enter(v, netns_fd, &in, err) < 0)
        goto undo;
    r = write(in.no_ipv6, "1", 1) == 1 && write(in.ping, "0 2147483647", 12) == 12
            ? 0
            : crl_err_sys(err, errno, "a sysctl of the sandbox's netns");
    if (r == 0)
        r = link_up(in.sock, "eth0", &sb_ifindex, err);
    if (r == 0)
        r = link_settle(in.sock, "eth0", err);
    if (r == 0)
        r = link_settle(sock, name, err);
    if (r == 0)
        r = address(in.sk, sb_ifindex, crl_vnet_address(v, slot), 30, "eth0", ADDR_ADD, err);
    if (r == 0)
        r = default_route(in.sk, sb_ifindex, crl_vnet_gateway(v, slot), false, err);
    inside_close(&in);
    if (r < 0 || set_chain(v, &v->setup, slot, rules, true, err) < 0)
        goto undo;
    return 0;
undo:
    detach(v, &v->setup, slot);
    return -1;
}

int crl_vnet_attach(struct crl_vnet *v, unsigned slot, int netns_fd, const char *rules,
                    struct crl_err *err)
{
    pthread_mutex_lock(&v->setup_lock);
    int r = attach(v, slot, netns_fd, rules, err);
    pthread_mutex_unlock(&v->setup_lock);
    return r;
}

/* ---- a VM's link: eth0 bridged with a tap ---- */

#define VM_BRIDGE "br0"
#define VM_TAP "tap0"

static int del_link(struct nl_sock *sk, const char *name, struct crl_err *err)
{
    struct rtnl_link *l = rtnl_link_alloc();
    if (!l)
        return crl_err_sys(err, ENOMEM, "link");
    rtnl_link_set_name(l, name);
    int r = rtnl_link_delete(sk, l);
    rtnl_link_put(l);
    return r < 0 && r != -NLE_NODEV && r != -NLE_OBJ_NOTFOUND ? nl_failed(err, r, "delete", name)
                                                              : 0;
}

/* Back as attach left it: no bridge, no tap, eth0 with its address and
 * route.  What is not there already is no error. */
static int vm_unlink(struct crl_vnet *v, unsigned slot, struct inside *in, struct crl_err *err)
{
    int eth0;
    if (del_link(in->sk, VM_BRIDGE, err) < 0 || del_link(in->sk, VM_TAP, err) < 0 ||
        link_up(in->sock, "eth0", &eth0, err) < 0)
        return -1;
    if (address(in->sk, eth0, crl_vnet_address(v, slot), 30, "eth0", ADDR_ADD_IF_MISSING, err) < 0)
        return -1;
    return default_route(in->sk, eth0, crl_vnet_gateway(v, slot), true, err);
}

int crl_vnet_tap_open(const char *name)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    size_t n = strlen(name);
    if (n >= sizeof(ifr.ifr_name)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(ifr.ifr_name, name, n + 1);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd >= 0 && ioctl(fd, TUNSETIFF, &ifr) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int crl_vnet_vm_link(struct crl_vnet *v, unsigned slot, int netns_fd, struct crl_err *err)
{
    struct inside in;
    int tap = -1, r = -1;
    if (setns(netns_fd, CLONE_NEWNET) < 0)
        return crl_err_sys(err, errno, "setns(the sandbox's netns)");
    /* A tap is of the namespace /dev/net/tun was opened in; the new links
     * take IPv6 off from the namespace's default. */
    if ((tap = crl_vnet_tap_open(VM_TAP)) < 0)
        crl_err_sys(err, errno, "a tap in the sandbox's netns (/dev/net/tun)");
    else if (write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1", err) == 0)
        r = 0;
    crl_netns_return(v->host_netns);
    if (r < 0 || enter(v, netns_fd, &in, err) < 0) {
        close_fd(&tap);
        return -1;
    }
    int eth0, br, tapi;
    r = -1;
    int nr = rtnl_link_bridge_add(in.sk, VM_BRIDGE);
    if (nr < 0)
        nl_failed(err, nr, "create the bridge", VM_BRIDGE);
    else if (link_up(in.sock, VM_BRIDGE, &br, err) == 0 &&
             link_up(in.sock, VM_TAP, &tapi, err) == 0 &&
             link_up(in.sock, "eth0", &eth0, err) == 0) {
        if ((nr = rtnl_link_enslave_ifindex(in.sk, br, eth0)) < 0 ||
            (nr = rtnl_link_enslave_ifindex(in.sk, br, tapi)) < 0)
            nl_failed(err, nr, "bridge eth0 and the tap on", VM_BRIDGE);
        else
            r = address(in.sk, eth0, crl_vnet_address(v, slot), 30, "eth0", ADDR_DELETE, err);
    }
    if (r < 0) {
        struct crl_err e2 = CRL_ERR_INIT;
        close_fd(&tap); /* the tap goes with it */
        if (vm_unlink(v, slot, &in, &e2) < 0)
            crl_warn(NULL, "network: undoing a VM's link of slot %u: %s", slot, e2.msg);
    }
    inside_close(&in);
    return r < 0 ? -1 : tap;
}

int crl_vnet_vm_unlink(struct crl_vnet *v, unsigned slot, int netns_fd, struct crl_err *err)
{
    struct inside in;
    if (enter(v, netns_fd, &in, err) < 0)
        return -1;
    int r = vm_unlink(v, slot, &in, err);
    inside_close(&in);
    return r;
}

int crl_vnet_set_rules(struct crl_vnet *v, unsigned slot, const char *rules, struct crl_err *err)
{
    return set_chain(v, &v->io, slot, rules, false, err);
}

void crl_vnet_detach(struct crl_vnet *v, unsigned slot)
{
    pthread_mutex_lock(&v->setup_lock);
    detach(v, &v->setup, slot);
    pthread_mutex_unlock(&v->setup_lock);
}

static void detach(struct crl_vnet *v, struct vnet_io *io, unsigned slot)
{
    char name[IFNAMSIZ], script[1536];
    crl_vnet_link_name(v, slot, name, sizeof(name));
    struct rtnl_link *l = rtnl_link_alloc();
    if (l) {
        rtnl_link_set_name(l, name);
        int r = rtnl_link_delete(io->sk, l);
        if (r < 0 && r != -NLE_NODEV && r != -NLE_OBJ_NOTFOUND)
            crl_warn(NULL, "network: delete %s: %s", name, nl_geterror(r));
        rtnl_link_put(l);
    }
    /* The element first: the chain is in use while the map jumps to it. */
    snprintf(script, sizeof(script),
             "add chain inet %1$s s%2$u\n"
             "delete element inet %1$s links { \"%3$s\" }\n",
             v->table, slot, name);
    struct crl_err e = CRL_ERR_INIT;
    run_nft(v, io, script, NULL); /* absent already: a failed attach's */
    /* Added first, so that a failed attach's missing pieces are no error. */
    char sets[768];
    snprintf(sets, sizeof(sets),
             SLOT_SETS "add chain inet %1$s s%2$u\nadd chain inet %1$s s%2$uc\n", v->table, slot);
    snprintf(script, sizeof(script),
             "%3$s"
             "delete chain inet %1$s s%2$u\n"
             "delete chain inet %1$s s%2$uc\n"
             "delete set inet %1$s s%2$ua\n"
             "delete set inet %1$s s%2$uh\n"
             "delete set inet %1$s s%2$ud\n"
             "delete limit inet %1$s s%2$ul\n",
             v->table, slot, sets);
    if (run_nft(v, io, script, &e) < 0)
        crl_warn(NULL, "network: %s", e.msg);
}

void crl_vnet_park(struct crl_vnet *v, unsigned slot, int netns_fd)
{
    struct crl_err e = CRL_ERR_INIT;
    if (slot >= crl_vnet_slots(v) || set_chain(v, &v->io, slot, "drop", false, &e) < 0) {
        crl_warn(NULL, "network: slot %u: %s: its link goes", slot, e.msg);
        detach(v, &v->io, slot);
        close(netns_fd);
        return;
    }
    close_fd(&v->parked[slot]);
    v->parked[slot] = netns_fd;
}

bool crl_vnet_parked(const struct crl_vnet *v, unsigned slot)
{
    return slot < crl_vnet_slots(v) && v->parked[slot] >= 0;
}

int crl_vnet_unpark(struct crl_vnet *v, unsigned slot, const char *rules, struct crl_err *err)
{
    if (slot >= crl_vnet_slots(v) || v->parked[slot] < 0) {
        errno = ENOENT;
        return -1;
    }
    pthread_mutex_lock(&v->setup_lock);
    int r = set_chain(v, &v->setup, slot, rules, false, err);
    pthread_mutex_unlock(&v->setup_lock);
    if (r < 0)
        return -1;
    int fd = v->parked[slot];
    v->parked[slot] = -1;
    return fd;
}

int crl_vnet_set_peers(struct crl_vnet *v, const char *addrs, struct crl_err *err)
{
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    int r = crl_buf_printf(&b, "flush set inet %s peers\n", v->table);
    if (r == 0 && addrs[0])
        r = crl_buf_printf(&b, "add element inet %s peers { %s }\n", v->table, addrs);
    r = r == 0 ? crl_vnet_nft(v, b.data, err) : crl_err_sys(err, ENOMEM, "nftables script");
    crl_buf_free(&b);
    return r;
}

int crl_vnet_add_elements(struct crl_vnet *v, unsigned slot, char kind, const char *elements,
                          unsigned timeout_s, struct crl_err *err)
{
    /* nft's "add" keeps an element's old timeout: add (so that it is
     * there), delete, add again with the new one, in one transaction.  Each
     * element gets the timeout: rewrite "a, b" as "a timeout Ns, b timeout Ns". */
    struct crl_buf with;
    crl_buf_init(&with, CRL_BUF_UNBOUNDED);
    int r = 0;
    for (const char *e = elements; r == 0 && *e;) {
        size_t n = strcspn(e, ",");
        r = crl_buf_printf(&with, "%s%.*s timeout %us", with.len ? ", " : "", (int)n, e, timeout_s);
        e += n;
        e += strspn(e, ", ");
    }
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    if (r == 0)
        r = crl_buf_printf(&b,
                           "add element inet %1$s s%2$u%3$c { %4$s }\n"
                           "delete element inet %1$s s%2$u%3$c { %5$s }\n"
                           "add element inet %1$s s%2$u%3$c { %4$s }\n",
                           v->table, slot, kind, with.data, elements);
    r = r == 0 ? crl_vnet_nft(v, b.data, err) : crl_err_sys(err, ENOMEM, "nftables script");
    crl_buf_free(&b);
    crl_buf_free(&with);
    return r;
}

json_t *crl_vnet_rule_counters(struct crl_vnet *v, unsigned slot)
{
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "list chain inet %s s%u", v->table, slot);
    unsigned flags = nft_ctx_output_get_flags(v->io.nft);
    nft_ctx_output_set_flags(v->io.nft, flags | NFT_CTX_OUTPUT_JSON);
    int r = nft_run_cmd_from_buffer(v->io.nft, cmd);
    nft_ctx_output_set_flags(v->io.nft, flags);
    const char *out = nft_ctx_get_output_buffer(v->io.nft);
    json_t *doc = r == 0 && out ? json_loads(out, 0, NULL) : NULL;
    json_t *items = json_object_get(doc, "nftables"), *rules = doc ? json_array() : NULL;
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        json_t *rule = json_object_get(it, "rule"), *expr = json_object_get(rule, "expr"), *e;
        const char *comment = json_string_value(json_object_get(rule, "comment"));
        json_t *counter = NULL;
        const char *verdict = NULL;
        size_t k;
        json_array_foreach(expr, k, e)
        {
            if (json_object_get(e, "counter"))
                counter = json_object_get(e, "counter");
            if (json_object_get(e, "accept"))
                verdict = "accept";
            /* the only goto is the connection limit's, to a chain that drops */
            if (json_object_get(e, "drop") || json_object_get(e, "goto"))
                verdict = "drop";
        }
        if (!comment || !counter || !verdict)
            continue;
        json_array_append_new(rules,
                              json_pack("{s:s, s:s, s:O, s:O}", "rule", comment, "verdict", verdict,
                                        "packets", json_object_get(counter, "packets"), "bytes",
                                        json_object_get(counter, "bytes")));
    }
    json_decref(doc);
    return rules;
}
