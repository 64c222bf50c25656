/* corral exec: run a command in a sandbox, its output streamed live to our
 * stdout and stderr, and exit with its status. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char help[] =
    "usage: corral exec [OPTIONS] ID [--] CMD [ARG...]\n"
    "\n"
    "Run CMD (an argv, searched in PATH; use 'sh -c \"...\"' for a shell line)\n"
    "in sandbox ID.  Its stdout and stderr stream to ours as they are written;\n"
    "corral exits with its status: 128+n if signal n killed it, 124 on a timeout.\n"
    "Output past 64 MiB a stream is dropped, and corral then exits 1 if the\n"
    "command succeeded.\n"
    "\n"
    "  --timeout S         kill the command's process tree after S seconds\n"
    "                      (default 300; 0: no limit)\n"
    "  --env K=V           an environment variable (repeatable)\n"
    "  --cwd DIR           working directory (must exist)\n"
    "  --user U            root, UID or UID:GID (default: the image's user)\n"
    "  -i, --stdin         send our stdin to the command (read to its end first;\n"
    "                      at most 16 MiB as JSON: 12 MiB of binary data)\n"
    "  -t, --tty           a terminal of its own, joined to ours (raw, our size\n"
    "                      and TERM), our keys to it as typed: 'corral exec -it\n"
    "                      ID python3' is an interactive python; it runs as a\n"
    "                      background process ('corral ps')\n";

int crl_cmd_exec(int argc, char **argv)
{
    enum { OPT_TIMEOUT = CRL_CLI_OPT_OTHER, OPT_ENV, OPT_CWD, OPT_USER };
    static const struct option opts[] = {{"timeout", required_argument, 0, OPT_TIMEOUT},
                                         {"env", required_argument, 0, OPT_ENV},
                                         {"cwd", required_argument, 0, OPT_CWD},
                                         {"user", required_argument, 0, OPT_USER},
                                         {"stdin", no_argument, 0, 'i'},
                                         {"tty", no_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *env = json_object();
    struct crl_cli_exec o = {.timeout_s = -1, .env = env};
    bool tty = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:hit", opts, NULL)) != -1) {
        switch (c) {
        case OPT_TIMEOUT:
            if (crl_cli_parse_double("--timeout", optarg, 0, 86400, &o.timeout_s, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            break;
        case OPT_ENV:
            if (crl_cli_parse_kv("--env", optarg, env, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            break;
        case OPT_CWD: o.cwd = optarg; break;
        case OPT_USER: o.user = optarg; break;
        case 'i': o.forward_stdin = true; break;
        case 't': tty = true; break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind == argc)
        return crl_cli_usage(argv[0], "needs a sandbox id and a command");
    const char *id = argv[optind++];
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    else if (optind < argc && argv[optind][0] == '-')
        return crl_cli_usage(argv[0],
                             "'%s' after the sandbox id: options go before it, and a "
                             "command starting with '-' goes after '--'",
                             argv[optind]);
    if (optind == argc)
        return crl_cli_usage(argv[0], "needs a command to run after the sandbox id");
    if (!crl_client_id_ok(id))
        return crl_cli_usage(argv[0], "'%s' is not a sandbox id", id);

    if (tty && !isatty(STDIN_FILENO))
        return crl_cli_usage(argv[0], "-t needs a terminal: our stdin is not one");

    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *req = NULL;
    json_auto_t *result = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (tty) { /* our keys go as typed, not read to the end first */
        o.forward_stdin = false;
        if (crl_cli_exec_request(&o, argc - optind, argv + optind, &req, &err) < 0)
            return crl_cli_fail(&err);
        crl_cli_catch_signals(NULL);
        return crl_cli_run_terminal(cl, id, req);
    }
    crl_cli_catch_signals(cl);
    if (crl_cli_exec_request(&o, argc - optind, argv + optind, &req, &err) < 0)
        return crl_cli_interrupted ? 128 + crl_cli_interrupted : crl_cli_fail(&err);
    if (crl_client_exec_stream(cl, id, req, crl_cli_write_output, NULL, &result, &err) < 0) {
        if (crl_cli_interrupted) /* corrald kills the command when we hang up */
            return 128 + crl_cli_interrupted;
        return crl_cli_exec_fail(&o, &err);
    }
    int status = crl_cli_result_status(result, &err);
    return status < 0 ? crl_cli_fail(&err) : status;
}
