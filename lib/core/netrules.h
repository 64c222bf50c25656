/* A network policy (netpolicy.h) as the nftables rules of a sandbox's chain
 * (lib/os/vnet.h): what it may reach by address.  The chain sees only what
 * the daemon's table let through (IPv4 toward neither the host, another
 * sandbox, link-local nor multicast; no IPv6), and ends in a drop.  Names
 * are the resolver's to admit: they render as lookups in the slot's sets. */
#ifndef CRL_CORE_NETRULES_H
#define CRL_CORE_NETRULES_H

#include <stdint.h>

#include "../util/buf.h"
#include "netpolicy.h"

/* The comment (and log prefix) of the drop of a deny rule by name's ports. */
#define CRL_NET_LOG_DENY_NAMES "deny: the ports of names"

/* Append the chain's rules for `slot`, one a line, to out; -1 if out of
 * memory.  Rules by name refer to the slot's sets, which the resolver
 * fills with what their names resolved to.  With a log_group, each drop
 * is logged first (crl_vnet_log_rule), its prefix "s<slot> " and then
 * "deny[<i>]", CRL_NET_LOG_DENY_NAMES, "not allowed" or "mode none". */
int crl_net_policy_nft(const struct crl_net_policy *p, unsigned slot, uint16_t log_group,
                       struct crl_buf *out);

#endif
