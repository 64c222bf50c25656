/* corral inspect: one sandbox's state, limits and usage. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char help[] =
    "usage: corral inspect [--json] ID\n"
    "\n"
    "Show a sandbox: state, spec, limits and usage (live while it runs, final\n"
    "once it has ended).\n"
    "\n"
    "  --json              print corrald's answer as JSON\n";

static void show(json_t *sb)
{
    json_t *spec = json_object_get(sb, "spec");
    json_t *res = json_object_get(spec, "resources");
    json_t *use = json_object_get(sb, "usage");
    char a[32], b[32], d[32], l[32];
    printf("id:        %s\n", crl_cli_str(sb, "id", "?"));
    printf("state:     %s", crl_cli_str(sb, "state", "?"));
    if (json_object_get(sb, "end_reason"))
        printf(" (%s)", crl_cli_str(sb, "end_reason", "?"));
    printf("\n");
    if (json_object_get(sb, "message"))
        printf("message:   %s\n", crl_cli_str(sb, "message", ""));
    printf("backend:   %s\nimage:     %s\n", crl_cli_str(sb, "backend", "?"),
           crl_cli_str(sb, "image", "?"));
    printf("created:   %s\n", crl_cli_str(sb, "created_at", "-"));
    printf("ready:     %s\n", crl_cli_str(sb, "ready_at", "-"));
    printf("ended:     %s\n", crl_cli_str(sb, "ended_at", "-"));
    printf("expires:   %s\n", crl_cli_str(sb, "expires_at", "-"));
    printf("limits:    %g CPU, %lld MiB memory, %lld pids, %lld MiB disk\n",
           json_number_value(json_object_get(res, "cpus")),
           json_integer_value(json_object_get(res, "memory_mb")),
           json_integer_value(json_object_get(res, "pids")),
           json_integer_value(json_object_get(res, "disk_mb")));
    printf("ttl:       %llds, idle %llds\n", json_integer_value(json_object_get(spec, "ttl_s")),
           json_integer_value(json_object_get(spec, "idle_ttl_s")));
    printf("labels:   ");
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(sb, "labels"), k, v)
        printf(" %s=%s", k, json_string_value(v));
    printf(json_object_size(json_object_get(sb, "labels")) ? "\n" : " -\n");
    printf(
        "usage:     %.2f CPU s, memory %s (peak %s), %lld pids, disk %s of %s, %lld OOM kills\n",
        json_number_value(json_object_get(use, "cpu_s")),
        crl_cli_bytes(json_number_value(json_object_get(use, "memory_bytes")), a, sizeof(a)),
        crl_cli_bytes(json_number_value(json_object_get(use, "memory_peak_bytes")), b, sizeof(b)),
        json_integer_value(json_object_get(use, "pids")),
        crl_cli_bytes(json_number_value(json_object_get(use, "disk_bytes")), d, sizeof(d)),
        crl_cli_bytes(json_number_value(json_object_get(use, "disk_limit_bytes")), l, sizeof(l)),
        json_integer_value(json_object_get(use, "oom_kills")));
    printf("sessions:  %lld\n", json_integer_value(json_object_get(sb, "sessions")));
    json_t *ck = json_object_get(sb, "checkpoints");
    if (json_object_get(ck, "trajectory"))
        printf("trajectory: %s at step %lld, %s (%lld steps replayed, %lld recorded)%s%s\n",
               crl_cli_str(ck, "trajectory", "?"), json_integer_value(json_object_get(ck, "step")),
               json_is_true(json_object_get(ck, "live")) ? "live" : "fast-forwarding",
               json_integer_value(json_object_get(ck, "steps_replayed")),
               json_integer_value(json_object_get(ck, "steps_recorded")),
               json_object_get(ck, "broken") ? ": " : "", crl_cli_str(ck, "broken", ""));
    if (ck)
        printf("checkpoint: %s (mode %s)\n", crl_cli_str(ck, "state", "-"),
               crl_cli_str(ck, "mode", "?"));
    json_t *vm = json_object_get(sb, "microvm");
    if (vm) {
        printf("microvm:   %s, %s in %.0f ms, kernel %s, QEMU pid %lld\n",
               crl_cli_str(vm, "accel", "?"), crl_cli_str(vm, "start", "?"),
               json_number_value(json_object_get(vm, "ready_ms")), crl_cli_str(vm, "kernel", "?"),
               json_integer_value(json_object_get(vm, "qemu_pid")));
        if (json_object_get(vm, "warning"))
            printf("warning:   %s\n", crl_cli_str(vm, "warning", ""));
    }
}

int crl_cmd_inspect(int argc, char **argv)
{
    bool as_json;
    const char *id = NULL;
    int rc = crl_cli_read_flags(argc, argv, help, 1, "a sandbox id", &as_json, &id);
    if (rc >= 0)
        return rc;
    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *sb = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_inspect(cl, id, &sb, &err) < 0)
        return crl_cli_fail(&err);
    if (as_json)
        crl_cli_print_json(sb);
    else
        show(sb);
    return 0;
}
