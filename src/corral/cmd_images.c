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

static void show(json_t *out)
{
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
}

int crl_cmd_images(int argc, char **argv)
{
    bool as_json;
    int rc = crl_cli_read_flags(argc, argv, help, 0, NULL, &as_json, NULL);
    return rc >= 0 ? rc : crl_cli_show("/v1/images", as_json, show);
}
