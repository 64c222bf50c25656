/* The denial log: what a sandbox tried to reach and was refused, with the
 * rule that refused it.  Two sources feed it, on corrald's event loop:
 *   - the kernel, through an NFLOG group (lib/os/nflog.h) that every drop
 *     of a slot's chain logs to first (lib/os/vnet.h crl_vnet_log_rule),
 *     within 50 packets a second (burst 100) per slot; the log prefix names
 *     the slot and the rule ("s12 deny[0]"), the rule's text is taken from
 *     the sandbox's policy, and the destination's name, if the sandbox's
 *     resolver answered with that address, from the resolver;
 *   - the resolver, for each name it refuses (protocol "dns").
 * Each sandbox keeps its last CRL_NETLOG_KEEP denials and counts them all;
 * corrald's log gets a line for at most CRL_NETLOG_LOGS_PER_S of them a
 * second per sandbox (the resolver writes its own), the rest are counted
 * as unlogged.  What a slot holds belongs to the sandbox it was recorded
 * for: a new sandbox in the slot starts from nothing. */
#ifndef CRL_CORE_NETLOG_H
#define CRL_CORE_NETLOG_H

#include <jansson.h>
#include <stdint.h>

#include "../os/vnet.h"
#include "../util/err.h"
#include "../util/loop.h"
#include "resolver.h"
#include "sandbox.h"

#define CRL_NETLOG_KEEP 32
#define CRL_NETLOG_LOGS_PER_S 5

struct crl_netlog;

/* Listen to an NFLOG group, the first free from `first_group`, on `loop`.
 * Without one (a kernel without nfnetlink_log, say) it warns and goes on:
 * the chains then log nothing (crl_netlog_group is 0) and only the
 * resolver's refusals are recorded.  Fails only out of memory. */
int crl_netlog_new(struct crl_loop *loop, uint16_t first_group, struct crl_netlog **out,
                   struct crl_err *err);
void crl_netlog_free(struct crl_netlog *n);
/* The group the chains log to (crl_vnet_config.log_group), 0 if none. */
uint16_t crl_netlog_group(const struct crl_netlog *n);
/* The network and resolver it reports for: until this, reports are
 * dropped.  Registers for the resolver's refusals. */
int crl_netlog_bind(struct crl_netlog *n, struct crl_vnet *v, struct crl_resolver *r,
                    struct crl_err *err);

/* Map a log prefix's rule ("deny[0]", CRL_NET_LOG_DENY_NAMES, "not
 * allowed", ...) to the rule's text under policy p, into buf: "deny[0]
 * api.example:443".  name and port (0: none) pick among a name's deny
 * rules. */
void crl_netlog_rule_text(const struct crl_net_policy *p, const char *what, const char *name,
                          unsigned port, char *buf, size_t cap);

/* {"denied": [...], "denied_total": N, "denied_unlogged": N} of sb (all
 * empty if it has no slot's records). */
json_t *crl_netlog_json(const struct crl_netlog *n, const struct crl_sandbox *sb);

#endif
