#include "boot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PORTS "/sys/class/virtio-ports"

int crl_guest_mount(const char *src, const char *dst, const char *type, unsigned long flags,
                    const char *data)
{
    if (mkdir(dst, 0755) < 0 && errno != EEXIST)
        return -1;
    if (mount(src, dst, type, flags, data) < 0 && errno != EBUSY)
        return -1;
    return 0;
}

int crl_guest_load_modules(const char *dir, int *listed, void (*warn)(const char *path, int errnum))
{
    char path[512];
    snprintf(path, sizeof(path), "%s/modules.order", dir);
    FILE *f = fopen(path, "re");
    int loaded = 0;
    *listed = 0;
    if (!f)
        return 0;
    char name[256];
    while (fgets(name, sizeof(name), f)) {
        name[strcspn(name, "\n")] = '\0';
        if (!name[0])
            continue;
        ++*listed;
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            if (warn)
                warn(path, errno);
            continue;
        }
        if (syscall(SYS_finit_module, fd, "", 0) == 0 || errno == EEXIST)
            loaded++;
        else if (warn)
            warn(path, errno);
        close(fd);
    }
    fclose(f);
    return loaded;
}

int crl_guest_console(int wait_ms)
{
    if (fcntl(STDOUT_FILENO, F_GETFD) >= 0)
        return 0;
    for (int waited = 0;; waited += 5) {
        int fd = open("/dev/console", O_RDWR | O_NOCTTY);
        if (fd >= 0) {
            for (int i = 0; i < 3; i++)
                if (fd != i)
                    dup2(fd, i);
            if (fd > 2)
                close(fd);
            return 0;
        }
        if (waited >= wait_ms)
            return -1;
        usleep(5000);
    }
}

void crl_guest_port_name(char *buf, size_t len)
{
    snprintf(buf, len, "%s", CRL_GUEST_PORT);
    char cmdline[4096];
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, cmdline, sizeof(cmdline) - 1);
    close(fd);
    if (n <= 0)
        return;
    cmdline[n] = '\0';
    for (char *p = cmdline; (p = strstr(p, "corral.port=")); p++) {
        if (p != cmdline && p[-1] != ' ')
            continue;
        p += strlen("corral.port=");
        snprintf(buf, len, "%.*s", (int)strcspn(p, " \n"), p);
        return;
    }
}

/* The port under PORTS whose name file says name, opened; -1 if none yet. */
static int find_port(const char *name)
{
    DIR *d = opendir(PORTS);
    if (!d)
        return -1;
    struct dirent *e;
    int fd = -1;
    while (fd < 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[512], got[128] = "";
        snprintf(path, sizeof(path), PORTS "/%s/name", e->d_name);
        int nfd = open(path, O_RDONLY | O_CLOEXEC);
        if (nfd < 0)
            continue;
        ssize_t n = read(nfd, got, sizeof(got) - 1);
        close(nfd);
        if (n <= 0)
            continue;
        got[n] = '\0';
        got[strcspn(got, "\n")] = '\0';
        if (strcmp(got, name) != 0)
            continue;
        snprintf(path, sizeof(path), "/dev/%s", e->d_name);
        fd = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
    }
    closedir(d);
    return fd;
}

int crl_guest_open_port(const char *name, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 5) {
        int fd = find_port(name);
        if (fd >= 0)
            return fd;
        usleep(5000);
    }
    errno = ENOENT;
    return -1;
}
