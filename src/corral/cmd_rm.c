/* corral rm: destroy sandboxes, each answered once everything of it is gone. */
#include <stdio.h>

#include "cli.h"

static const char help[] =
    "usage: corral rm ID...\n"
    "\n"
    "Destroy sandboxes and print each id once it is gone.  Destroying a\n"
    "destroyed sandbox succeeds; the others are still destroyed when one fails.\n";

int crl_cmd_rm(int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h')
            return crl_cli_help(help);
        return crl_cli_bad_option(argv[0], argv, c);
    }
    if (optind == argc)
        return crl_cli_usage(argv[0], "needs at least one sandbox id");
    cleanup_client struct crl_client *cl = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    int rc = 0;
    for (int i = optind; i < argc; i++) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_client_destroy(cl, argv[i], NULL, &err) < 0) {
            crl_err_prefix(&err, "%s", argv[i]);
            rc = crl_cli_fail(&err);
            continue;
        }
        printf("%s\n", argv[i]);
        fflush(stdout);
    }
    return rc;
}
