/* How the function backend's set-up code (the jail, a keeper's root and
 * claim) reports a failure: each step returns 0 or -errno, and the first
 * that fails names itself in *step, for corrald's message ("entering the
 * function jail: landlock: ..."). */
#ifndef CRL_FUNCTION_STEP_H
#define CRL_FUNCTION_STEP_H

#include <errno.h>

/* In a function that takes `const char **step` and returns 0 or -errno. */
#define STEP(name, expr)  \
    do {                  \
        int r_ = (expr);  \
        if (r_ < 0) {     \
            *step = name; \
            return r_;    \
        }                 \
    } while (0)

/* A libc call's result as 0 or -errno. */
static inline int neg_errno(long r)
{
    return r < 0 ? -errno : 0;
}

#endif
