/* A sandbox's clocks: the offsets of a time namespace that make its
 * CLOCK_MONOTONIC and CLOCK_BOOTTIME (and /proc/uptime) start near 0 when
 * it did, fixed at its creation, and the text /proc/PID/timens_offsets
 * takes for them.  Both backends' sandboxes use them. */
#ifndef CRL_UTIL_TIMENS_H
#define CRL_UTIL_TIMENS_H

#include <stddef.h>
#include <stdint.h>

struct crl_timens {
    int64_t monotonic_ns; /* minus the host's clocks at creation */
    int64_t boottime_ns;
};

/* Offsets under which both clocks read 0 now. */
void crl_timens_from_now(struct crl_timens *t);
/* "monotonic S NS\nboottime S NS\n", NS in [0, 1e9) as the kernel wants. */
void crl_timens_format(const struct crl_timens *t, char *out, size_t cap);

#endif
