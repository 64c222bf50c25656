/* corral run: create a sandbox, run one command in it, destroy it, and exit
 * with the command's status.  The sandbox is destroyed whatever happens,
 * Ctrl-C included. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char help[] =
    "usage: corral run [OPTIONS] [--] [CMD [ARG...]]\n"
    "\n"
    "Create a sandbox, run CMD in it (an argv; use 'sh -c \"...\"' for a shell\n"
    "line; without one, the image's entrypoint and cmd) with its output streamed\n"
    "live, destroy the sandbox and exit with the command's status: 128+n if\n"
    "signal n killed it, 124 on a timeout.  Output past 64 MiB a stream is\n"
    "dropped, and corral then exits 1 if the command succeeded.  The sandbox is destroyed whatever "
    "happens: Ctrl-C, SIGTERM,\n"
    "SIGHUP, or a reader of our output that went away.\n"
    "\n" CRL_CLI_SPEC_HELP "\n"
    "command options:\n"
    "  --timeout S         kill the command after S seconds (default 300; 0: none)\n"
    "  --user U            root, UID or UID:GID (default: the image's user)\n"
    "  -i, --stdin         send our stdin to the command (read to its end first;\n"
    "                      at most 16 MiB as JSON: 12 MiB of binary data)\n";

int crl_cmd_run(int argc, char **argv)
{
    enum { OPT_TIMEOUT = CRL_CLI_OPT_OTHER, OPT_USER };
    static const struct option opts[] = {CRL_CLI_SPEC_OPTIONS,
                                         {"timeout", required_argument, 0, OPT_TIMEOUT},
                                         {"user", required_argument, 0, OPT_USER},
                                         {"stdin", no_argument, 0, 'i'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *spec = json_object();
    struct crl_cli_exec o = {.timeout_s = -1};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:hi", opts, NULL)) != -1) {
        if (c >= CRL_CLI_SPEC_FIRST && c <= CRL_CLI_SPEC_LAST) {
            if (crl_cli_spec_flag(spec, c, optarg, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            continue;
        }
        switch (c) {
        case OPT_TIMEOUT:
            if (crl_cli_parse_double("--timeout", optarg, 0, 86400, &o.timeout_s, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            break;
        case OPT_USER: o.user = optarg; break;
        case 'i': o.forward_stdin = true; break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (crl_cli_spec_check(spec, &err) < 0)
        return err.code == CRL_E_INVALID ? crl_cli_usage(argv[0], "%s", err.msg)
                                         : crl_cli_fail(&err);

    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *req = NULL;
    json_auto_t *sb = NULL;
    json_auto_t *result = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    /* From here a signal only sets a flag, and SIGPIPE is ignored: once
     * the sandbox exists nothing may end us before it is destroyed. */
    crl_cli_catch_signals(NULL);
    /* stdin first: a sandbox should not wait on the user's typing */
    if (crl_cli_exec_request(&o, argc - optind, argv + optind, &req, &err) < 0)
        return crl_cli_interrupted ? 128 + crl_cli_interrupted : crl_cli_fail(&err);
    if (crl_cli_interrupted)
        return 128 + crl_cli_interrupted;
    /* The create is not cancelled (an abandoned one would leave a sandbox
     * behind until corrald noticed); a signal during it is acted on after. */
    if (crl_client_create(cl, spec, &sb, &err) < 0)
        return crl_cli_interrupted ? 128 + crl_cli_interrupted : crl_cli_fail(&err);
    char id[64];
    snprintf(id, sizeof(id), "%s", crl_cli_str(sb, "id", ""));

    int rc = -1;
    crl_client_set_cancel(cl, &crl_cli_interrupted);
    if (!crl_cli_interrupted)
        rc = crl_client_exec_stream(cl, id, req, crl_cli_write_output, NULL, &result, &err);
    struct crl_err derr = CRL_ERR_INIT;
    crl_client_set_cancel(cl, NULL); /* a second Ctrl-C must not stop the destroy */
    int drc = crl_client_destroy(cl, id, NULL, &derr);
    if (rc < 0) {
        if (crl_cli_interrupted)
            rc = 128 + crl_cli_interrupted;
        else
            rc = crl_cli_exec_fail(&o, &err);
    } else {
        rc = crl_cli_result_status(result, &err);
        if (rc < 0)
            rc = crl_cli_fail(&err);
    }
    if (drc < 0) {
        crl_err_prefix(&derr, "destroying %s", id);
        crl_cli_fail(&derr);
        if (rc == 0)
            rc = CRL_EXIT_FAIL;
    }
    return rc;
}
