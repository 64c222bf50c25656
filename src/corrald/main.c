/* corrald: the Corral host daemon.  A thin front end over libcorral: parse
 * flags, open the host, serve the API on the host's loop until SIGTERM (or
 * SIGUSR2: a handover, see on_signal). */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/api/api.h"
#include "../../lib/backend/container/container.h"
#include "../../lib/backend/function/function.h"
#include "../../lib/backend/microvm/microvm.h"
#include "../../lib/core/backend.h"
#include "../../lib/core/host.h"
#include "../../lib/core/pool.h"
#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../../lib/util/log.h"

#define MAX_IMAGES_FROM 16
#define MAX_POOLS 64

enum {
    OPT_ADMISSION = 1100,
    OPT_POOL,
    OPT_VOLUME_DIR,
    OPT_CLUSTER,
    OPT_ADVERTISE,
    OPT_LEASE,
    OPT_SHARED
};

static int set_pools(struct crl_host *h, const char *const *flags, size_t n, struct crl_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (crl_pool_set_flag(h, flags[i], err) < 0)
            return -1;
    return 0;
}

static const char usage[] =
    "usage: corrald [options]\n"
    "  --state DIR            state directory (default /var/lib/corral)\n"
    "  --socket PATH          unix socket, root only (default /run/corral/corrald.sock)\n"
    "  --listen HOST:PORT     also listen on TCP (loopback unless --allow-remote)\n"
    "  --token-file FILE      bearer token the TCP listener requires\n"
    "  --allow-remote         allow --listen on a non-loopback address\n"
    "  --cluster URLS         join the cluster whose etcd members are URLS\n"
    "                         (http://HOST:PORT,...): any host answers for all\n"
    "  --advertise URL        where the cluster's hosts reach this one's API\n"
    "                         (http://ADDR:PORT: --listen's, with --token-file's token)\n"
    "  --cluster-lease-s N    a host silent this long is lost (default 10)\n"
    "  --shared-dir DIR       trajectories and checkpoints in DIR/trajectories, which\n"
    "                         every host of the cluster sees (NFS, CephFS, ...): a\n"
    "                         trajectory resumes on any host\n"
    "  --image-store DIR      the image store (default STATE/images)\n"
    "  --volume-dir DIR       named volumes (default STATE/volumes)\n"
    "  --images-from DIR      also use the images of the store DIR, read-only (repeatable)\n"
    "  --image-max-layer-mb N an imported layer may expand to N MiB (default 16384)\n"
    "  --image-max-mb N       an import may expand and spool N MiB in all (default 65536)\n"
    "  --busybox PATH         static busybox for the busybox image (default /bin/busybox)\n"
    "  --admission measured|reserved\n"
    "                         measured (default): admit while the host's available memory\n"
    "                         stays above --reserve-mb, limits enforced but not reserved;\n"
    "                         reserved: the sandboxes' limits must fit the host\n"
    "  --max-sandboxes N      admission: at most N live sandboxes (default 32768)\n"
    "  --pool NAME:MIN:MAX[:SPEC]\n"
    "                         keep MIN to MAX ready sandboxes of SPEC (a create's JSON\n"
    "                         body; default {}) for creates that match it (repeatable;\n"
    "                         also PUT /v1/pools/NAME)\n"
    "  --overcommit X         reserved admission: memory limits up to X times the host's\n"
    "                         (default 1; implies --admission reserved)\n"
    "  --cpu-overcommit X     reserved admission: CPU limits up to X times the host's CPUs\n"
    "                         (default 16; implies --admission reserved)\n"
    "  --reserve-mb N         admission: memory kept for the host (default 512 or 5% of\n"
    "                         the host's memory, whichever is more)\n"
    "  --cgroup auto|v1|v2    cgroup hierarchy to use (default auto)\n"
    "  --cgroup-root DIR      where cgroups are mounted (default /sys/fs/cgroup)\n"
    "  --cgroup-parent NAME   corrald's cgroup (default corral)\n"
    "  --cgroup-no-limits     accept a cgroup v2 tree without the memory and pids\n"
    "                         controllers: sandboxes then run unlimited (for tests only)\n"
    "  --uid-base N           first host uid of sandbox slot 0 (default 1073741824)\n"
    "  --uid-slots N          sandbox slots of 65536 ids each (default 32768)\n"
    "  --spawner PATH         corral-spawner binary (default: next to corrald)\n"
    "  --spawners N           spawner processes (default: CPUs, at most 4)\n"
    "  --network-range CIDR   sandboxes' addresses, a /30 each (default 10.213.0.0/16)\n"
    "  --dns-upstream A[,B]   what the sandboxes' resolver asks (default: the IPv4\n"
    "                         nameservers of the host's /etc/resolv.conf)\n"
    "  --network-max-conns N  connections a sandbox may have open at once (default 1024)\n"
    "  --resolver-port N      UDP port of the sandboxes' resolver; their DNS is\n"
    "                         redirected there (default 10053)\n"
    "  --service-port N       TCP port where corrald answers the sandboxes' services;\n"
    "                         their connections to a service are redirected there\n"
    "                         (default 10054)\n"
    "  --function-pool N      function sandboxes' keepers made ahead, per runtime: so many\n"
    "                         creates in a burst find their namespaces ready (default 4)\n"
    "  --microvm-kernel FILE  the microvm guests' kernel (default <state>/microvm/vmlinuz)\n"
    "  --microvm-initrd FILE  their initramfs, with corral-agent as /init (default\n"
    "                         <state>/microvm/initrd.cpio; `corral setup microvm` makes both)\n"
    "  --microvm-accel auto|kvm|tcg  how guests run: kvm where the CPU has vmx or svm\n"
    "                         and /dev/kvm opens, else tcg (emulation); default auto\n"
    "  --microvm-cold         boot every microvm guest cold, no template (to measure\n"
    "                         what templates save, or to rule them out)\n"
    "  --template-cache DIR   keep saved microvm and vm templates in DIR for the next\n"
    "                         corrald (default <state>/templates; \"\" for none)\n"
    "  --qemu PATH            qemu-system-x86_64 (default /usr/bin/qemu-system-x86_64)\n"
    "  --tombstone-s N        keep destroyed sandboxes visible N seconds (default 600)\n"
    "  --max-tombstones N     and at most N of them, oldest forgotten first (default 10000)\n"
    "  --host-id ID           this host's id in sandbox ids (default: from the hostname)\n"
    "  --max-body-mb N        largest JSON request body (default 16)\n"
    "  --checkpoint-gc-s N    every N s, remove the checkpoint blobs no trajectory or\n"
    "                         sandbox refers to and older than N s (default 3600; 0: never)\n"
    "  --log-format text|json, --log-level error|warn|info|debug\n"
    "signals: SIGTERM or SIGINT destroys every sandbox and exits; SIGUSR2 exits leaving\n"
    "the sandboxes the next corrald on this --state can adopt running (an upgrade)\n";

static int parse_uint(const char *flag, const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || !*s || *end || v > max) {
        fprintf(stderr, "corrald: %s needs a number up to %lu, not '%s'\n", flag, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

static char *read_token(const char *path)
{
    char *buf = NULL;
    size_t len;
    struct crl_err err = CRL_ERR_INIT;
    if (crl_read_file_alloc(path, 4096, &buf, &len, &err) < 0) {
        fprintf(stderr, "corrald: --token-file: %s\n", err.msg);
        return NULL;
    }
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
        buf[--len] = 0;
    if (len < 16) {
        fprintf(stderr, "corrald: the token in %s is shorter than 16 characters\n", path);
        free(buf);
        return NULL;
    }
    return buf;
}

static struct crl_host *host; /* for a handover's signal */

/* SIGTERM and SIGINT: destroy everything and exit.  SIGUSR2: a handover
 * (an upgrade): exit leaving every sandbox the next corrald can adopt
 * running. */
static void on_signal(struct crl_watch *w, uint32_t ev)
{
    struct signalfd_siginfo si;
    if (read(w->fd, &si, sizeof(si)) != sizeof(si))
        return;
    bool handover = si.ssi_signo == SIGUSR2;
    crl_info(NULL, "signal %s: %s", strsignal((int)si.ssi_signo),
             handover ? "handing over: exiting, sandboxes run on for the next corrald"
                      : "shutting down");
    if (handover)
        host->handover = true;
    crl_loop_stop(w->data);
}

int main(int argc, char **argv)
{
    /* Whatever we inherited beyond stdio never reaches a spawner or a
     * sandbox: close-on-exec for all of it. */
    if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) < 0 && errno != ENOSYS)
        fprintf(stderr, "corrald: close_range: %s\n", strerror(errno));
    /* The backends this daemon serves; a spec naming another is refused (501). */
    static const struct crl_backend_ops *const backends[] = {
        &crl_container_backend, &crl_function_backend, &crl_microvm_backend, &crl_vm_backend};
    struct crl_host_config hc;
    crl_host_config_defaults(&hc);
    hc.backends = backends;
    hc.n_backends = CRL_ARRAY_SIZE(backends);
    struct crl_api_config ac = {.unix_path = "/run/corral/corrald.sock", .checkpoint_gc_s = 3600};
    const char *images_from[MAX_IMAGES_FROM];
    const char *pools[MAX_POOLS];
    size_t n_pools = 0;
    size_t n_from = 0;
    const char *token_file = NULL;
    enum crl_log_level level = CRL_LOG_INFO;
    enum crl_log_format format = CRL_LOG_TEXT;
    unsigned long v;
    bool admission_given = false;
    static const struct option opts[] = {{"state", required_argument, 0, 's'},
                                         {"socket", required_argument, 0, 'S'},
                                         {"listen", required_argument, 0, 'l'},
                                         {"token-file", required_argument, 0, 't'},
                                         {"allow-remote", no_argument, 0, 'R'},
                                         {"images-from", required_argument, 0, 'i'},
                                         {"image-store", required_argument, 0, 'I'},
                                         {"volume-dir", required_argument, 0, OPT_VOLUME_DIR},
                                         {"cluster", required_argument, 0, OPT_CLUSTER},
                                         {"advertise", required_argument, 0, OPT_ADVERTISE},
                                         {"cluster-lease-s", required_argument, 0, OPT_LEASE},
                                         {"shared-dir", required_argument, 0, OPT_SHARED},
                                         {"image-max-layer-mb", required_argument, 0, 'y'},
                                         {"image-max-mb", required_argument, 0, 'Y'},
                                         {"busybox", required_argument, 0, 'b'},
                                         {"admission", required_argument, 0, OPT_ADMISSION},
                                         {"pool", required_argument, 0, OPT_POOL},
                                         {"max-sandboxes", required_argument, 0, 'm'},
                                         {"overcommit", required_argument, 0, 'o'},
                                         {"reserve-mb", required_argument, 0, 'r'},
                                         {"cpu-overcommit", required_argument, 0, 'O'},
                                         {"cgroup", required_argument, 0, 'c'},
                                         {"cgroup-root", required_argument, 0, 'C'},
                                         {"cgroup-no-limits", no_argument, 0, 'N'},
                                         {"cgroup-parent", required_argument, 0, 'P'},
                                         {"uid-base", required_argument, 0, 'u'},
                                         {"uid-slots", required_argument, 0, 'U'},
                                         {"spawner", required_argument, 0, 'x'},
                                         {"spawners", required_argument, 0, 'X'},
                                         {"function-pool", required_argument, 0, 'K'},
                                         {"microvm-kernel", required_argument, 0, 1001},
                                         {"microvm-initrd", required_argument, 0, 1002},
                                         {"microvm-accel", required_argument, 0, 1003},
                                         {"qemu", required_argument, 0, 1004},
                                         {"microvm-cold", no_argument, 0, 1005},
                                         {"template-cache", required_argument, 0, 1006},
                                         {"network-range", required_argument, 0, 'n'},
                                         {"dns-upstream", required_argument, 0, 'D'},
                                         {"resolver-port", required_argument, 0, 'E'},
                                         {"service-port", required_argument, 0, 'J'},
                                         {"network-max-conns", required_argument, 0, 'Q'},
                                         {"tombstone-s", required_argument, 0, 'T'},
                                         {"max-tombstones", required_argument, 0, 'M'},
                                         {"host-id", required_argument, 0, 'H'},
                                         {"max-body-mb", required_argument, 0, 'B'},
                                         {"checkpoint-gc-s", required_argument, 0, 'G'},
                                         {"log-format", required_argument, 0, 'F'},
                                         {"log-level", required_argument, 0, 'L'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': hc.state_dir = optarg; break;
        case 'G':
            if (parse_uint("--checkpoint-gc-s", optarg, 10u * 365 * 86400, &v) < 0)
                return 2;
            ac.checkpoint_gc_s = (unsigned)v;
            break;
        case 'S': ac.unix_path = *optarg ? optarg : NULL; break;
        case 'l': ac.tcp_listen = optarg; break;
        case 't': token_file = optarg; break;
        case 'R': ac.allow_remote = true; break;
        case 'i':
            if (n_from == MAX_IMAGES_FROM) {
                fprintf(stderr, "corrald: at most %d --images-from\n", MAX_IMAGES_FROM);
                return 2;
            }
            images_from[n_from++] = optarg;
            break;
        case 'I': hc.images_dir = optarg; break;
        case OPT_VOLUME_DIR: hc.volume_dir = optarg; break;
        case OPT_CLUSTER: ac.cluster_etcd = optarg; break;
        case OPT_ADVERTISE: ac.advertise = optarg; break;
        case OPT_SHARED: ac.shared_dir = hc.shared_dir = optarg; break;
        case OPT_LEASE:
            if (parse_uint("--cluster-lease-s", optarg, 3600, &v) < 0 || v < 2)
                return 2;
            ac.cluster_lease_s = (unsigned)v;
            break;
        case 'y':
        case 'Y':
            if (parse_uint(c == 'y' ? "--image-max-layer-mb" : "--image-max-mb", optarg, 1ul << 30,
                           &v) < 0)
                return 2;
            if (v == 0) {
                fprintf(stderr, "corrald: an image size limit must be at least 1 MiB\n");
                return 2;
            }
            *(c == 'y' ? &hc.image_limits.max_layer_bytes : &hc.image_limits.max_total_bytes) =
                (uint64_t)v << 20;
            break;
        case 'b': hc.busybox_bin = optarg; break;
        case 'm':
            if (parse_uint("--max-sandboxes", optarg, 1000000, &v) < 0)
                return 2;
            hc.max_sandboxes = (unsigned)v;
            break;
        case 'o':
        case 'O': {
            char *end;
            double x = strtod(optarg, &end);
            if (*end || !(x > 0 && x <= 1000)) {
                fprintf(stderr, "corrald: --%sovercommit needs a number in (0, 1000]\n",
                        c == 'O' ? "cpu-" : "");
                return 2;
            }
            *(c == 'o' ? &hc.overcommit : &hc.cpu_overcommit) = x;
            if (!admission_given)
                hc.admission = CRL_ADMIT_RESERVED;
            break;
        }
        case OPT_POOL:
            if (n_pools == MAX_POOLS) {
                fprintf(stderr, "corrald: at most %d --pool\n", MAX_POOLS);
                return 2;
            }
            pools[n_pools++] = optarg;
            break;
        case OPT_ADMISSION:
            if (strcmp(optarg, "measured") == 0)
                hc.admission = CRL_ADMIT_MEASURED;
            else if (strcmp(optarg, "reserved") == 0)
                hc.admission = CRL_ADMIT_RESERVED;
            else {
                fprintf(stderr, "corrald: --admission: '%s' is not measured or reserved\n", optarg);
                return 2;
            }
            admission_given = true;
            break;
        case 'r':
            if (parse_uint("--reserve-mb", optarg, 1 << 30, &v) < 0)
                return 2;
            hc.reserve_mb = (unsigned)v;
            break;
        case 'c':
            if (strcmp(optarg, "auto") == 0)
                hc.cgroup_version = CRL_CGROUP_AUTO;
            else if (strcmp(optarg, "v1") == 0)
                hc.cgroup_version = CRL_CGROUP_V1;
            else if (strcmp(optarg, "v2") == 0)
                hc.cgroup_version = CRL_CGROUP_V2;
            else {
                fprintf(stderr, "corrald: --cgroup takes auto, v1 or v2\n");
                return 2;
            }
            break;
        case 'C': hc.cgroup_root = optarg; break;
        case 'N': hc.cgroup_no_limits = true; break;
        case 'P':
            if (!*optarg || strlen(optarg) > 64 ||
                strspn(optarg,
                       "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
                    strlen(optarg) ||
                optarg[0] == '.') {
                fprintf(stderr, "corrald: --cgroup-parent is 1-64 of [A-Za-z0-9._-]\n");
                return 2;
            }
            hc.cgroup_parent = optarg;
            break;
        case 'u':
            if (parse_uint("--uid-base", optarg, 4000000000ul, &v) < 0)
                return 2;
            hc.uid_base = (uint32_t)v;
            break;
        case 'U':
            if (parse_uint("--uid-slots", optarg, 65535, &v) < 0 || v == 0)
                return 2;
            hc.uid_slots = (uint32_t)v;
            break;
        case 'x': hc.spawner_path = optarg; break;
        case 'X':
            if (parse_uint("--spawners", optarg, 16, &v) < 0)
                return 2;
            hc.spawners = (unsigned)v;
            break;
        case 'n': {
            struct crl_vnet_config vc;
            struct crl_err e = CRL_ERR_INIT;
            if (crl_vnet_parse_range(optarg, &vc, &e) < 0) {
                fprintf(stderr, "corrald: --network-range: %s\n", e.msg);
                return 2;
            }
            hc.network_range = optarg;
            break;
        }
        case 'Q':
            if (parse_uint("--network-max-conns", optarg, 1u << 20, &v) < 0 || v == 0)
                return 2;
            hc.network_max_conns = (unsigned)v;
            break;
        case 'E':
            if (parse_uint("--resolver-port", optarg, 65535, &v) < 0 || v == 0)
                return 2;
            hc.resolver_port = (uint16_t)v;
            break;
        case 'J':
            if (parse_uint("--service-port", optarg, 65535, &v) < 0 || v == 0)
                return 2;
            hc.service_port = (uint16_t)v;
            break;
        case 'D': {
            static char list[256];
            snprintf(list, sizeof(list), "%s", optarg);
            for (char *p = list; *p; p++)
                if (*p == ',')
                    *p = ' ';
            char copy[256], *save = NULL;
            snprintf(copy, sizeof(copy), "%s", list);
            for (char *a = strtok_r(copy, " ", &save); a; a = strtok_r(NULL, " ", &save)) {
                struct in_addr in;
                if (inet_pton(AF_INET, a, &in) != 1) {
                    fprintf(stderr, "corrald: --dns-upstream: '%s' is not an IPv4 address\n", a);
                    return 2;
                }
            }
            hc.dns_upstream = list;
            break;
        }
        case 'K':
            if (parse_uint("--function-pool", optarg, 4096, &v) < 0)
                return 2;
            hc.function_pool = (unsigned)v;
            break;
        case 1001: hc.microvm_kernel = optarg; break;
        case 1002: hc.microvm_initrd = optarg; break;
        case 1003:
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "kvm") != 0 &&
                strcmp(optarg, "tcg") != 0) {
                fprintf(stderr, "corrald: --microvm-accel is auto, kvm or tcg, not '%s'\n", optarg);
                return 2;
            }
            hc.microvm_accel = optarg;
            break;
        case 1004: hc.qemu_path = optarg; break;
        case 1005: hc.microvm_cold = true; break;
        case 1006: hc.template_cache = optarg; break;
        case 'T':
            if (parse_uint("--tombstone-s", optarg, 86400 * 30, &v) < 0)
                return 2;
            hc.tombstone_s = (double)v;
            break;
        case 'M':
            if (parse_uint("--max-tombstones", optarg, 10000000, &v) < 0)
                return 2;
            hc.max_tombstones = (unsigned)v;
            break;
        case 'H':
            if (strlen(optarg) == 0 || strlen(optarg) >= sizeof(hc.host_id) ||
                strspn(optarg, "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(optarg)) {
                fprintf(stderr, "corrald: --host-id is 1-15 of [a-z0-9]\n");
                return 2;
            }
            snprintf(hc.host_id, sizeof(hc.host_id), "%s", optarg);
            break;
        case 'B':
            if (parse_uint("--max-body-mb", optarg, 1024, &v) < 0 || v == 0)
                return 2;
            ac.max_body = v << 20;
            break;
        case 'F':
            if (crl_log_parse_format(optarg, &format) < 0) {
                fprintf(stderr, "corrald: --log-format takes text or json\n");
                return 2;
            }
            break;
        case 'L':
            if (crl_log_parse_level(optarg, &level) < 0) {
                fprintf(stderr, "corrald: --log-level takes error, warn, info or debug\n");
                return 2;
            }
            break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "corrald: unexpected argument '%s'\n%s", argv[optind], usage);
        return 2;
    }
    crl_log_setup(level, format, "corrald");
    if (geteuid() != 0) {
        crl_error(NULL, "corrald must run as root (it creates namespaces and cgroups)");
        return 1;
    }
    if (ac.cluster_etcd && (!ac.advertise || !ac.tcp_listen)) {
        crl_error(NULL, "--cluster needs --listen and --advertise: the other hosts call this one");
        return 2;
    }
    if (ac.advertise && !ac.cluster_etcd) {
        crl_error(NULL, "--advertise is for --cluster");
        return 2;
    }
    if (ac.tcp_listen && !token_file) {
        crl_error(NULL, "--listen needs --token-file: the TCP listener always requires a token");
        return 2;
    }
    cleanup_free char *token = NULL;
    if (token_file && !(token = read_token(token_file)))
        return 2;
    ac.token = token;
    hc.images_from = images_from;
    hc.n_images_from = n_from;

    /* Our memory holds the API token: no core dumps, no ptrace, ever. */
    prctl(PR_SET_DUMPABLE, 0);
    umask(022);
    signal(SIGPIPE, SIG_IGN);
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
        nofile.rlim_cur = nofile.rlim_max = 1 << 20;
        if (setrlimit(RLIMIT_NOFILE, &nofile) < 0) {
            getrlimit(RLIMIT_NOFILE, &nofile);
            nofile.rlim_cur = nofile.rlim_max;
            setrlimit(RLIMIT_NOFILE, &nofile);
        }
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGUSR2);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

    struct crl_loop *loop = crl_loop_new();
    struct crl_err err = CRL_ERR_INIT;
    struct crl_api *api = NULL;
    struct crl_watch sw;
    if (!loop || sfd < 0) {
        crl_error(NULL, "event loop: %s", strerror(errno));
        return 1;
    }
    if (crl_host_open(&hc, loop, &host, &err) < 0 || set_pools(host, pools, n_pools, &err) < 0 ||
        crl_api_start(host, &ac, &api, &err) < 0) {
        crl_error(NULL, "%s", err.msg);
        crl_host_close(host);
        return 1;
    }
    crl_watch_start(loop, &sw, sfd, EPOLLIN, on_signal, loop);
    if (ac.tcp_listen)
        crl_info(NULL, "corrald ready: unix %s, tcp %.*s:%u (token required)",
                 ac.unix_path ? ac.unix_path : "-", (int)strcspn(ac.tcp_listen, ":"), ac.tcp_listen,
                 crl_api_tcp_port(api));
    else
        crl_info(NULL, "corrald ready: unix %s", ac.unix_path ? ac.unix_path : "-");
    int rc = crl_loop_run(loop) < 0 ? 1 : 0;
    crl_watch_stop(loop, &sw);
    crl_api_stop(api);
    crl_host_close(host);
    crl_loop_free(loop);
    close(sfd);
    crl_info(NULL, "corrald stopped");
    return rc;
}
