#include "timens.h"

#include <stdio.h>
#include <time.h>

void crl_timens_from_now(struct crl_timens *t)
{
    struct timespec mono, boot;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_BOOTTIME, &boot);
    t->monotonic_ns = -((int64_t)mono.tv_sec * 1000000000 + mono.tv_nsec);
    t->boottime_ns = -((int64_t)boot.tv_sec * 1000000000 + boot.tv_nsec);
}

void crl_timens_format(const struct crl_timens *t, char *out, size_t cap)
{
    const int64_t ns[2] = {t->monotonic_ns, t->boottime_ns};
    long long sec[2], nsec[2];
    for (int i = 0; i < 2; i++) {
        sec[i] = ns[i] / 1000000000;
        nsec[i] = ns[i] % 1000000000;
        if (nsec[i] < 0) {
            nsec[i] += 1000000000;
            sec[i]--;
        }
    }
    snprintf(out, cap, "monotonic %lld %lld\nboottime %lld %lld\n", sec[0], nsec[0], sec[1],
             nsec[1]);
}
