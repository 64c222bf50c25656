#include "fdio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"

ssize_t crl_read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, (char *)buf + got, len - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int crl_write_full(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r = write(fd, (const char *)buf + done, len - done);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

int crl_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    int fd;
    do
        fd = openat(dirfd, path, flags | O_CLOEXEC, mode);
    while (fd < 0 && errno == EINTR);
    return fd;
}

int crl_reopen(int fd, int flags)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return crl_openat(AT_FDCWD, path, flags, 0);
}

int crl_write_file_at(int dirfd, const char *path, const char *s)
{
    cleanup_close int fd = crl_openat(dirfd, path, O_WRONLY, 0);
    if (fd < 0)
        return -1;
    size_t len = strlen(s);
    ssize_t r;
    do
        r = write(fd, s, len);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1;
    if ((size_t)r != len) {
        errno = EIO;
        return -1;
    }
    return 0;
}

ssize_t crl_read_file_at(int dirfd, const char *path, char *buf, size_t cap)
{
    cleanup_close int fd = crl_openat(dirfd, path, O_RDONLY, 0);
    if (fd < 0)
        return -1;
    ssize_t n = crl_read_full(fd, buf, cap - 1);
    if (n < 0)
        return -1;
    buf[n] = 0;
    return n;
}

int crl_read_file_alloc(const char *path, size_t max, char **out, size_t *len, struct crl_err *err)
{
    cleanup_close int fd = crl_openat(AT_FDCWD, path, O_RDONLY, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return crl_err_sys(err, errno, "fstat %s", path);
    if (!S_ISREG(st.st_mode))
        return crl_err_set(err, CRL_E_INVALID, "%s is not a regular file", path);
    if ((size_t)st.st_size > max)
        return crl_err_set(err, CRL_E_TOO_LARGE, "%s is larger than %zu bytes", path, max);
    cleanup_free char *buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        return crl_err_sys(err, ENOMEM, "reading %s", path);
    ssize_t n = crl_read_full(fd, buf, (size_t)st.st_size);
    if (n < 0)
        return crl_err_sys(err, errno, "read %s", path);
    buf[n] = 0;
    *len = (size_t)n;
    *out = steal_pointer(&buf);
    return 0;
}

int crl_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl);
}

#define CRL_MAX_FDS 253 /* SCM_MAX_FD */

ssize_t crl_send_fds(int sock, const void *msg, size_t len, const int *fds, int nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * CRL_MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > CRL_MAX_FDS) {
        errno = EINVAL;
        return -1;
    }
    if (nfds > 0) {
        memset(&u, 0, sizeof(u));
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t r;
    do
        r = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    return r;
}

ssize_t crl_recv_fds(int sock, void *msg, size_t len, int *fds, int *nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * CRL_MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = msg, .iov_len = len};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    int want = nfds ? *nfds : 0;
    if (nfds)
        *nfds = 0;
    ssize_t r;
    do
        r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int got[CRL_MAX_FDS];
        memcpy(got, CMSG_DATA(cm), sizeof(int) * (size_t)n);
        for (int i = 0; i < n; i++) {
            if (nfds && *nfds < want)
                fds[(*nfds)++] = got[i];
            else
                close(got[i]); /* more than the caller expected: never leak */
        }
    }
    if (mh.msg_flags & MSG_CTRUNC) {
        errno = EMSGSIZE;
        return -1;
    }
    return r;
}

static int rm_rf_dirfd(int dfd, dev_t dev)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -1;
    }
    int ret = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno != ENOENT)
                ret = -1;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (st.st_dev != dev) {
                errno = EBUSY; /* a mount point: never descend into another fs */
                ret = -1;
                continue;
            }
            int sub = crl_openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
            if (sub < 0 || rm_rf_dirfd(sub, dev) < 0)
                ret = -1;
            if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                ret = -1;
        } else if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
            ret = -1;
        }
    }
    closedir(d);
    return ret;
}

int crl_rm_rf_at(int dirfd, const char *name)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(dirfd, name, 0);
    int sub = crl_openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
    if (sub < 0)
        return -1;
    int r = rm_rf_dirfd(sub, st.st_dev);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        return -1;
    return r;
}

int crl_mkdir_p(const char *path, mode_t mode)
{
    char buf[4096];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

unsigned long long crl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

double crl_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void crl_fmt_time(double wall_s, char *buf, size_t cap)
{
    time_t t = (time_t)wall_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%03dZ", (int)((wall_s - (double)t) * 1000.0));
}

int crl_sibling_path(const char *name, char *out, size_t cap, struct crl_err *err)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0)
        return crl_err_sys(err, errno, "readlink /proc/self/exe");
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = 0;
    int w = snprintf(out, cap, "%s/%s", slash ? self : ".", name);
    if (w < 0 || (size_t)w >= cap)
        return crl_err_set(err, CRL_E_INTERNAL, "the path of %s is too long", name);
    return 0;
}

pid_t crl_pidfd_pid(int pidfd)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
    if (crl_read_file_at(AT_FDCWD, path, buf, sizeof(buf)) < 0)
        return -1;
    const char *p = strstr(buf, "\nPid:");
    return p ? (pid_t)strtol(p + 5, NULL, 10) : -1;
}
