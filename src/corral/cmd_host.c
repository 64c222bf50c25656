/* corral host: the host's capacity, what is used and what is free. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char help[] = "usage: corral host [--json]\n"
                           "       corral host drain HOST | undrain HOST\n"
                           "\n"
                           "Show the host corrald runs on: capacity for sandboxes, use, backends.\n"
                           "In a cluster, drain stops new placements on HOST (its sandboxes run\n"
                           "on to their ends); undrain takes it back.\n"
                           "\n"
                           "  --json              print corrald's answer as JSON\n";

static const char hosts_help[] =
    "usage: corral hosts [--json]\n"
    "\n"
    "The cluster's hosts (this host alone without --cluster): state\n"
    "(ready, draining, lost), sandboxes, free memory, CPUs and slots,\n"
    "and how long ago each was last heard of.\n"
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
    bool measured = strcmp(crl_cli_str(cap, "admission", ""), "measured") == 0;
    printf("capacity:   %lld MiB memory (%lld kept for the host), %lld CPUs, %lld sandboxes, "
           "%lld files\n",
           json_integer_value(json_object_get(cap, "memory_mb")),
           json_integer_value(json_object_get(cap, "reserve_mb")),
           json_integer_value(json_object_get(cap, "cpus")),
           json_integer_value(json_object_get(cap, "max_sandboxes")),
           json_integer_value(json_object_get(cap, "files")));
    if (measured)
        printf("admission:  measured (%lld MiB available now; limits are enforced, not "
               "reserved)\n",
               json_integer_value(json_object_get(cap, "memory_available_mb")));
    else
        printf("admission:  reserved (%lld MiB of memory limits, %g CPUs of CPU limits)\n",
               json_integer_value(json_object_get(cap, "sandbox_memory_mb")),
               json_number_value(json_object_get(cap, "sandbox_cpus")));
    printf("used:       %lld sandboxes, %lld MiB of memory limits, %g CPUs of CPU limits, %lld "
           "files\n",
           json_integer_value(json_object_get(used, "sandboxes")),
           json_integer_value(json_object_get(used, "memory_mb")),
           json_number_value(json_object_get(used, "cpus")),
           json_integer_value(json_object_get(used, "files")));
    if (measured)
        printf("free:       %lld sandboxes, %lld MiB of memory\n",
               json_integer_value(json_object_get(free_, "sandboxes")),
               json_integer_value(json_object_get(free_, "memory_mb")));
    else
        printf("free:       %lld sandboxes, %lld MiB memory, %g CPUs\n",
               json_integer_value(json_object_get(free_, "sandboxes")),
               json_integer_value(json_object_get(free_, "memory_mb")),
               json_number_value(json_object_get(free_, "cpus")));
    json_t *p;
    json_array_foreach(json_object_get(h, "pools"), i, p)
    {
        printf("pool:       %s: %lld ready (min %lld, max %lld, target %lld), %lld claims, %lld "
               "misses, %lld died; %s",
               crl_cli_str(p, "name", "?"), json_integer_value(json_object_get(p, "ready")),
               json_integer_value(json_object_get(p, "min")),
               json_integer_value(json_object_get(p, "max")),
               json_integer_value(json_object_get(p, "target")),
               json_integer_value(json_object_get(p, "claims")),
               json_integer_value(json_object_get(p, "misses")),
               json_integer_value(json_object_get(p, "died")), crl_cli_str(p, "state", "?"));
        const char *why = crl_cli_str(p, "error", crl_cli_str(p, "waiting", NULL));
        printf("%s%s\n", why ? ": " : "", why ? why : "");
    }
    static const char *const guests[] = {"microvm", "vm"};
    for (size_t g = 0; g < 2; g++) {
        json_t *vm = json_object_get(json_object_get(h, "backend_info"), guests[g]);
        if (vm && json_object_get(vm, "not_set_up")) {
            printf("%-11s %s\n", guests[g], crl_cli_str(vm, "not_set_up", ""));
            continue;
        }
        if (!vm)
            continue;
        printf("%s:%*s %s; %lld restored, %lld booted cold, %lld templates built, %lld loaded "
               "from the cache, %lld starts failed\n",
               guests[g], (int)(10 - strlen(guests[g])), "", crl_cli_str(vm, "accel_why", "?"),
               json_integer_value(json_object_get(vm, "restores")),
               json_integer_value(json_object_get(vm, "cold_boots")),
               json_integer_value(json_object_get(vm, "template_builds")),
               json_integer_value(json_object_get(vm, "template_loads")),
               json_integer_value(json_object_get(vm, "start_failures")));
        json_t *t;
        json_array_foreach(json_object_get(vm, "templates"), i, t)
            printf("template:   %s: %lld MiB, %lld vCPU%s%s: %s, %lld restores, RAM %.1f MB\n",
                   crl_cli_str(t, "name", "?"), json_integer_value(json_object_get(t, "memory_mb")),
                   json_integer_value(json_object_get(t, "vcpus")),
                   json_object_get(t, "image") ? ", image " : "", crl_cli_str(t, "image", ""),
                   crl_cli_str(t, "state", "?"), json_integer_value(json_object_get(t, "restores")),
                   (double)json_integer_value(json_object_get(t, "ram_bytes")) / 1e6);
    }
}

static int drain(const char *host, bool on)
{
    struct crl_client *c;
    struct crl_err err = CRL_ERR_INIT;
    if (strlen(host) > 64 || strspn(host, "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(host))
        return crl_cli_usage("host", "'%s' is not a host id", host);
    if (crl_cli_connect(&c) < 0)
        return 1;
    char path[128];
    snprintf(path, sizeof(path), "/v1/hosts/%s/drain", host);
    json_t *out = NULL;
    int rc = crl_client_request(c, on ? "POST" : "DELETE", path, NULL, &out, NULL, &err);
    crl_client_close(c);
    if (rc < 0)
        return crl_cli_fail(&err);
    printf("%s: %s\n", host, crl_cli_str(out, "state", "?"));
    json_decref(out);
    return 0;
}

static void show_hosts(json_t *answer)
{
    printf("%-16s %-9s %-28s %9s %10s %8s %8s %9s\n", "HOST", "STATE", "ADDRESS", "SANDBOXES",
           "FREE_MB", "CPUS", "SLOTS", "HEARD");
    size_t i;
    json_t *h;
    json_array_foreach(json_object_get(answer, "hosts"), i, h)
    {
        json_t *free_ = json_object_get(h, "free");
        json_t *age = json_object_get(h, "heartbeat_age_s");
        char heard[32] = "-";
        if (json_is_number(age))
            snprintf(heard, sizeof(heard), "%.1fs ago", json_number_value(age));
        printf("%-16s %-9s %-28s %9lld %10lld %8.2f %8lld %9s%s\n", crl_cli_str(h, "id", "?"),
               crl_cli_str(h, "state", "?"), crl_cli_str(h, "addr", "-"),
               json_integer_value(json_object_get(h, "sandboxes")),
               json_integer_value(json_object_get(free_, "memory_mb")),
               json_number_value(json_object_get(free_, "cpus")),
               json_integer_value(json_object_get(free_, "sandboxes")), heard,
               json_is_true(json_object_get(h, "self")) ? "  (this host)" : "");
    }
    json_t *cl = json_object_get(answer, "cluster");
    if (json_is_object(cl) && !json_is_true(json_object_get(cl, "member")))
        printf("this host is not a member now: %s\n", crl_cli_str(cl, "reason", "?"));
}

int crl_cmd_hosts(int argc, char **argv)
{
    bool as_json;
    int rc = crl_cli_read_flags(argc, argv, hosts_help, 0, NULL, &as_json, NULL);
    return rc >= 0 ? rc : crl_cli_show("/v1/hosts", as_json, show_hosts);
}

int crl_cmd_host(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "drain") == 0 || strcmp(argv[1], "undrain") == 0)) {
        if (argc != 3)
            return crl_cli_usage(argv[0], "%s takes one host id", argv[1]);
        return drain(argv[2], strcmp(argv[1], "drain") == 0);
    }
    bool as_json;
    int rc = crl_cli_read_flags(argc, argv, help, 0, NULL, &as_json, NULL);
    return rc >= 0 ? rc : crl_cli_show("/v1/host", as_json, show);
}
