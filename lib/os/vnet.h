/* A sandbox's link to the outside world, and the netfilter rules that
 * decide what crosses it.
 *
 * Each attached sandbox gets a veth pair: its host end ("cr<tag>s<slot>") in
 * corrald's network namespace, its other end "eth0" in the sandbox's, and a
 * /30 of the daemon's range (host end .1, sandbox .2, the default route via
 * the host end).  IPv6 is off on eth0.  One nftables table per daemon
 * ("inet corral_<tag>") holds:
 *   - forward: a sandbox's packets jump to its own chain (a verdict map by
 *     input link); a link without a chain, and anything toward a sandbox
 *     that it did not start, is dropped;
 *   - input: from a sandbox link only replies reach this host (and, when
 *     set, the resolver's port on the host end);
 *   - prerouting: a sandbox's DNS (any server) to the resolver's port, and
 *     its TCP to the services' /24 to the services' port (corrald answers
 *     there, lib/api/services.c); nothing else reaches that /24;
 *   - postrouting: masquerade of the range toward anywhere else.
 * A sandbox's chain starts with a limit on the connections it has open at
 * once (max_conns), then holds what its policy allows (rendered by the
 * caller, each rule with a comment that names it);
 * it is replaced in one transaction, so a change is in force for the next
 * packet.
 *
 * The tag names this daemon's links and table (two daemons on one host
 * keep apart); everything of a tag is removed by crl_vnet_new (a previous
 * run's, after a crash) and by crl_vnet_free.
 *
 * Threads: the set-up of a slot (crl_vnet_attach, crl_vnet_unpark,
 * crl_vnet_detach) has a netlink socket and an nftables context of its own,
 * used under a lock, and touches only its slot, so it may run on a thread
 * other than the loop's (corrald runs it on the network's worker,
 * lib/core/backend.c) while the loop makes every other call, for other
 * slots.  Attach enters the sandbox's namespace for a moment, on the
 * calling thread only. */
#ifndef CRL_OS_VNET_H
#define CRL_OS_VNET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/buf.h"
#include "../util/err.h"

struct crl_vnet;

struct crl_vnet_config {
    uint32_t tag;      /* 24 bits: names links and the table */
    uint32_t range;    /* IPv4, host order: the first address of the range */
    unsigned prefix;   /* the range's prefix length, 8-28 */
    uint16_t dns_port; /* 0: none; else sandboxes may reach this UDP+TCP port of their gateway */
    uint16_t service_port; /* 0: none; else TCP to service_net goes to this port of the host */
    uint32_t service_net;  /* a /24, host order: services' addresses (lib/core/services.h) */
    unsigned max_conns;    /* connections a sandbox may have open at once (0: 1024) */
    uint16_t log_group;    /* NFLOG group of the chains' drops (lib/os/nflog.h); 0: none */
};

/* Parse "A.B.C.D/N" into cfg's range and prefix (the range's host bits
 * must be zero; N 8-28). */
int crl_vnet_parse_range(const char *s, struct crl_vnet_config *cfg, struct crl_err *err);

/* Remove what a crashed run of this tag left: its table and links (the
 * kernel removes a link with its namespace, but not a table).  Quiet when
 * there is nothing, and makes nothing. */
void crl_vnet_reconcile(uint32_t tag);

int crl_vnet_new(const struct crl_vnet_config *cfg, struct crl_vnet **out, struct crl_err *err);
/* Remove the table of this tag and drop the parked namespaces (the kernel
 * removes their links with them, later), and free. */
void crl_vnet_free(struct crl_vnet *v);
/* How many sandboxes the range has room for. */
unsigned crl_vnet_slots(const struct crl_vnet *v);

/* The addresses of `slot` (host order). */
uint32_t crl_vnet_gateway(const struct crl_vnet *v, unsigned slot);
uint32_t crl_vnet_address(const struct crl_vnet *v, unsigned slot);
/* The host end's name, into buf (IFNAMSIZ). */
void crl_vnet_link_name(const struct crl_vnet *v, unsigned slot, char *buf, size_t cap);

/* Link `slot` to the network namespace netns_fd (which must have no eth0)
 * with `rules` as its chain's body (nft syntax, one rule a line; they end
 * with the chain's own drop).  Undone in full on failure. */
int crl_vnet_attach(struct crl_vnet *v, unsigned slot, int netns_fd, const char *rules,
                    struct crl_err *err);
/* A tap named `name` in the calling thread's network namespace, with the
 * flags every VM's tap has (no packet info, no vnet header: a template's
 * and its clones' must match).  System calls only, so a forked child of a
 * threaded process may make one.  Its descriptor, or -1 with errno. */
int crl_vnet_tap_open(const char *name);

/* A VM's link (the microvm backend's): in `slot`'s namespace, which
 * attach linked, eth0 and a new tap "tap0" are bridged ("br0") and eth0
 * gives its address up, so that the guest behind the tap takes the
 * sandbox's address and route: its frames leave by eth0, under the slot's
 * rules, as a container's packets would.  Returns the tap's descriptor
 * (for QEMU's -netdev tap,fd=), or -1 with nothing changed.  Enters the
 * namespace for a moment, on the calling thread only. */
int crl_vnet_vm_link(struct crl_vnet *v, unsigned slot, int netns_fd, struct crl_err *err);
/* Undo it once nothing holds the tap (it goes with its last descriptor):
 * eth0 as attach left it, so the namespace may be parked for any sandbox. */
int crl_vnet_vm_unlink(struct crl_vnet *v, unsigned slot, int netns_fd, struct crl_err *err);

/* Replace `slot`'s rules, atomically. */
int crl_vnet_set_rules(struct crl_vnet *v, unsigned slot, const char *rules, struct crl_err *err);
/* Remove `slot`'s link (its peer in the sandbox goes with it) and chain.
 * Slow (the kernel waits for its readers, ~20 ms here): for failures. */
void crl_vnet_detach(struct crl_vnet *v, unsigned slot);

/* A sandbox of `slot` ended and nothing runs in netns_fd: keep the
 * namespace and its link for the slot's next sandbox (its rules become
 * "drop"), taking the descriptor.  A sandbox without CAP_NET_ADMIN over its
 * namespace could change nothing there, and its sockets went with its
 * processes, so the pair needs no reset but its rules. */
void crl_vnet_park(struct crl_vnet *v, unsigned slot, int netns_fd);
bool crl_vnet_parked(const struct crl_vnet *v, unsigned slot);
/* The namespace parked for `slot`, its link given `rules`: the caller's
 * descriptor.  -1 if none is parked (errno ENOENT) or the rules failed. */
int crl_vnet_unpark(struct crl_vnet *v, unsigned slot, const char *rules, struct crl_err *err);

/* A slot's sets, which its rules refer to (lib/core/netrules.c) and the
 * resolver fills: "s<slot><kind>". */
#define CRL_VNET_SET_ALLOW 'a' /* ipv4_addr . inet_service ranges a name's rule allows */
#define CRL_VNET_SET_HOSTS 'h' /* ipv4_addr: those addresses, for ICMP echo */
#define CRL_VNET_SET_DENY 'd'  /* ipv4_addr . inet_service ranges a name's rule denies */
#define CRL_VNET_LOG_LIMIT 'l' /* a limit object: the rate of the slot's drops logged */
#define CRL_VNET_LOG_RATE "50/second burst 100 packets"

/* Each drop of a slot's chain is told to corrald: the rule before it, of
 * the same match, logs a new connection's packet to the NFLOG group,
 * within the slot's rate (a `limit` that does not match would let a rule
 * with both fall through past its drop, so they are two rules).  Append
 * " ct state new limit name ... log group G prefix \"s<slot> <what>\"\n" to
 * out, where the caller wrote the match (or nothing, for every packet);
 * `what` (at most 100 bytes, no quote) names the rule for corrald.
 * Nothing if group is 0.  -1 if out of memory. */
int crl_vnet_log_rule(uint16_t group, unsigned slot, const char *what, struct crl_buf *out);
/* The config's log_group. */
uint16_t crl_vnet_log_group(const struct crl_vnet *v);

/* Add `elements` (nft's syntax: "198.51.100.10 . 443-443, ...", or bare
 * addresses for the hosts set) to a set of `slot` for timeout_s seconds,
 * refreshing the timeout of those already there; one transaction. */
/* The addresses no sandbox may reach, whatever its rules: the other hosts
 * of this host's cluster ("10.0.0.2, 10.0.0.3", IPv4; "" for none),
 * replacing what was set before. */
int crl_vnet_set_peers(struct crl_vnet *v, const char *addrs, struct crl_err *err);
int crl_vnet_add_elements(struct crl_vnet *v, unsigned slot, char kind, const char *elements,
                          unsigned timeout_s, struct crl_err *err);

/* The counters of `slot`'s rules, in order: [{"rule": its comment,
 * "verdict": "accept"|"drop", "packets": N, "bytes": N}], or NULL. */
struct json_t *crl_vnet_rule_counters(struct crl_vnet *v, unsigned slot);

/* Run an nft script (one transaction), e.g. to fill a set of the table. */
int crl_vnet_nft(struct crl_vnet *v, const char *script, struct crl_err *err);
/* The table's name ("corral_<tag>"). */
const char *crl_vnet_table(const struct crl_vnet *v);

#endif
