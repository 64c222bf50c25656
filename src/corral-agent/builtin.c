/* What the agent runs itself instead of a program, for the host's files
 * API: directories as tar streams, out of and into the guest.  The host
 * asks with an EXEC whose argv[0] is a builtin's name; the child runs it
 * after taking the EXEC's uid, gid and cwd, as a program would, so a
 * transfer is charged to and limited like any process of the guest.
 *
 *   corral:tar-out DIR   the tree under DIR as a pax tar on stdout
 *   corral:tar-in DIR    a tar on stdin extracted under DIR (made if need
 *                        be); "entries=N" on stderr
 *   corral:file-out PATH a regular file to stdout (a directory: exit
 *                        CRL_STREAM_ISDIR, and the host asks for a tar)
 *   corral:layer-out, corral:layer-in   a checkpoint's halves (layer.c)
 *   corral:sync          every file system written back to its device: what
 *                        the host runs before it ends a guest that has a
 *                        volume read-write
 *   corral:file-in PATH MODE   stdin into PATH (MODE in octal), replaced
 *                        whole at stdin's end and not before: the host
 *                        ends stdin only once the upload is whole, and
 *                        kills an abandoned one; "bytes=N" on stderr
 *
 * The exit status is an enum crl_stream_status, and the last line on
 * stderr says why (lib/helper/stream.h), as the container backend's
 * helper does; the host hands both to the files API. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/helper/file_in.h"
#include "../../lib/helper/fsop.h"
#include "../../lib/helper/stream.h"
#include "../../lib/helper/tar.h"
#include "../../lib/util/fdio.h"
#include "agent.h"

static int file_in(char *const argv[])
{
    char msg[512] = "", *end = NULL;
    unsigned long mode = argv[1] && argv[2] && !argv[3] ? strtoul(argv[2], &end, 8) : 0;
    if (!end || *end || mode > 07777) {
        dprintf(2, "%s: a path and an octal mode, please\n", argv[0]);
        return CRL_STREAM_FAILED;
    }
    int code = crl_file_in(0, -1, argv[1], (mode_t)mode, msg, sizeof(msg));
    dprintf(2, "%s\n", msg);
    return code;
}

static int file_out(char *const argv[])
{
    if (!argv[1] || argv[2]) {
        dprintf(2, "%s: one path, please\n", argv[0]);
        return CRL_STREAM_FAILED;
    }
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        dprintf(2, "%s\n", strerror(e));
        return crl_tar_status_of_errno(e);
    }
    if (S_ISDIR(st.st_mode))
        return CRL_STREAM_ISDIR;
    if (!S_ISREG(st.st_mode)) {
        dprintf(2, "not a regular file\n");
        return CRL_STREAM_BAD_INPUT;
    }
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || crl_write_full(1, buf, (size_t)n) < 0) {
            int e = errno;
            dprintf(2, "%s\n", strerror(e));
            return crl_tar_status_of_errno(e);
        }
    }
    return CRL_STREAM_OK;
}

/* The filesystem API's operation, or a watch, on the guest's tree: the
 * answer (or the events) on stdout, why not on stderr. */
static int fs(char *const argv[], bool watch)
{
    char msg[512] = "";
    if (!argv[1] || (watch && (!argv[2] || argv[3])) || (!watch && argv[2])) {
        dprintf(2, "%s: wrong arguments\n", argv[0]);
        return CRL_STREAM_FAILED;
    }
    int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        dprintf(2, "/: %s\n", strerror(errno));
        return CRL_STREAM_FAILED;
    }
    int code = watch ? crl_fsop_watch(root, argv[1], strcmp(argv[2], "1") == 0, 1, msg, sizeof(msg))
                     : crl_fsop_run(root, argv[1], 1, msg, sizeof(msg));
    if (code != CRL_STREAM_OK)
        dprintf(2, "%s\n", msg);
    close(root);
    return code;
}

int crl_ga_builtin(char *const argv[])
{
    char msg[512] = "";
    if (strcmp(argv[0], CRL_GA_BUILTIN_FS) == 0 || strcmp(argv[0], CRL_GA_BUILTIN_WATCH) == 0)
        return fs(argv, strcmp(argv[0], CRL_GA_BUILTIN_WATCH) == 0);
    if (strcmp(argv[0], CRL_GA_BUILTIN_FILE_IN) == 0)
        return file_in(argv);
    if (strcmp(argv[0], CRL_GA_BUILTIN_FILE_OUT) == 0)
        return file_out(argv);
    if (strcmp(argv[0], CRL_GA_BUILTIN_SYNC) == 0) {
        sync();
        return CRL_STREAM_OK;
    }
    if (strcmp(argv[0], CRL_GA_BUILTIN_LAYER_OUT) == 0 ||
        strcmp(argv[0], CRL_GA_BUILTIN_LAYER_IN) == 0) {
        if (getuid() != 0) {
            dprintf(2, "%s: root's alone\n", argv[0]);
            return CRL_STREAM_DENIED;
        }
        return crl_ga_layer(argv);
    }
    int out = strcmp(argv[0], CRL_GA_BUILTIN_TAR_OUT) == 0;
    if (!out && strcmp(argv[0], CRL_GA_BUILTIN_TAR_IN) != 0) {
        dprintf(2, "%s: no such builtin\n", argv[0]);
        return CRL_STREAM_FAILED;
    }
    if (!argv[1] || argv[2]) {
        dprintf(2, "%s: one directory, please\n", argv[0]);
        return CRL_STREAM_FAILED;
    }
    if (!out && crl_mkdir_p(argv[1], 0755) < 0 && errno != EEXIST) {
        int e = errno;
        dprintf(2, "%s: %s\n", argv[1], strerror(e));
        return crl_tar_status_of_errno(e);
    }
    if (chdir(argv[1]) < 0) {
        int e = errno;
        dprintf(2, "%s: %s\n", argv[1], strerror(e));
        return crl_tar_status_of_errno(e);
    }
    if (out) {
        if (crl_tar_out(1, msg, sizeof(msg)) < 0) {
            dprintf(2, "%s\n", msg);
            return CRL_STREAM_FAILED;
        }
        return CRL_STREAM_OK;
    }
    unsigned long n = 0;
    if (crl_tar_in(0, &n, msg, sizeof(msg)) < 0) {
        dprintf(2, "%s\n", msg);
        return CRL_STREAM_BAD_INPUT;
    }
    /* Read to the end: a tar's records may pad past its end marker, and
     * the host must not meet a closed pipe. */
    char sink[65536];
    while (read(0, sink, sizeof(sink)) > 0)
        ;
    dprintf(2, "entries=%lu\n", n);
    return CRL_STREAM_OK;
}
