/* What /proc says of a process (proc.h). */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "../util/fdio.h"

int crl_proc_identity(pid_t pid, struct crl_proc_identity *out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    ssize_t n = crl_read_file_at(AT_FDCWD, path, buf, sizeof(buf) - 1);
    if (n <= 0) {
        errno = ESRCH;
        return -1;
    }
    buf[n] = 0;
    /* The command (field 2) may hold anything, ')' and spaces too: the
     * fields are counted from the last ')'. */
    char *p = strrchr(buf, ')');
    unsigned field = 2;
    for (; p && *p && field < 22; p++)
        if (*p == ' ')
            field++;
    char *end;
    unsigned long long start = p ? strtoull(p, &end, 10) : 0;
    if (!p || field != 22 || end == p) {
        errno = EPROTO;
        return -1;
    }
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
    if (stat(path, &st) < 0) {
        errno = ESRCH;
        return -1;
    }
    out->start = start;
    out->pidns = (uint64_t)st.st_ino;
    return 0;
}

pid_t crl_proc_ns_pid(pid_t pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    ssize_t n = crl_read_file_at(AT_FDCWD, path, buf, sizeof(buf) - 1);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *line = strstr(buf, "\nNSpid:");
    if (!line)
        return -1;
    line += 7;
    long last = -1;
    for (char *q = line;;) {
        while (*q == ' ' || *q == '\t')
            q++;
        if (*q < '0' || *q > '9')
            break;
        char *end;
        last = strtol(q, &end, 10);
        q = end;
    }
    return last > 0 ? (pid_t)last : -1;
}

void crl_boot_id(char *out, size_t cap)
{
    char buf[64];
    ssize_t n = crl_read_file_at(AT_FDCWD, "/proc/sys/kernel/random/boot_id", buf, sizeof(buf) - 1);
    if (n < 0)
        n = 0;
    buf[n] = 0;
    buf[strcspn(buf, "\n")] = 0;
    snprintf(out, cap, "%s", buf);
}

/* The first published layout of struct pidfd_info, whose spare word
 * became exit_code, a wait status. */
struct pidfd_info_v0 {
    uint64_t mask, cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
    int32_t exit_code;
};
#define PIDFD_INFO_EXIT_ (1ull << 3)
#define PIDFD_GET_INFO_ _IOWR(0xFF, 11, struct pidfd_info_v0)

bool crl_pidfd_exit_status(int pidfd, int *status)
{
    struct pidfd_info_v0 info = {.mask = PIDFD_INFO_EXIT_};
    if (pidfd < 0 || ioctl(pidfd, PIDFD_GET_INFO_, &info) < 0 || !(info.mask & PIDFD_INFO_EXIT_))
        return false;
    *status = info.exit_code;
    return true;
}
