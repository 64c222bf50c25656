/* corral volume: named volumes that outlive sandboxes (docs/api.md, Volumes).
 *
 *   corral volume create NAME [--size-mb N] [--label K=V]... | ls | inspect NAME | rm NAME...
 *
 * A sandbox mounts one at create: corral create --volume NAME:PATH[:ro]. */
#include <stdio.h>
#include <string.h>

#include "../../lib/util/cleanup.h"
#include "cli.h"

static const char help[] =
    "usage: corral volume COMMAND [OPTIONS] [ARGS]\n"
    "\n"
    "  create NAME [--size-mb N] [--label K=V]... [--json]\n"
    "                                  make a volume (default 1024 MiB, at most 1 TiB;\n"
    "                                  the kernel enforces the size)\n"
    "  ls [--label K=V]... [--json]    list volumes and who mounts them\n"
    "  inspect NAME                    a volume, as JSON\n"
    "  rm NAME...                      remove volumes (refused while one is mounted)\n"
    "\n"
    "Mount one at create: corral create --volume NAME:PATH[:ro].  A volume is\n"
    "mounted read-write by one sandbox at a time, or read-only by any number.\n";

static const char help_create[] =
    "usage: corral volume create NAME [--size-mb N] [--label K=V]... [--json]\n"
    "\n"
    "Make a volume: an ext4 file system of N MiB (default 1024) in corrald's\n"
    "volume dir.  NAME: 1-63 of a-z, 0-9, '_', '.', '-'.\n";

static const char help_ls[] = "usage: corral volume ls [--label K=V]... [--json]\n"
                              "\n"
                              "List the volumes, their size, use and mounts.\n";

static const char help_inspect[] = "usage: corral volume inspect NAME\n"
                                   "\n"
                                   "Print a volume as JSON.\n";

static const char help_rm[] = "usage: corral volume rm NAME...\n"
                              "\n"
                              "Remove volumes and everything in them.  Refused while a sandbox\n"
                              "mounts one.\n";

static void show_list(json_t *out)
{
    printf("%-24s %-10s %-10s %-24s %s\n", "NAME", "SIZE", "USED", "CREATED", "MOUNTS");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(out, "volumes"), i, v)
    {
        char size[32], used[32];
        json_t *u = json_object_get(v, "used_bytes");
        json_t *mounts = json_object_get(v, "mounts");
        printf("%-24s %-10s %-10s %-24s ", crl_cli_str(v, "name", "?"),
               crl_cli_bytes((double)json_integer_value(json_object_get(v, "size_mb")) * 1048576.0,
                             size, sizeof(size)),
               json_is_integer(u) ? crl_cli_bytes((double)json_integer_value(u), used, sizeof(used))
                                  : "-",
               crl_cli_str(v, "created_at", "-"));
        size_t k;
        json_t *m;
        json_array_foreach(mounts, k, m) printf(
            "%s%s:%s%s", k ? ", " : "", crl_cli_str(m, "sandbox", "?"), crl_cli_str(m, "path", "?"),
            json_is_true(json_object_get(m, "read_only")) ? ":ro" : "");
        printf("%s\n", json_array_size(mounts) ? "" : "-");
    }
}

#define MAX_LABELS 64

/* --label K=V (into labels[]), --size-mb (create's), --json; the rest
 * positional. */
struct flags {
    const char *labels[MAX_LABELS];
    size_t n_labels;
    long long size_mb;
    bool as_json;
};

static int read_flags(int argc, char **argv, const char *help_text, bool sized, struct flags *f)
{
    static const struct option opts[] = {{"label", required_argument, 0, 'l'},
                                         {"size-mb", required_argument, 0, 's'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            if (!strchr(optarg, '=') || optarg[0] == '=')
                return crl_cli_usage(argv[0], "--label needs KEY=VALUE, not '%s'", optarg);
            if (f->n_labels == MAX_LABELS)
                return crl_cli_usage(argv[0], "at most %d --label", MAX_LABELS);
            f->labels[f->n_labels++] = optarg;
            break;
        case 's':
            if (!sized)
                return crl_cli_usage(argv[0], "--size-mb is for create");
            if (crl_cli_parse_int("--size-mb", optarg, 1, 1LL << 30, &f->size_mb, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            break;
        case 'j': f->as_json = true; break;
        case 'h': return crl_cli_help(help_text);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    return -1;
}

static int cmd_create(int argc, char **argv)
{
    struct flags f = {0};
    int rc = read_flags(argc, argv, help_create, true, &f);
    if (rc >= 0)
        return rc;
    if (argc - optind != 1)
        return crl_cli_usage(argv[0], "needs a volume name");
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *body = json_pack("{s:s, s:{}}", "name", argv[optind], "labels");
    if (!body)
        return crl_cli_usage(argv[0], "'%s' is not valid UTF-8 text", argv[optind]);
    for (size_t i = 0; i < f.n_labels; i++)
        if (crl_cli_parse_kv("--label", f.labels[i], json_object_get(body, "labels"), &err) < 0)
            return crl_cli_usage(argv[0], "%s", err.msg);
    if (f.size_mb)
        json_object_set_new(body, "size_mb", json_integer(f.size_mb));
    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *out = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_request(cl, "POST", "/v1/volumes", body, &out, NULL, &err) < 0)
        return crl_cli_fail(&err);
    if (f.as_json)
        crl_cli_print_json(out);
    else
        printf("%s\n", crl_cli_str(out, "name", "?"));
    return 0;
}

static int cmd_ls(int argc, char **argv)
{
    struct flags f = {0};
    int rc = read_flags(argc, argv, help_ls, false, &f);
    if (rc >= 0)
        return rc;
    if (optind != argc)
        return crl_cli_usage(argv[0], "takes no arguments");
    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *out = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_list_of(cl, "/v1/volumes", f.labels, f.n_labels, &out, &err) < 0)
        return crl_cli_fail(&err);
    if (f.as_json)
        crl_cli_print_json(out);
    else
        show_list(out);
    return 0;
}

static int cmd_inspect(int argc, char **argv)
{
    bool as_json;
    const char *name = NULL;
    int rc = crl_cli_read_flags(argc, argv, help_inspect, 1, "a volume name", &as_json, &name);
    if (rc >= 0)
        return rc;
    char path[300];
    snprintf(path, sizeof(path), "/v1/volumes/%s", name);
    return crl_cli_show(path, true, NULL);
}

static int cmd_rm(int argc, char **argv)
{
    int rc = crl_cli_no_flags(argc, argv, help_rm);
    if (rc >= 0)
        return rc;
    if (optind == argc)
        return crl_cli_usage(argv[0], "needs at least one volume name");
    return crl_cli_delete_each("/v1/volumes", argv + optind, argc - optind);
}

static const struct crl_cli_sub subs[] = {
    {"create", cmd_create},   {"ls", cmd_ls}, {"list", cmd_ls},
    {"inspect", cmd_inspect}, {"rm", cmd_rm},
};

int crl_cmd_volume(int argc, char **argv)
{
    return crl_cli_dispatch(argc, argv, "volume", subs, CRL_ARRAY_SIZE(subs),
                            "create, ls, inspect, rm", help);
}
