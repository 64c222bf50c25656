/* corral snapshot | fork | pause | resume | net: a sandbox's state.  A
 * snapshot is a checkpoint of its writable filesystem; a fork a new sandbox
 * on one; pause freezes its processes and releases what memory it can; net
 * replaces its network policy. */
#include <stdio.h>
#include <string.h>

#include "../../lib/core/spec.h"
#include "cli.h"

static const char snapshot_help[] =
    "usage: corral snapshot [--name NAME] [--json] ID\n"
    "\n"
    "Take a checkpoint of sandbox ID's writable filesystem (not its processes)\n"
    "and print its id (sha256:...), which 'corral fork --checkpoint' takes.\n"
    "Checkpoints are incremental and deduplicated.  On a sandbox that records\n"
    "a trajectory, the snapshot is a step of it.\n"
    "\n"
    "  --name NAME         a name for it, recorded with it (at most 128 bytes)\n"
    "  --json              print corrald's answer (with what it stored)\n";

static const char fork_help[] =
    "usage: corral fork [--step N | --checkpoint ID] [--trajectory T] [--json] SANDBOX\n"
    "\n"
    "Create a sandbox with SANDBOX's spec on the state of its filesystem now,\n"
    "after step N of the trajectory it records, or of a checkpoint, and print\n"
    "its id.  Processes are not copied: the new sandbox starts with none.\n"
    "\n"
    "  --step N            the state after step N (0: the start)\n"
    "  --checkpoint ID     the state of checkpoint ID (from 'corral snapshot')\n"
    "  --trajectory T      the new sandbox records trajectory T (a new one)\n"
    "  --json              print the new sandbox as JSON\n";

static const char pause_help[] =
    "usage: corral pause [--json] ID\n"
    "\n"
    "Freeze every process of sandbox ID and release what memory can be\n"
    "released.  Any call to it (an exec, a file, a session) resumes it.\n"
    "\n"
    "  --json              print the sandbox as JSON\n";

static const char resume_help[] = "usage: corral resume [--json] ID\n"
                                  "\n"
                                  "Thaw a paused sandbox.\n"
                                  "\n"
                                  "  --json              print the sandbox as JSON\n";

static const char timeout_help[] =
    "usage: corral timeout [--json] ID SECONDS\n"
    "\n"
    "Sandbox ID's ttl ends SECONDS from now (0: it has none), longer or shorter\n"
    "than its spec said; what it does then is its spec's on_ttl (destroy, or\n"
    "pause).  Prints the sandbox's id (its expires_at with --json).\n"
    "\n"
    "  --json              print the sandbox as JSON\n";

static const char net_help[] =
    "usage: corral net [--allow RULE]... [--deny RULE]... [--json] ID none|allow|full\n"
    "\n"
    "Replace sandbox ID's network policy while it runs: in force for its next\n"
    "connection (those open go on).  RULE: a name (deb.example), a wildcard\n"
    "(*.example), an address or CIDR (10.1.2.0/24), each with :PORTS if\n"
    "wanted (api.example:80,443); docs/api.md has the grammar.  Deny wins.\n"
    "\n"
    "  --allow RULE        what mode allow lets it reach (repeatable)\n"
    "  --deny RULE         what it may not reach, in modes allow and full\n"
    "  --json              print the sandbox as JSON\n";

/* METHOD /v1/sandboxes/ID/ACTION with `body`; print the answer as JSON, or
 * its field `field`. */
static int call(const char *method, const char *id, const char *action, json_t *body, bool as_json,
                const char *field)
{
    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *out = NULL;
    char path[160];
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, action);
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_request(cl, method, path, body, &out, NULL, &err) < 0) {
        crl_err_prefix(&err, "%s", id);
        return crl_cli_fail(&err);
    }
    if (as_json)
        crl_cli_print_json(out);
    else
        printf("%s\n", crl_cli_str(out, field, "?"));
    return 0;
}

static int post(const char *id, const char *action, json_t *body, bool as_json, const char *field)
{
    return call("POST", id, action, body, as_json, field);
}

static int id_arg(int argc, char **argv)
{
    if (argc - optind != 1)
        return crl_cli_usage(argv[0],
                             argc == optind ? "needs a sandbox id" : "takes one sandbox id");
    if (!crl_client_id_ok(argv[optind]))
        return crl_cli_usage(argv[0], "'%s' is not a sandbox id", argv[optind]);
    return -1;
}

int crl_cmd_snapshot(int argc, char **argv)
{
    enum { OPT_NAME = CRL_CLI_OPT_OTHER, OPT_JSON };
    static const struct option opts[] = {{"name", required_argument, 0, OPT_NAME},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    json_auto_t *body = json_object();
    bool as_json = false;
    int c, rc;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_NAME:
            if (json_object_set_new(body, "name", json_string(optarg)) < 0 || strlen(optarg) > 128)
                return crl_cli_usage(argv[0], "--name needs UTF-8 text of at most 128 bytes");
            break;
        case OPT_JSON: as_json = true; break;
        case 'h': return crl_cli_help(snapshot_help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if ((rc = id_arg(argc, argv)) >= 0)
        return rc;
    return post(argv[optind], "snapshot", body, as_json, "checkpoint");
}

int crl_cmd_fork(int argc, char **argv)
{
    enum { OPT_STEP = CRL_CLI_OPT_OTHER, OPT_CHECKPOINT, OPT_TRAJECTORY, OPT_JSON };
    static const struct option opts[] = {{"step", required_argument, 0, OPT_STEP},
                                         {"checkpoint", required_argument, 0, OPT_CHECKPOINT},
                                         {"trajectory", required_argument, 0, OPT_TRAJECTORY},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *body = json_object();
    bool as_json = false;
    long long step;
    int c, rc;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_STEP:
            if (crl_cli_parse_int("--step", optarg, 0, UINT32_MAX, &step, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            json_object_set_new(body, "step", json_integer(step));
            break;
        case OPT_CHECKPOINT:
            if (json_object_set_new(body, "checkpoint", json_string(optarg)) < 0)
                return crl_cli_usage(argv[0], "--checkpoint needs a checkpoint id");
            break;
        case OPT_TRAJECTORY:
            if (!crl_traj_id_ok(optarg))
                return crl_cli_usage(argv[0], "--trajectory: '%s' is not a trajectory id", optarg);
            json_object_set_new(body, "trajectory", json_string(optarg));
            break;
        case OPT_JSON: as_json = true; break;
        case 'h': return crl_cli_help(fork_help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (json_object_get(body, "step") && json_object_get(body, "checkpoint"))
        return crl_cli_usage(argv[0], "give --step or --checkpoint, not both");
    if ((rc = id_arg(argc, argv)) >= 0)
        return rc;
    return post(argv[optind], "fork", body, as_json, "id");
}

static int pause_resume(int argc, char **argv, const char *action, const char *text)
{
    bool as_json;
    const char *id = NULL;
    int rc = crl_cli_read_flags(argc, argv, text, 1, "a sandbox id", &as_json, &id);
    if (rc >= 0)
        return rc;
    if (!crl_client_id_ok(id))
        return crl_cli_usage(argv[0], "'%s' is not a sandbox id", id);
    return post(id, action, NULL, as_json, "id");
}

int crl_cmd_pause(int argc, char **argv)
{
    return pause_resume(argc, argv, "pause", pause_help);
}

int crl_cmd_resume(int argc, char **argv)
{
    return pause_resume(argc, argv, "resume", resume_help);
}

int crl_cmd_timeout(int argc, char **argv)
{
    enum { OPT_JSON = CRL_CLI_OPT_OTHER };
    static const struct option opts[] = {
        {"json", no_argument, 0, OPT_JSON}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    bool as_json = false;
    long long secs;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: as_json = true; break;
        case 'h': return crl_cli_help(timeout_help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (argc - optind != 2)
        return crl_cli_usage(argv[0], "needs a sandbox id and a number of seconds");
    const char *id = argv[optind];
    if (!crl_client_id_ok(id))
        return crl_cli_usage(argv[0], "'%s' is not a sandbox id", id);
    if (crl_cli_parse_int("SECONDS", argv[optind + 1], 0, 30 * 86400, &secs, &err) < 0)
        return crl_cli_usage(argv[0], "%s", err.msg);
    json_auto_t *body = json_pack("{s:I}", "timeout_s", (json_int_t)secs);
    return post(id, "timeout", body, as_json, "id");
}

int crl_cmd_net(int argc, char **argv)
{
    enum { OPT_ALLOW = CRL_CLI_OPT_OTHER, OPT_DENY, OPT_JSON };
    static const struct option opts[] = {{"allow", required_argument, 0, OPT_ALLOW},
                                         {"deny", required_argument, 0, OPT_DENY},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    json_auto_t *allow = json_array(), *deny = json_array();
    bool as_json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_ALLOW: json_array_append_new(allow, json_string(optarg)); break;
        case OPT_DENY: json_array_append_new(deny, json_string(optarg)); break;
        case OPT_JSON: as_json = true; break;
        case 'h': return crl_cli_help(net_help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (argc - optind != 2)
        return crl_cli_usage(argv[0], "needs a sandbox id and a mode (none, allow or full)");
    const char *id = argv[optind], *mode = argv[optind + 1];
    if (!crl_client_id_ok(id))
        return crl_cli_usage(argv[0], "'%s' is not a sandbox id", id);
    json_auto_t *body = json_pack("{s:s}", "mode", mode);
    if (json_array_size(allow))
        json_object_set(body, "allow", allow);
    if (json_array_size(deny))
        json_object_set(body, "deny", deny);
    return call("PATCH", id, "network", body, as_json, "id");
}
