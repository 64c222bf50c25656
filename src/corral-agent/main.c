/* corral-agent: the guest's PID 1 in a microVM, serving corrald over the
 * agent protocol (lib/agent/proto.h) on the virtio-serial port
 * "corral.agent".  Run as an ordinary process with --serve-fd N it serves
 * on fd N instead, with no mounts and no PID 1 duties: the tests drive it
 * over a socketpair without a VM.
 *
 *   corral-agent                          as the guest's /init (PID 1)
 *   corral-agent --serve-fd N [--root DIR] [--log-level L]
 *
 * --root: the directory FILE_GET and FILE_PUT resolve their paths in
 * ("/" by default); execs run in the agent's own root either way. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/util/log.h"
#include "agent.h"

static int usage(void)
{
    fprintf(stderr, "usage: corral-agent (as PID 1)\n"
                    "       corral-agent --systemd (a full system's service, started by its init)\n"
                    "       corral-agent --serve-fd N [--root DIR] [--log-level L]\n");
    return 64;
}

/* jansson seeds its hash tables from /dev/urandom at first use, and early
 * in a guest's boot (before CONFIG credits the host's seed) a read of
 * /dev/urandom waits for the kernel to gather jitter entropy: about 1 s
 * under TCG (Linux 5.18 on), which was the whole gap between the port
 * opening and HELLO.  The seed only spreads hash buckets; the JSON comes
 * from the host. */
static void seed_json(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    json_object_seed((size_t)ts.tv_nsec ^ ((size_t)ts.tv_sec << 20) ^ (size_t)getpid() ^ 1u);
}

/* A guest's agent: as PID 1 (a microVM's, and a full system's until it
 * hands the guest to its init), or as the full system's service that init
 * starts, which greets the host once the system is up and serves as PID 1
 * did, but for the root.  Either way the guest ends with it: on the
 * host's BYE, or on a failure (the host sees the guest end, with the
 * reason on the console). */
static int guest(bool pid1)
{
    crl_log_setup(CRL_LOG_INFO, CRL_LOG_TEXT, "corral-agent");
    seed_json();
    struct crl_err err = CRL_ERR_INIT;
    int port = pid1 ? crl_ga_init_boot(&err) : crl_ga_service_boot(&err);
    if (port >= 0) {
        struct crl_ga_opts o = {.fd = port, .pid1 = pid1, .service = !pid1, .root = "/"};
        if (crl_ga_serve(&o, &err) == 0) {
            crl_info(NULL, "the host said BYE: powering off");
            crl_ga_power_off();
        }
    }
    crl_error(NULL, "%s: powering off", err.msg);
    crl_ga_power_off();
}

int main(int argc, char **argv)
{
    if (getpid() == 1)
        return guest(true);
    if (argc == 2 && strcmp(argv[1], "--systemd") == 0)
        return guest(false);
    struct crl_ga_opts o = {.fd = -1, .root = "/"};
    enum crl_log_level level = CRL_LOG_WARN;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--serve-fd") == 0 && v) {
            char *end;
            errno = 0;
            long fd = strtol(v, &end, 10);
            if (errno || *end || end == v || fd < 0 || fd > 1 << 20) {
                fprintf(stderr, "corral-agent: --serve-fd %s is not a descriptor\n", v);
                return 64;
            }
            o.fd = (int)fd;
        } else if (strcmp(argv[i], "--root") == 0 && v) {
            o.root = v;
        } else if (strcmp(argv[i], "--log-level") == 0 && v) {
            if (crl_log_parse_level(v, &level) < 0) {
                fprintf(stderr, "corral-agent: --log-level %s: error, warn, info or debug\n", v);
                return 64;
            }
        } else {
            return usage();
        }
        i++;
    }
    if (o.fd < 0)
        return usage();
    crl_log_setup(level, CRL_LOG_TEXT, "corral-agent");
    struct crl_err err = CRL_ERR_INIT;
    if (crl_ga_serve(&o, &err) < 0) {
        fprintf(stderr, "corral-agent: %s\n", err.msg);
        return 1;
    }
    return 0;
}
