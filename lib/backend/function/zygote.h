/* A zygote: one per runtime, started by corrald, that initialises the
 * runtime once (for python: the interpreter with the common standard
 * library imported) and then only forks.  Each child jails itself
 * (jail.h) and runs one call; the zygote itself never runs user code.
 * The runtime-specific parts are the two callbacks: src/corral-zygote has
 * the shell and python ones. */
#ifndef CRL_FUNCTION_ZYGOTE_H
#define CRL_FUNCTION_ZYGOTE_H

#include <stdbool.h>
#include <stdint.h>

#include "zygote_proto.h"

struct crl_zygote_runtime {
    const char *name;
    /* In the zygote, once, before its hello: 0 or -1 (it then exits). */
    int (*prepare)(void);
    /* In a jailed child: run the call and exit with its status; never
     * returns.  ARGV: strings are argv; SOURCE: strings[0] is source. */
    void (*run)(enum crl_zyg_kind kind, char **strings, uint32_t n, char **envp);
    /* In a child, first of all (python: PyOS_AfterFork_Child); may be NULL. */
    void (*after_fork)(void);
    /* Does a call run in the zygote's image (python), so that a spare
     * should copy its pages before its call, rather than execute (shell)? */
    bool runs_in_image;
};

/* Serve corrald on fd CRL_ZYG_FD until it goes away; the exit status. */
int crl_zygote_main(const struct crl_zygote_runtime *rt);

#endif
