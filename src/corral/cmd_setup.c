/* corral setup microvm: fetch and build what the microvm backend boots,
 * the guest kernel and an initramfs around corral-agent, into the
 * directory corrald reads them from by default (<state>/microvm).  The
 * work is scripts/microvm-guest.sh's, the one place that knows how (make
 * microvm-guest runs it too); this command finds it and corral-agent next
 * to corral and runs it in our place. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/util/fdio.h"
#include "cli.h"

static const char help[] =
    "usage: corral setup microvm [--state DIR | --out DIR] [--cache DIR] [--agent FILE]\n"
    "\n"
    "Fetch Debian's linux-image-cloud-amd64 with apt-get download (unpacked into\n"
    "a cache, never installed as this host's kernel), build an initramfs with\n"
    "the modules the guest needs and corral-agent as its /init, and put both\n"
    "where corrald's microvm backend finds them: <state>/microvm/vmlinuz and\n"
    "<state>/microvm/initrd.cpio.  Run it again after an upgrade of corral or\n"
    "of the kernel package; corrald reads the files when it starts.  Needs root\n"
    "(apt-get).\n"
    "\n"
    "  --state DIR   corrald's state directory (default /var/lib/corral)\n"
    "  --out DIR     put the files in DIR instead (then start corrald with\n"
    "                --microvm-kernel DIR/vmlinuz --microvm-initrd DIR/initrd.cpio)\n"
    "  --cache DIR   where the downloaded kernel is kept (default\n"
    "                $XDG_CACHE_HOME/corral/microvm, else ~/.cache/corral/microvm)\n"
    "  --agent FILE  the guest agent (default: corral-agent next to corral)\n"
    "\n"
    "The scripts come from $CORRAL_LIBEXEC, else ../scripts next to corral.\n";

int crl_cmd_setup(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return argc < 2 ? crl_cli_usage("setup", "what to set up? (microvm)") : crl_cli_help(help);
    if (strcmp(argv[1], "microvm") != 0)
        return crl_cli_usage("setup", "unknown component '%s' (microvm)", argv[1]);
    argc--, argv++;
    const char *state = "/var/lib/corral", *out = NULL, *cache = NULL, *agent = NULL;
    static const struct option opts[] = {
        {"state", required_argument, 0, 's'}, {"out", required_argument, 0, 'o'},
        {"cache", required_argument, 0, 'c'}, {"agent", required_argument, 0, 'a'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
        switch (c) {
        case 's': state = optarg; break;
        case 'o': out = optarg; break;
        case 'c': cache = optarg; break;
        case 'a': agent = optarg; break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option("setup microvm", argv, c);
        }
    }
    if (optind < argc)
        return crl_cli_usage("setup microvm", "unexpected argument '%s'", argv[optind]);

    struct crl_err err = CRL_ERR_INIT;
    char script[PATH_MAX], agent_path[PATH_MAX], out_dir[PATH_MAX];
    const char *libexec = getenv("CORRAL_LIBEXEC");
    if (libexec && *libexec) {
        if (snprintf(script, sizeof(script), "%s/microvm-guest.sh", libexec) >= (int)sizeof(script))
            return crl_cli_failf("setup microvm: $CORRAL_LIBEXEC is too long");
    } else if (crl_sibling_path("../scripts/microvm-guest.sh", script, sizeof(script), &err) < 0) {
        return crl_cli_fail(&err);
    }
    if (access(script, X_OK) < 0)
        return crl_cli_failf("setup microvm: %s: %s (set $CORRAL_LIBEXEC to the directory "
                             "of microvm-guest.sh)",
                             script, strerror(errno));
    if (!agent) {
        if (crl_sibling_path("corral-agent", agent_path, sizeof(agent_path), &err) < 0)
            return crl_cli_fail(&err);
        agent = agent_path;
    }
    if (access(agent, X_OK) < 0)
        return crl_cli_failf("setup microvm: the guest agent %s: %s (make builds it; or --agent)",
                             agent, strerror(errno));
    if (!out) {
        if (snprintf(out_dir, sizeof(out_dir), "%s/microvm", state) >= (int)sizeof(out_dir))
            return crl_cli_failf("setup microvm: --state is too long");
        out = out_dir;
    }
    char *args[] = {script,        (char *)"--agent",
                    (char *)agent, (char *)"--out",
                    (char *)out,   cache ? (char *)"--cache" : NULL,
                    (char *)cache, NULL};
    execv(script, args);
    return crl_cli_failf("setup microvm: running %s: %s", script, strerror(errno));
}
