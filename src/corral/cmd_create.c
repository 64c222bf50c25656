/* corral create: make a sandbox from the spec flags and print its id. */
#include <stdio.h>

#include "cli.h"

static const char help[] = "usage: corral create [OPTIONS]\n"
                           "\n"
                           "Create a sandbox and print its id once it is ready.\n"
                           "\n" CRL_CLI_SPEC_HELP "\n"
                           "  --json              print the whole sandbox as JSON\n";

int crl_cmd_create(int argc, char **argv)
{
    enum { OPT_JSON = CRL_CLI_OPT_OTHER };
    static const struct option opts[] = {CRL_CLI_SPEC_OPTIONS,
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    bool as_json = false;
    json_auto_t *spec = json_object();
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c >= CRL_CLI_SPEC_FIRST && c <= CRL_CLI_SPEC_LAST) {
            if (crl_cli_spec_flag(spec, c, optarg, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
        } else if (c == OPT_JSON) {
            as_json = true;
        } else if (c == 'h') {
            return crl_cli_help(help);
        } else {
            return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    if (crl_cli_spec_check(spec, &err) < 0)
        return err.code == CRL_E_INVALID ? crl_cli_usage(argv[0], "%s", err.msg)
                                         : crl_cli_fail(&err);
    cleanup_client struct crl_client *cl = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    json_auto_t *sb = NULL;
    if (crl_client_create(cl, spec, &sb, &err) < 0)
        return crl_cli_fail(&err);
    if (as_json)
        crl_cli_print_json(sb);
    else
        printf("%s\n", json_string_value(json_object_get(sb, "id")));
    return 0;
}
