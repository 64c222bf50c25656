#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"

struct crl_netns_pool {
    int host_fd;
    int *idle;
    unsigned n_idle;
    unsigned max_idle;
};

int crl_netns_pool_new(unsigned max_idle, struct crl_netns_pool **out, struct crl_err *err)
{
    struct crl_netns_pool *p = calloc(1, sizeof(*p));
    if (!p || !(p->idle = calloc(max_idle ? max_idle : 1, sizeof(int)))) {
        free(p);
        return crl_err_sys(err, ENOMEM, "netns pool");
    }
    p->max_idle = max_idle;
    p->host_fd = crl_openat(AT_FDCWD, "/proc/thread-self/ns/net", O_RDONLY, 0);
    if (p->host_fd < 0) {
        int e = errno;
        free(p->idle);
        free(p);
        return crl_err_sys(err, e, "open /proc/thread-self/ns/net");
    }
    *out = p;
    return 0;
}

void crl_netns_pool_free(struct crl_netns_pool *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < p->n_idle; i++)
        close(p->idle[i]);
    close(p->host_fd);
    free(p->idle);
    free(p);
}

void crl_netns_return(int host_fd)
{
    if (setns(host_fd, CLONE_NEWNET) < 0) {
        /* Every later socket of corrald's would live in the sandbox's namespace. */
        crl_log_syscall(NULL, errno, "setns(host netns)");
        abort();
    }
}

static int loopback_up(struct crl_err *err)
{
    cleanup_close int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return crl_err_sys(err, errno, "socket in the new netns");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        return crl_err_sys(err, errno, "SIOCGIFFLAGS lo");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        return crl_err_sys(err, errno, "SIOCSIFFLAGS lo up");
    return 0;
}

static int make_netns(struct crl_netns_pool *p, struct crl_err *err)
{
    if (unshare(CLONE_NEWNET) < 0)
        return crl_err_sys(err, errno, "unshare(CLONE_NEWNET)");
    int fd = -1;
    if (loopback_up(err) == 0) {
        fd = crl_openat(AT_FDCWD, "/proc/thread-self/ns/net", O_RDONLY, 0);
        if (fd < 0)
            crl_err_sys(err, errno, "open the new netns");
    }
    crl_netns_return(p->host_fd);
    return fd;
}

int crl_netns_get(struct crl_netns_pool *p, struct crl_err *err)
{
    if (p->n_idle)
        return p->idle[--p->n_idle];
    return make_netns(p, err);
}

void crl_netns_put(struct crl_netns_pool *p, int fd)
{
    if (fd < 0)
        return;
    if (p->n_idle < p->max_idle)
        p->idle[p->n_idle++] = fd;
    else
        close(fd);
}

int crl_netns_fill(struct crl_netns_pool *p, unsigned target, struct crl_err *err)
{
    if (target > p->max_idle)
        target = p->max_idle;
    while (p->n_idle < target) {
        int fd = make_netns(p, err);
        if (fd < 0)
            return -1;
        p->idle[p->n_idle++] = fd;
    }
    return 0;
}

unsigned crl_netns_idle(const struct crl_netns_pool *p)
{
    return p->n_idle;
}

int crl_netns_socket(struct crl_netns_pool *p, int netns_fd, int type)
{
    if (setns(netns_fd, CLONE_NEWNET) < 0)
        return -1;
    int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
    int e = errno;
    crl_netns_return(p->host_fd);
    errno = e;
    return fd;
}
