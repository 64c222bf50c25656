/* How a helper that moves bytes in or out of a sandbox (a tar, an upload,
 * a checkpoint's restore) ends: its exit code, which corrald maps to an
 * error (lib/core/backend.h).  The one thing both sides of that boundary
 * must agree on. */
#ifndef CRL_HELPER_STREAM_H
#define CRL_HELPER_STREAM_H

/* How a stream helper ended: its exit code. */
enum crl_stream_status {
    CRL_STREAM_OK = 0,
    CRL_STREAM_FAILED = 1,    /* see the message */
    CRL_STREAM_BAD_INPUT = 2, /* not a (valid, safe) tar archive, or a path not followed */
    CRL_STREAM_NOENT = 3,
    CRL_STREAM_NOTDIR = 4,
    CRL_STREAM_NOSPACE = 5,
    CRL_STREAM_DENIED = 6,
    CRL_STREAM_ISDIR = 7,
    CRL_STREAM_GONE = 8, /* the sandbox ended meanwhile */
};

/* What corrald writes on an upload's message socket once the upload is
 * whole: only then is the file put in place (backend.h). */
#define CRL_STREAM_COMMIT 'c'

#endif
