/* Placement: which host of the cluster a create goes to, decided on the
 * host that received it from its cached view of the others (watched from
 * etcd, never read on the way): the power of k choices (k random hosts
 * able to take it, the one with the most room of them), corrected by what
 * this host placed since the view last heard from each.  The chosen
 * host's admission control has the last word; a refusal is retried with
 * that host excluded. */
#ifndef CRL_CLUSTER_PLACE_H
#define CRL_CLUSTER_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum crl_peer_state { CRL_PEER_READY, CRL_PEER_DRAINING, CRL_PEER_LOST };

/* One host as the view has it: what it published last, and what this host
 * sent it since (placed_*), which counts against its room until it
 * publishes again. */
struct crl_peer {
    char id[32];
    enum crl_peer_state state;
    uint64_t free_mb;    /* memory it can still admit */
    double free_cpus;    /* CPUs not yet promised */
    uint32_t free_slots; /* sandboxes it can still hold */
    uint32_t pools;      /* a bit per warm pool image it serves (see crl_place) */
    uint64_t placed_mb;
    double placed_cpus;
    uint32_t placed_n;
};

struct crl_demand {
    uint64_t mb;
    double cpus;
    uint32_t pool; /* the bit of the warm pool that can serve it, 0: none */
};

/* The host a create of `d` goes to: its index in peers, or -1 when no
 * host that is ready and not excluded (exclude[i], may be NULL) has room.
 * k: how many random hosts are compared (2 or 3 is plenty).  rng: the
 * caller's state for a xorshift generator (nonzero).  The chosen host's
 * placed_* grow by d. */
long crl_place(struct crl_peer *peers, size_t n, const struct crl_demand *d, unsigned k,
               const bool *exclude, uint64_t *rng);

/* A host published anew: what this host placed on it is in its figures. */
void crl_peer_refreshed(struct crl_peer *p);

#endif
