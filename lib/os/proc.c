/* What /proc says of a process (proc.h). */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
