/* A network policy (netpolicy.h) as the nftables rules of a sandbox's chain
 * (lib/os/vnet.h): what it may reach by address.  The chain sees only what
 * the daemon's table let through (IPv4 toward neither the host, another
 * sandbox, link-local nor multicast; no IPv6), and ends in a drop.  Names
 * are the resolver's to admit: their rules render to nothing here. */
#ifndef CRL_CORE_NETRULES_H
#define CRL_CORE_NETRULES_H

#include "../util/buf.h"
#include "netpolicy.h"

/* Append the chain's rules, one a line, to out; -1 if out of memory. */
int crl_net_policy_nft(const struct crl_net_policy *p, struct crl_buf *out);
/* Does the policy have rules by name (which need corrald's resolver)? */
bool crl_net_policy_has_names(const struct crl_net_policy *p);

#endif
