/* corral ps, attach, kill: a sandbox's background processes
 * (docs/api.md, Processes). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/core/process.h"
#include "../../lib/util/buf.h"
#include "cli.h"

static const char ps_help[] =
    "usage: corral ps [--json] [--all] ID\n"
    "\n"
    "List the background processes of sandbox ID (started with 'corral sh',\n"
    "'corral exec -t' or POST .../processes): PID, state, terminal, age, tag\n"
    "and command.  Ended ones are listed with their exit status too, until\n"
    "forgotten.\n"
    "\n"
    "  --all    ended processes as well as running ones\n"
    "  --json   the API's answer\n";

static const char attach_help[] =
    "usage: corral attach [--offset N] ID PID\n"
    "\n"
    "Attach to background process PID of sandbox ID: its output (by default\n"
    "all of it that corrald still keeps, then what comes) to our stdout, our\n"
    "input to its stdin; a process with a terminal gets ours in raw mode, with\n"
    "our window's size.  Ends when the process ends, with its exit status; a\n"
    "SIGTERM or SIGHUP (or a closed terminal) detaches and leaves it running.\n"
    "\n"
    "  --offset N   start its output at byte N\n";

static const char kill_help[] =
    "usage: corral kill [--group | --tree] ID PID [-SIG | SIG]\n"
    "\n"
    "Send a signal (default TERM; a name such as INT or KILL, or a number) to\n"
    "background process PID of sandbox ID.\n"
    "\n"
    "  --group   to its process group\n"
    "  --tree    to it and every process it started, however detached\n";

static void show_ps(json_t *answer)
{
    size_t i;
    json_t *p;
    printf("%-7s %-13s %-4s %-7s %-12s %s\n", "PID", "STATE", "TTY", "AGE", "TAG", "COMMAND");
    json_array_foreach(json_object_get(answer, "processes"), i, p)
    {
        char age[32], state[32];
        struct crl_buf cmd;
        crl_buf_init(&cmd, 200);
        json_t *c = json_object_get(p, "cmd"), *a;
        size_t k;
        if (json_is_string(c))
            crl_buf_printf(&cmd, "%s", json_string_value(c));
        json_array_foreach(c, k, a)
            crl_buf_printf(&cmd, "%s%s", k ? " " : "", json_string_value(a));
        for (size_t j = 0; j < cmd.len; j++)
            if ((unsigned char)cmd.data[j] < 0x20)
                cmd.data[j] = ' ';
        json_t *res = json_object_get(p, "result");
        snprintf(state, sizeof(state), "%s", crl_cli_str(p, "state", "?"));
        if (json_is_object(res))
            snprintf(state, sizeof(state), "%s %d", crl_cli_str(res, "reason", "ended"),
                     crl_client_exit_status(res));
        printf("%-7lld %-13s %-4s %-7s %-12s %.*s\n",
               (long long)json_integer_value(json_object_get(p, "pid")), state,
               json_is_true(json_object_get(p, "tty")) ? "yes" : "-",
               crl_cli_age(crl_cli_str(p, "started_at", ""), age, sizeof(age)),
               crl_cli_str(p, "tag", "-"), (int)(cmd.len < 80 ? cmd.len : 80),
               cmd.data ? cmd.data : "");
        crl_buf_free(&cmd);
    }
}

int crl_cmd_ps(int argc, char **argv)
{
    enum { OPT_JSON = CRL_CLI_OPT_OTHER, OPT_ALL };
    static const struct option opts[] = {{"json", no_argument, 0, OPT_JSON},
                                         {"all", no_argument, 0, OPT_ALL},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bool as_json = false, all = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":ha", opts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: as_json = true; break;
        case OPT_ALL:
        case 'a': all = true; break;
        case 'h': return crl_cli_help(ps_help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind + 1 != argc)
        return crl_cli_usage(argv[0],
                             optind == argc ? "needs a sandbox id" : "takes one sandbox id");
    if (!crl_client_id_ok(argv[optind]))
        return crl_cli_usage(argv[0], "'%s' is not a sandbox id", argv[optind]);
    char path[256];
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes%s", argv[optind],
             all ? "" : "?state=running");
    return crl_cli_show(path, as_json, show_ps);
}

/* ID and PID from argv[optind..]: -1 to go on, else the status to exit with. */
static int id_and_pid(int argc, char **argv, const char **id, int *pid)
{
    if (argc - optind < 2)
        return crl_cli_usage(argv[0], "needs a sandbox id and a process id");
    *id = argv[optind++];
    if (!crl_client_id_ok(*id))
        return crl_cli_usage(argv[0], "'%s' is not a sandbox id", *id);
    char *end;
    long v = strtol(argv[optind], &end, 10);
    if (end == argv[optind] || *end || v <= 0 || v > 0x7fffffff)
        return crl_cli_usage(argv[0], "'%s' is not a process id", argv[optind]);
    optind++;
    *pid = (int)v;
    return -1;
}

int crl_cmd_attach(int argc, char **argv)
{
    enum { OPT_OFFSET = CRL_CLI_OPT_OTHER };
    static const struct option opts[] = {
        {"offset", required_argument, 0, OPT_OFFSET}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *offset = NULL, *id;
    int c, pid, rc;
    struct crl_err err = CRL_ERR_INIT;
    long long off;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_OFFSET:
            if (crl_cli_parse_int("--offset", optarg, 0, INT64_MAX, &off, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            offset = optarg;
            break;
        case 'h': return crl_cli_help(attach_help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if ((rc = id_and_pid(argc, argv, &id, &pid)) >= 0)
        return rc;
    if (optind < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    cleanup_client struct crl_client *cl = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    char path[256];
    json_auto_t *p = NULL;
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%d", id, pid);
    if (crl_client_request(cl, "GET", path, NULL, &p, NULL, &err) < 0)
        return crl_cli_fail(&err);
    crl_cli_catch_signals(NULL);
    return crl_cli_attach(cl, id, pid, json_is_true(json_object_get(p, "tty")), offset);
}

int crl_cmd_kill(int argc, char **argv)
{
    enum { OPT_GROUP = CRL_CLI_OPT_OTHER, OPT_TREE };
    static const struct option opts[] = {{"group", no_argument, 0, OPT_GROUP},
                                         {"tree", no_argument, 0, OPT_TREE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *scope = "process", *id;
    int c, pid, rc;
    opterr = 0;
    /* "+": a -SIG after the ids is the signal, not an option */
    while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_GROUP: scope = "group"; break;
        case OPT_TREE: scope = "tree"; break;
        case 'h': return crl_cli_help(kill_help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if ((rc = id_and_pid(argc, argv, &id, &pid)) >= 0)
        return rc;
    const char *sig = "TERM";
    if (optind < argc)
        sig = argv[optind][0] == '-' ? argv[optind] + 1 : argv[optind];
    if (optind + 1 < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind + 1]);
    if (!crl_signal_parse(sig))
        return crl_cli_usage(argv[0], "'%s' is not a signal (a name such as INT, or 1-64)", sig);
    cleanup_client struct crl_client *cl = NULL;
    struct crl_err err = CRL_ERR_INIT;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    char path[256];
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%d/signal", id, pid);
    json_auto_t *body = json_pack("{s:s, s:s}", "signal", sig, "scope", scope);
    if (crl_client_request(cl, "POST", path, body, NULL, NULL, &err) < 0)
        return crl_cli_fail(&err);
    return 0;
}
