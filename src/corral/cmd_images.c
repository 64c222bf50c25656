/* corral images: the images sandboxes can be made from. */
#include <stdio.h>

#include "../../lib/util/buf.h"
#include "cli.h"

static const char help[] = "usage: corral images [--json]\n"
                           "\n"
                           "List the images corrald has, and how many sandboxes use each.\n"
                           "\n"
                           "  --json              print corrald's answer as JSON\n";

static void argv_text(json_t *arr, struct crl_buf *b)
{
    size_t i;
    json_t *s;
    json_array_foreach(arr, i, s)
        crl_buf_printf(b, "%s%s", b->len ? " " : "", json_string_value(s));
}

int crl_cmd_images(int argc, char **argv)
{
    enum { OPT_JSON = CRL_CLI_OPT_OTHER };
    static const struct option opts[] = {
        {"json", no_argument, 0, OPT_JSON}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    bool as_json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
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
    if (crl_client_request(cl, "GET", "/v1/images", NULL, &out, NULL, &err) < 0)
        return crl_cli_fail(&err);
    if (as_json) {
        crl_cli_print_json(out);
        return 0;
    }
    printf("%-20s %-12s %-9s %-6s %s\n", "NAME", "ORIGIN", "SANDBOXES", "USER", "CMD");
    size_t i;
    json_t *img;
    json_array_foreach(json_object_get(out, "images"), i, img)
    {
        struct crl_buf b;
        crl_buf_init(&b, CRL_BUF_UNBOUNDED);
        argv_text(json_object_get(img, "entrypoint"), &b);
        argv_text(json_object_get(img, "cmd"), &b);
        printf("%-20s %-12s %-9lld %-6s %s\n", crl_cli_str(img, "name", "?"),
               crl_cli_str(img, "origin", "?"),
               json_integer_value(json_object_get(img, "sandboxes")), crl_cli_str(img, "user", "-"),
               b.len ? b.data : "-");
        crl_buf_free(&b);
    }
    return 0;
}
