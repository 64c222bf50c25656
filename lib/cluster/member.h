/* A host's membership of the cluster, kept in etcd (etcd.h) by two threads
 * of its own, so corrald's loop never waits for etcd:
 *
 *   the publisher  holds a lease (lease_ttl_s) and, under it, the key
 *                  /corral/hosts/<id>: this host's record (its address,
 *                  capacity, what is free, its pools), put again every
 *                  publish_ms with what the loop handed it last.  The
 *                  lease's id is kept in a file, so a restarted corrald
 *                  takes its own lease back instead of waiting it out.
 *   the watcher    reads /corral/ once and then watches it: the view,
 *                  every host's last record.  A host whose key went (its
 *                  lease expired) is lost, not forgotten; a host named
 *                  under /corral/drain/ is draining.
 *
 * Placement (place.h) runs on the view under its lock, corrected by what
 * this host placed since each host last published. */
#ifndef CRL_CLUSTER_MEMBER_H
#define CRL_CLUSTER_MEMBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"
#include "place.h"

#define CRL_MEMBER_ADDR_MAX 128

struct crl_member_config {
    const char *etcd;       /* "http://A:2379,http://B:2379" */
    const char *host_id;    /* this host's, as in its sandboxes' ids */
    const char *advertise;  /* where the others reach its API: "http://ADDR:PORT" */
    const char *lease_file; /* the lease's id, kept across restarts */
    unsigned lease_ttl_s;   /* 0: 10 */
    unsigned publish_ms;    /* 0: 1000 */
};

struct crl_member;

/* Start both threads (joining happens in the background: see
 * crl_member_status). */
int crl_member_start(const struct crl_member_config *cfg, struct crl_member **out,
                     struct crl_err *err);
/* Stop: the key and lease go (the others see the host leave as lost only
 * if stop cannot reach etcd). */
void crl_member_stop(struct crl_member *m);

/* The loop's latest record of this host (a JSON object, copied), put at
 * the next publish. */
void crl_member_publish(struct crl_member *m, const char *record);

/* Whether this host is a member now (it holds its lease and etcd answered
 * within the lease's time); if not, why, into why. */
bool crl_member_status(struct crl_member *m, char *why, size_t cap);

/* One host of the view. */
struct crl_member_host {
    char id[32];
    char addr[CRL_MEMBER_ADDR_MAX];
    enum crl_peer_state state;
    double heartbeat; /* the wall time of its last record (its own clock) */
    double seen;      /* when this host last heard of it (our clock) */
    char *record;     /* its last record, JSON (NULL if none was read) */
};

/* Which hosts the view has and where they answer, as a number that grows
 * whenever that changes: a caller that keeps something of theirs (the
 * fence of lib/api/cluster.c) does it again only then. */
uint64_t crl_member_addrs(struct crl_member *m);

/* A copy of the view (crl_member_hosts_free). */
size_t crl_member_hosts(struct crl_member *m, struct crl_member_host **out);
void crl_member_hosts_free(struct crl_member_host *hs, size_t n);

/* Where host `id` answers and its state: 0, or -1 (CRL_E_NOT_FOUND) when
 * the view has no such host. */
int crl_member_lookup(struct crl_member *m, const char *id, char *addr, size_t cap,
                      enum crl_peer_state *state, struct crl_err *err);

/* Place a create of mb MiB and cpus CPUs (place.h), from an image a warm
 * pool may serve (NULL: none): the chosen host's id into id_out, or -1
 * when no host that is ready and not in `exclude` (n_exclude ids) has
 * room. */
int crl_member_place(struct crl_member *m, uint64_t mb, double cpus, const char *image,
                     const char *const *exclude, size_t n_exclude, char *id_out, size_t cap);

/* Place a create that carries an Idempotency-Key: the ready host not in
 * `exclude` that ranks first for `key` (rendezvous hashing), whatever
 * room the view gives it, so that a retry of the create goes where the
 * first went and is answered from that host's keys; -1 when none is
 * left.  Its refusal moves the create on in the same key's order. */
int crl_member_place_keyed(struct crl_member *m, const char *key, const char *const *exclude,
                           size_t n_exclude, char *id_out, size_t cap);

/* Drain host `id` (or undo it): a blocking call to etcd, for a worker
 * thread. */
int crl_member_set_drain(struct crl_member *m, const char *id, bool drain, struct crl_err *err);

#endif
