/* Scope-bound cleanup, after crun and systemd: a local declared with one of
 * these attributes is released when it goes out of scope; steal_pointer()
 * and steal_fd() hand ownership on explicitly. */
#ifndef CRL_UTIL_CLEANUP_H
#define CRL_UTIL_CLEANUP_H

#include <stdlib.h>
#include <unistd.h>

static inline void crl__freep(void *p)
{
    free(*(void **)p);
}

static inline void crl__closep(int *fd)
{
    if (*fd >= 0)
        close(*fd);
}

#define cleanup_free __attribute__((cleanup(crl__freep)))
#define cleanup_close __attribute__((cleanup(crl__closep)))

static inline void *crl__steal(void *pp)
{
    void **p = pp;
    void *v = *p;
    *p = NULL;
    return v;
}
#define steal_pointer(pp) crl__steal(pp)

static inline int steal_fd(int *fd)
{
    int v = *fd;
    *fd = -1;
    return v;
}

/* Close a descriptor held in a field, if open, and mark it closed. */
static inline void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Descriptors that nobody takes (those a message brought, say). */
static inline void close_fds(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

#define CRL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
