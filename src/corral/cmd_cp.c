/* corral cp: files and directories between here and a sandbox. */
#include <stdio.h>
#include <string.h>

#include "../../lib/client/copy.h"
#include "cli.h"

static const char help[] =
    "usage: corral cp [OPTIONS] SRC DST\n"
    "\n"
    "Copy between this machine and a sandbox; one side is ID:/absolute/path,\n"
    "the other a local path or '-' (stdin or stdout).\n"
    "\n"
    "  corral cp FILE ID:/path      the file becomes /path (or /path/FILE when\n"
    "                               /path ends with '/'), mode kept\n"
    "  corral cp DIR ID:/path       DIR's contents go into the directory /path\n"
    "                               (created if missing), owned by root\n"
    "  corral cp - ID:/path         stdin becomes the file /path\n"
    "  corral cp ID:/file LOCAL     the file becomes LOCAL, or LOCAL/file when\n"
    "                               LOCAL is a directory (written aside and\n"
    "                               renamed into place once complete)\n"
    "  corral cp ID:/dir LOCAL      /dir's contents go into the directory LOCAL\n"
    "                               (created if missing)\n"
    "  corral cp ID:/path -         the file, or the directory as tar, to stdout\n"
    "\n"
    "A local path with a ':' in it is written ./like:this.  Only files,\n"
    "directories and symlinks are copied.  Files copied out lose their setuid,\n"
    "setgid and sticky bits.\n";

/* "ID:/path" into id and *path; false for a local path. */
static bool split_remote(const char *arg, char *id, size_t cap, const char **path)
{
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg || (size_t)(colon - arg) >= cap || arg[0] == '.' || arg[0] == '/')
        return false;
    memcpy(id, arg, (size_t)(colon - arg));
    id[colon - arg] = 0;
    if (!crl_client_id_ok(id))
        return false;
    *path = colon + 1;
    return true;
}

int crl_cmd_cp(int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h')
            return crl_cli_help(help);
        return crl_cli_bad_option(argv[0], argv, c);
    }
    if (argc - optind != 2)
        return crl_cli_usage(argv[0], "needs SRC and DST");
    const char *src = argv[optind], *dst = argv[optind + 1];
    char src_id[64], dst_id[64];
    const char *src_path = NULL, *dst_path = NULL;
    bool src_remote = split_remote(src, src_id, sizeof(src_id), &src_path);
    bool dst_remote = split_remote(dst, dst_id, sizeof(dst_id), &dst_path);
    if (src_remote && dst_remote)
        return crl_cli_usage(argv[0], "both sides are in sandboxes; copy through a local "
                                      "directory instead");
    if (!src_remote && !dst_remote)
        return crl_cli_usage(argv[0], "one side must be ID:/path");
    const char *rpath = src_remote ? src_path : dst_path;
    if (rpath[0] != '/')
        return crl_cli_usage(argv[0],
                             "'%s': a path in a sandbox is absolute (write ./%s for a "
                             "local path)",
                             src_remote ? src : dst, src_remote ? src : dst);

    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    int rc;
    if (src_remote) {
        /* Ctrl-C stops the transfer, so a file half written is removed,
         * not left behind by our death.  An upload leaves nothing here to
         * remove: its request, cut short, fails in corrald. */
        if (strcmp(dst, "-") != 0)
            crl_cli_catch_signals(cl);
        rc = crl_copy_from_sandbox(cl, src_id, src_path, dst, &err);
    } else {
        rc = crl_copy_to_sandbox(cl, src, dst_id, dst_path, &err);
    }
    if (rc < 0 && crl_cli_interrupted)
        return 128 + crl_cli_interrupted;
    return rc < 0 ? crl_cli_fail(&err) : 0;
}
