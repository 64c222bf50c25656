/* What /proc says of a process, for telling a process we knew from one
 * that has its pid since (a corrald started anew adopts sandboxes by the
 * pids of their PID 1s: lib/backend/container/container.c). */
#ifndef CRL_OS_PROC_H
#define CRL_OS_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Who a process is, beyond its pid: its start time in clock ticks since
 * boot (field 22 of /proc/<pid>/stat) and the inode of its pid namespace. */
struct crl_proc_identity {
    uint64_t start;
    uint64_t pidns;
};

/* 0, or -1 with errno (ESRCH: no such process; EPROTO: /proc unreadable). */
int crl_proc_identity(pid_t pid, struct crl_proc_identity *out);
/* Its pid in the innermost pid namespace it is in (the last of NSpid in
 * /proc/<pid>/status); -1 if it is gone or /proc does not say. */
pid_t crl_proc_ns_pid(pid_t pid);
/* A process's wait status as the kernel keeps it with its pidfd once it
 * is reaped (Linux 6.15 on: PIDFD_GET_INFO with PIDFD_INFO_EXIT), whoever
 * reaped it; false if the kernel does not say (yet). */
bool crl_pidfd_exit_status(int pidfd, int *status);
/* This boot's id (/proc/sys/kernel/random/boot_id, 36 characters): a pid
 * recorded under another boot names nothing.  "" if it cannot be read. */
void crl_boot_id(char *out, size_t cap);

#endif
