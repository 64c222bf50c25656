/* corral services ID: a sandbox's services and their newest exchanges. */
#include <stdio.h>

#include "cli.h"

static const char services_help[] =
    "usage: corral services [--json] ID\n"
    "\n"
    "The services of sandbox ID (its spec's \"services\": mocks and other\n"
    "sandboxes it reaches by name) and their newest exchanges, oldest first:\n"
    "each request to a mock with its status, each connection to a sandbox.\n"
    "\n"
    "  --json   the API's answer as it is\n";

static void show(json_t *a)
{
    size_t i;
    json_t *s;
    printf("%-24s %-10s %-15s %-6s %s\n", "NAME", "KIND", "ADDRESS", "PORT", "SANDBOX");
    json_array_foreach(json_object_get(a, "services"), i, s)
        printf("%-24s %-10s %-15s %-6lld %s\n", crl_cli_str(s, "name", "?"),
               crl_cli_str(s, "kind", "?"), crl_cli_str(s, "address", "?"),
               json_integer_value(json_object_get(s, "port")), crl_cli_str(s, "sandbox", "-"));
    json_t *ex = json_object_get(a, "exchanges");
    printf("\n%zu exchanges shown of %lld\n", json_array_size(ex),
           json_integer_value(json_object_get(a, "exchanges_total")));
    json_array_foreach(ex, i, s)
    {
        const char *svc = crl_cli_str(s, "service", "?");
        if (json_object_get(s, "method"))
            printf("%6lld  %s: %s %s -> %lld\n", json_integer_value(json_object_get(s, "seq")), svc,
                   crl_cli_str(s, "method", "?"), crl_cli_str(s, "path", "?"),
                   json_integer_value(json_object_get(s, "status")));
        else
            printf("%6lld  %s: a connection to port %lld of %s%s%s\n",
                   json_integer_value(json_object_get(s, "seq")), svc,
                   json_integer_value(json_object_get(s, "port")), crl_cli_str(s, "sandbox", "?"),
                   json_object_get(s, "error") ? ": " : "", crl_cli_str(s, "error", ""));
    }
}

int crl_cmd_services(int argc, char **argv)
{
    bool as_json;
    const char *id = NULL;
    int rc = crl_cli_read_flags(argc, argv, services_help, 1, "a sandbox id", &as_json, &id);
    if (rc >= 0)
        return rc;
    if (!crl_client_id_ok(id))
        return crl_cli_usage(argv[0], "'%s' is not a sandbox id", id);
    char path[160];
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/services", id);
    return crl_cli_show(path, as_json, show);
}
