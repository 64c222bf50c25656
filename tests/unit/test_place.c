/* Power-of-k placement (lib/cluster/place.h): only ready hosts with room,
 * never an excluded one, load spread by room, this host's own placements
 * counted until the next refresh, a warm pool preferred; and its speed
 * over a view of 1,000 hosts (printed, not asserted). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../lib/cluster/place.h"
#include "tap.h"

static void test_place(void)
{
    struct crl_peer p[4];
    memset(p, 0, sizeof(p));
    for (int i = 0; i < 4; i++) {
        snprintf(p[i].id, sizeof(p[i].id), "h%d", i);
        p[i].free_mb = 4096;
        p[i].free_cpus = 8;
        p[i].free_slots = 100;
    }
    p[1].state = CRL_PEER_DRAINING;
    p[2].state = CRL_PEER_LOST;
    p[3].free_slots = 0; /* full */
    uint64_t rng = 42;
    struct crl_demand d = {.mb = 512, .cpus = 1};
    int on[4] = {0};
    for (int i = 0; i < 8; i++) {
        long h = crl_place(p, 4, &d, 2, NULL, &rng);
        if (h >= 0)
            on[h]++;
    }
    ok(on[0] == 8 && !on[1] && !on[2] && !on[3], "only the ready host with room (%d %d %d %d)",
       on[0], on[1], on[2], on[3]);
    ok(crl_place(p, 4, &d, 2, NULL, &rng) == -1, "its room is used up by what was placed");
    crl_peer_refreshed(&p[0]);
    bool ex[4] = {true, false, false, false};
    ok(crl_place(p, 4, &d, 2, ex, &rng) == -1, "an excluded host is never chosen");
    ok(crl_place(p, 4, &d, 2, NULL, &rng) == 0, "a refresh gives its room back");

    /* spread: 3 equal hosts, 300 placements */
    struct crl_peer q[3];
    memset(q, 0, sizeof(q));
    for (int i = 0; i < 3; i++) {
        q[i].free_mb = 1 << 20;
        q[i].free_cpus = 1000;
        q[i].free_slots = 1000;
    }
    q[2].free_slots = 100; /* a small one: less of the load */
    int cnt[3] = {0};
    for (int i = 0; i < 300; i++)
        cnt[crl_place(q, 3, &(struct crl_demand){.mb = 64, .cpus = 0.1}, 2, NULL, &rng)]++;
    ok(cnt[0] > 90 && cnt[1] > 90 && cnt[2] < cnt[0] && cnt[2] < cnt[1] && cnt[2] <= 100,
       "spread by room: %d %d %d", cnt[0], cnt[1], cnt[2]);
    /* a warm pool wins */
    struct crl_peer w[2];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 2; i++) {
        w[i].free_mb = 8192;
        w[i].free_cpus = 8;
        w[i].free_slots = 100;
    }
    w[1].pools = 4;
    w[0].free_mb = 1 << 20; /* more room, but no pool */
    int pooled = 0;
    for (int i = 0; i < 20; i++)
        pooled += crl_place(w, 2, &(struct crl_demand){.mb = 64, .cpus = 0.1, .pool = 4}, 2, NULL,
                            &rng) == 1;
    ok(pooled >= 15, "a host with a warm pool for it is preferred (%d of 20)", pooled);

    /* speed: 1,000 hosts, decisions per second on this core */
    static struct crl_peer big[1000];
    for (int i = 0; i < 1000; i++) {
        big[i].free_mb = 1ull << 40;
        big[i].free_cpus = 1e9;
        big[i].free_slots = 1u << 30;
        big[i].state = i % 10 == 0 ? CRL_PEER_DRAINING : CRL_PEER_READY;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long sum = 0;
    const int N = 2000000;
    for (int i = 0; i < N; i++)
        sum += crl_place(big, 1000, &(struct crl_demand){.mb = 256, .cpus = 0.5}, 2, NULL, &rng);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    diag("placement, k=2 over 1,000 hosts: %.0f decisions/s on one core (%.0f ns each)", N / s,
         s / N * 1e9);
    ok(sum > 0, "every decision found a host");
}

int main(void)
{
    TAP_RUN(test_place, 60);
    return done_testing();
}
