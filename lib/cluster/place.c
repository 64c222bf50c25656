/* Power-of-k placement over a cached view (place.h). */
#include "place.h"

static uint64_t next(uint64_t *s)
{
    uint64_t x = *s; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static bool fits(const struct crl_peer *p, const struct crl_demand *d, const bool *exclude,
                 size_t i)
{
    return p->state == CRL_PEER_READY && !(exclude && exclude[i]) && p->free_slots > p->placed_n &&
           p->free_mb >= p->placed_mb + d->mb && p->free_cpus - p->placed_cpus >= d->cpus;
}

/* Room left, as a fraction of what a host could hold more: the scarcest
 * of memory and slots, so a host full in either is not chosen for the
 * other; a warm pool for the demand counts as ample room. */
static double room(const struct crl_peer *p, const struct crl_demand *d)
{
    double mem = (double)(p->free_mb - p->placed_mb) / (double)(p->free_mb + 1);
    double slots = (double)(p->free_slots - p->placed_n) / (double)(p->free_slots + 1);
    double r = mem < slots ? mem : slots;
    return r + ((d->pool & p->pools) ? 1.0 : 0.0);
}

long crl_place(struct crl_peer *peers, size_t n, const struct crl_demand *d, unsigned k,
               const bool *exclude, uint64_t *rng)
{
    if (!n)
        return -1;
    long best = -1;
    double best_room = -1;
    unsigned seen = 0;
    /* k eligible hosts drawn at random: a few misses each before a scan */
    for (unsigned draws = 0; seen < k && draws < 4 * k + 8; draws++) {
        size_t i = (size_t)(next(rng) % n);
        if (!fits(&peers[i], d, exclude, i))
            continue;
        seen++;
        double r = room(&peers[i], d);
        if (r > best_room) {
            best_room = r;
            best = (long)i;
        }
    }
    /* Few hosts can take it: look at all of them, from a random start. */
    if (best < 0) {
        size_t start = (size_t)(next(rng) % n);
        for (size_t j = 0; j < n; j++) {
            size_t i = (start + j) % n;
            if (!fits(&peers[i], d, exclude, i))
                continue;
            double r = room(&peers[i], d);
            if (r > best_room) {
                best_room = r;
                best = (long)i;
            }
        }
    }
    if (best >= 0) {
        peers[best].placed_mb += d->mb;
        peers[best].placed_cpus += d->cpus;
        peers[best].placed_n++;
    }
    return best;
}

void crl_peer_refreshed(struct crl_peer *p)
{
    p->placed_mb = 0;
    p->placed_cpus = 0;
    p->placed_n = 0;
}
