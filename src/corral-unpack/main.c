/* corral-unpack: a microVM guest's writable layer, as its agent's
 * corral:layer-out wrote it, read from stdin and unpacked into the
 * directory on descriptor 3 in the form a checkpoint reads
 * (crl_tar_unpack_layer, lib/helper/tar.h).
 *
 * corrald runs it for a microVM's checkpoint (lib/backend/microvm/view.c)
 * as root of a user namespace that maps the sandbox's ids and nothing
 * else, with descriptor 3 the root of a tmpfs mounted nowhere: what it
 * makes belongs to the sandbox's ids and is reachable by no path.  What it
 * reads comes from the guest and is trusted in nothing: the applier's
 * checks, under the container seccomp profile and one that allows no new
 * code.  Exit status: an enum crl_stream_status; its last line on stderr
 * says why. */
#include <errno.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../lib/helper/seccomp.h"
#include "../../lib/helper/stream.h"
#include "../../lib/helper/tar.h"

#define ROOT_FD 3

int main(int argc, char **argv)
{
    char *end = NULL;
    unsigned long long max =
        argc == 3 && strcmp(argv[1], "--max-entries") == 0 ? strtoull(argv[2], &end, 10) : 0;
    if (!end || *end || argv[2][0] == '-') {
        fprintf(stderr, "usage: corral-unpack --max-entries N < LAYER.tar (the tree on fd 3)\n");
        return CRL_STREAM_FAILED;
    }
    struct sock_fprog base, no_new_code;
    struct crl_err err = CRL_ERR_INIT;
    if (crl_seccomp_build(CRL_SECCOMP_CONTAINER, &base, &err) < 0 ||
        crl_seccomp_build(CRL_SECCOMP_NO_NEW_CODE, &no_new_code, &err) < 0) {
        fprintf(stderr, "seccomp: %s\n", err.msg);
        return CRL_STREAM_FAILED;
    }
    int r = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
            syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &base) < 0 ||
            syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &no_new_code) < 0;
    int e = errno;
    crl_seccomp_free(&base);
    crl_seccomp_free(&no_new_code);
    if (r) {
        fprintf(stderr, "seccomp: %s\n", strerror(e));
        return CRL_STREAM_FAILED;
    }
    char msg[512];
    unsigned long n = 0;
    int code = crl_tar_unpack_layer(0, ROOT_FD, max, &n, msg, sizeof(msg));
    fprintf(stderr, "%s\n", msg);
    return code;
}
