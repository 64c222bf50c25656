/* The filesystem API's operations (docs/api.md, Filesystem): stat, list
 * (to a depth), mkdir, move, remove, and watch, on the tree under a root
 * directory.  One implementation for every backend: a container's runs in
 * a helper the spawner forks in the sandbox (as the request's user), a
 * microVM's in the guest agent's builtin, a function sandbox's in corrald
 * beneath its scratch dir.
 *
 * Every path is a files-API path (absolute, no '..') resolved under
 * `root` by openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): a symlink
 * anywhere resolves inside the tree.  An operation on a path itself (stat,
 * remove, move) does not follow a symlink there; a list never follows one
 * into a directory.
 *
 * A request and its answer are JSON text (jansson); an operation writes
 * its answer to `out` and returns an enum crl_stream_status, with why in
 * `msg` when it is not CRL_STREAM_OK. */
#ifndef CRL_HELPER_FSOP_H
#define CRL_HELPER_FSOP_H

#include <stdbool.h>
#include <stddef.h>

#define CRL_FS_MAX_REQUEST 8192   /* bytes of a request's JSON */
#define CRL_FS_MAX_ENTRIES 100000 /* a list's answer, past which it is truncated */
#define CRL_FS_MAX_DEPTH 64       /* a list's depth */
#define CRL_FS_MAX_WATCHES 8192   /* directories a recursive watch follows */

/* Run the request (`{"op": "stat"|"list"|"mkdir"|"move"|"remove", ...}`,
 * docs/api.md) against the tree at root_fd; its answer, one JSON object,
 * to out_fd. */
int crl_fsop_run(int root_fd, const char *request, int out_fd, char *msg, size_t cap);

/* Watch `path` (and with `recursive` every directory below it, as they
 * come) until out_fd is closed or the directory goes: one JSON object a
 * line to out_fd per event, {"type": "create"|"write"|"remove"|"rename"|
 * "chmod", "path", "dir"} (a rename: "from" too, when it moved within
 * the watch), {"type": "overflow"} when the kernel's queue overflowed and
 * events were lost, and {"type": "ready"} once the watches are in place. */
int crl_fsop_watch(int root_fd, const char *path, bool recursive, int out_fd, char *msg,
                   size_t cap);

#endif
