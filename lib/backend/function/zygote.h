/* A zygote: one per runtime, started by corrald, that initialises the
 * runtime once (for python: the interpreter with the common standard
 * library imported) and then only makes keepers (keeper.h): forks of
 * itself born in namespaces of their own, one per sandbox, which fork
 * that sandbox's calls.  Neither the zygote nor a keeper runs user code.
 * The runtime-specific parts are the callbacks: src/corral-zygote has the
 * shell and python ones. */
#ifndef CRL_FUNCTION_ZYGOTE_H
#define CRL_FUNCTION_ZYGOTE_H

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
};

/* Serve corrald on fd CRL_ZYG_FD until it goes away; the exit status.
 * `root_dir`: the empty directory each keeper mounts its root on. */
int crl_zygote_main(const struct crl_zygote_runtime *rt, const char *root_dir);

#endif
