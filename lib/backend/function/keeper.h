/* A function sandbox's keeper: a fork of its runtime's zygote, born PID 1
 * of fresh mount, pid, ipc and uts namespaces, so the interpreter it
 * carries is already initialised.  Its life:
 *
 *   1. It builds the sandbox's root (root.h) and tells corrald READY, with
 *      descriptors of its root and scratch dirs; corrald pools it.
 *   2. A create claims it (CLAIM): it joins the sandbox's cgroup, makes
 *      that its cgroup namespace's root, enters the sandbox's network
 *      namespace, takes its hostname, sizes its tmpfs, writes /etc, and
 *      makes a time namespace whose clocks start at the sandbox's start,
 *      for its children.  Namespaces are paid for once, here.
 *   3. From then on it only forks: each FORK is a child (or a spare forked
 *      ahead while it was idle) that jails itself (jail.h) and runs one
 *      call; it reports each call's end (EXITED) from wait4, reaps every
 *      orphan in the sandbox as its PID 1, and exits when corrald closes
 *      its socket, which ends the pid namespace and everything in it.
 *
 * It runs as the host's root but no code of the sandbox's: it is
 * non-dumpable, and calls run as another uid with ptrace and signals to
 * it refused, so nothing in the sandbox can read, signal or replace it,
 * and the exit statuses it reports come from the kernel. */
#ifndef CRL_FUNCTION_KEEPER_H
#define CRL_FUNCTION_KEEPER_H

#include <linux/filter.h>

#include "zygote.h"

/* In the zygote's child after clone3 into the new namespaces, SIGCHLD
 * blocked: `sock` is its end of the socket whose other end corrald gets;
 * `filter` the calls' seccomp filter.  Never returns. */
void crl_keeper_main(const struct crl_zygote_runtime *rt, int sock, const char *root_dir,
                     const struct sock_fprog *filter) __attribute__((noreturn));

#endif
