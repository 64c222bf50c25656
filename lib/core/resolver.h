/* corrald's resolver for sandboxes with a network: the only one they have
 * (lib/os/vnet.c redirects every DNS packet of theirs to it).  A name their
 * policy refuses is answered REFUSED; an allowed one is asked upstream
 * (--dns-upstream, or the host's resolvers), and each address of the
 * answer is put in the sandbox's nftables sets for the answer's TTL (at
 * least a minute) before the answer goes back, so the connection that
 * follows is let through.  Addresses a sandbox may never reach by a name
 * (private, loopback, link-local, this daemon's range: DNS rebinding) are
 * dropped from answers unless an address rule allows them.  The names of
 * a sandbox's services are answered with their addresses (services.h).
 * Each sandbox is rate-limited (its services' names excepted: they are
 * answered at once), and everything is counted per sandbox.
 *
 * Runs on corrald's event loop: a query costs a parse, a send, and at the
 * answer a parse and an nftables transaction. */
#ifndef CRL_CORE_RESOLVER_H
#define CRL_CORE_RESOLVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../os/vnet.h"
#include "../util/err.h"
#include "../util/loop.h"
#include "netpolicy.h"
#include "sandbox.h"

#define CRL_RESOLVER_QPS 100   /* a sandbox's queries per second, sustained */
#define CRL_RESOLVER_BURST 200 /* and in a burst */

struct crl_resolver;

struct crl_dns_counters {
    uint64_t queries, answered, refused, limited, malformed, failed;
};

/* Listen on UDP `port` of every address of this namespace (queries from
 * outside the vnet's range are ignored) and ask `upstreams` (space-separated
 * IPv4 addresses, port 53). */
int crl_resolver_new(struct crl_loop *loop, struct crl_vnet *v, uint16_t port,
                     const char *upstreams, struct crl_resolver **out, struct crl_err *err);
void crl_resolver_free(struct crl_resolver *r);

/* `sb` now holds `slot` (its counters start at 0); and no longer. */
void crl_resolver_attach(struct crl_resolver *r, unsigned slot, struct crl_sandbox *sb);
void crl_resolver_detach(struct crl_resolver *r, unsigned slot);

/* The sandbox that holds this address of the range (host order) now, or
 * NULL: who a packet or connection from the sandboxes' network is from. */
struct crl_sandbox *crl_resolver_sandbox_at(const struct crl_resolver *r, uint32_t addr);

/* The sandbox that holds `slot`, or NULL. */
struct crl_sandbox *crl_resolver_sandbox(const struct crl_resolver *r, unsigned slot);

/* The name an answer to `slot`'s sandbox gave `addr` (IPv4, network order)
 * as an address of, among the last CRL_RESOLVER_NAMES addresses answered
 * (the newest if several), or NULL.  Valid until the next answer. */
#define CRL_RESOLVER_NAMES 64
const char *crl_resolver_name_of(const struct crl_resolver *r, unsigned slot,
                                 const uint8_t addr[4]);

/* Called for every name refused to a sandbox, with the rule that refused
 * it (NULL: its mode) and whether the refusal was logged or over the log's
 * rate. */
typedef void (*crl_resolver_refusal_cb)(void *ctx, struct crl_sandbox *sb, const char *name,
                                        const struct crl_net_rule *rule, bool logged);
void crl_resolver_on_refusal(struct crl_resolver *r, crl_resolver_refusal_cb cb, void *ctx);

json_t *crl_resolver_slot_json(const struct crl_resolver *r, unsigned slot);
/* Every sandbox's, since the resolver started. */
const struct crl_dns_counters *crl_resolver_totals(const struct crl_resolver *r);

#endif
