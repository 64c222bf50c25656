/* clone(2) for CLONE_VM children, without libc: the child runs fn(arg) on
 * `stack_top` and exits with its return value.  Unlike glibc's clone() it
 * never writes errno, so a CLONE_VM child may call it (the parent's
 * thread-local errno is shared).  Returns the child's pid, or -errno. */
#ifndef CRL_UTIL_RAWCLONE_H
#define CRL_UTIL_RAWCLONE_H

long crl_raw_clone(unsigned long flags, void *stack_top, int *parent_tid, int (*fn)(void *),
                   void *arg);

#endif
