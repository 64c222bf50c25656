/* One file uploaded into a sandbox, whole or not at all: the body of the
 * files API's PUT of a single file, run inside the sandbox as its user (the
 * container backend's stream helper, the microvm guest's agent).  Never in
 * corrald: it follows the sandbox's paths. */
#ifndef CRL_HELPER_FILE_IN_H
#define CRL_HELPER_FILE_IN_H

#include <stddef.h>
#include <sys/types.h>

/* Copy `data` to its end into a new file beside `path`, then put it in
 * place once a commit byte (CRL_STREAM_COMMIT) comes on `ctl`: a failed or
 * abandoned upload leaves `path` as it was.  ctl -1: the end of `data` is
 * the commit (a caller that abandons kills the helper instead).  A path
 * that is a symlink is written through, as open(2) would; missing parents
 * are made.  Returns an enum crl_stream_status, with "bytes=N" or why it
 * failed in msg. */
int crl_file_in(int data, int ctl, const char *path, mode_t mode, char *msg, size_t msglen);

#endif
