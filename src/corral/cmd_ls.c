/* corral ls: the sandboxes corrald knows, live and recently destroyed. */
#include <stdio.h>
#include <string.h>

#include "../../lib/util/buf.h"
#include "cli.h"

#define MAX_SELECTORS 64

static const char help[] =
    "usage: corral ls [OPTIONS]\n"
    "\n"
    "List sandboxes, destroyed ones included while corrald keeps them.\n"
    "\n"
    "  --label K=V         only sandboxes with this label (repeatable: all must match)\n"
    "  -q, --quiet         print only the ids\n"
    "  --json              print corrald's answer as JSON\n";

static void labels_text(json_t *labels, struct crl_buf *b)
{
    const char *k;
    json_t *v;
    json_object_foreach(labels, k, v)
        crl_buf_printf(b, "%s%s=%s", b->len ? "," : "", k, json_string_value(v));
}

int crl_cmd_ls(int argc, char **argv)
{
    enum { OPT_JSON = CRL_CLI_OPT_OTHER, OPT_LABEL };
    static const struct option opts[] = {{"label", required_argument, 0, OPT_LABEL},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *labels[MAX_SELECTORS];
    size_t n_labels = 0;
    bool as_json = false, quiet = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hq", opts, NULL)) != -1) {
        switch (c) {
        case OPT_LABEL:
            if (!strchr(optarg, '=') || optarg[0] == '=')
                return crl_cli_usage(argv[0], "--label needs KEY=VALUE, not '%s'", optarg);
            if (n_labels == MAX_SELECTORS)
                return crl_cli_usage(argv[0], "at most %d --label selectors", MAX_SELECTORS);
            labels[n_labels++] = optarg;
            break;
        case 'q': quiet = true; break;
        case OPT_JSON: as_json = true; break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *out = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_list(cl, labels, n_labels, &out, &err) < 0)
        return crl_cli_fail(&err);
    if (as_json) {
        crl_cli_print_json(out);
        return 0;
    }
    json_t *list = json_object_get(out, "sandboxes");
    size_t i;
    json_t *sb;
    if (!quiet)
        printf("%-24s %-10s %-16s %-7s %s\n", "ID", "STATE", "IMAGE", "AGE", "LABELS");
    json_array_foreach(list, i, sb)
    {
        const char *id = crl_cli_str(sb, "id", "?");
        if (quiet) {
            printf("%s\n", id);
            continue;
        }
        char age[32];
        struct crl_buf lb;
        crl_buf_init(&lb, CRL_BUF_UNBOUNDED);
        labels_text(json_object_get(sb, "labels"), &lb);
        printf("%-24s %-10s %-16s %-7s %s\n", id, crl_cli_str(sb, "state", "?"),
               crl_cli_str(sb, "image", "?"),
               crl_cli_age(crl_cli_str(sb, "created_at", NULL), age, sizeof(age)),
               lb.len ? lb.data : "-");
        crl_buf_free(&lb);
    }
    return 0;
}
