/* corral host: the host's capacity, what is used and what is free. */
#include <stdio.h>

#include "cli.h"

static const char help[] = "usage: corral host [--json]\n"
                           "\n"
                           "Show the host corrald runs on: capacity for sandboxes, use, backends.\n"
                           "\n"
                           "  --json              print corrald's answer as JSON\n";

static void show(json_t *h)
{
    json_t *cap = json_object_get(h, "capacity");
    json_t *used = json_object_get(h, "used");
    json_t *free_ = json_object_get(h, "free");
    printf("host:       %s\n", crl_cli_str(h, "host_id", "?"));
    printf("state:      %s\n", crl_cli_str(h, "state_dir", "-"));
    printf("cgroup:     %s\n", crl_cli_str(h, "cgroup", "-"));
    printf("backends:  ");
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(h, "backends"), i, b) printf(" %s", json_string_value(b));
    printf("\n");
    printf("capacity:   %lld MiB memory (%lld MiB for sandboxes, %lld reserved), %lld CPUs "
           "(%g for sandbox limits), %lld sandboxes\n",
           json_integer_value(json_object_get(cap, "memory_mb")),
           json_integer_value(json_object_get(cap, "sandbox_memory_mb")),
           json_integer_value(json_object_get(cap, "reserve_mb")),
           json_integer_value(json_object_get(cap, "cpus")),
           json_number_value(json_object_get(cap, "sandbox_cpus")),
           json_integer_value(json_object_get(cap, "max_sandboxes")));
    printf("used:       %lld sandboxes, %lld MiB memory, %g CPUs\n",
           json_integer_value(json_object_get(used, "sandboxes")),
           json_integer_value(json_object_get(used, "memory_mb")),
           json_number_value(json_object_get(used, "cpus")));
    printf("free:       %lld sandboxes, %lld MiB memory, %g CPUs\n",
           json_integer_value(json_object_get(free_, "sandboxes")),
           json_integer_value(json_object_get(free_, "memory_mb")),
           json_number_value(json_object_get(free_, "cpus")));
}

int crl_cmd_host(int argc, char **argv)
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
    json_auto_t *h = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_request(cl, "GET", "/v1/host", NULL, &h, NULL, &err) < 0)
        return crl_cli_fail(&err);
    if (as_json)
        crl_cli_print_json(h);
    else
        show(h);
    return 0;
}
