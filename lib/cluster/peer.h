/* Reading from another host of the cluster: a GET over libcurl with the
 * token the hosts share, its body into a buffer or a file, capped.  What a
 * host answers is not trusted: a body past the cap is refused, not cut. */
#ifndef CRL_CLUSTER_PEER_H
#define CRL_CLUSTER_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "../util/buf.h"
#include "../util/err.h"

/* libcurl's write callback for a struct crl_buf (CURLOPT_WRITEDATA): the
 * transfer stops (CURLE_WRITE_ERROR) once the buffer's cap is passed. */
size_t crl_curl_gather(char *data, size_t size, size_t n, void *buf);

/* GET `addr` (http://HOST:PORT) + `path` with "Authorization: Bearer
 * token".  The body goes to `buf`, at most its cap, or, with `buf` NULL, to
 * `fd`, at most `max` bytes (more, either way: CRL_E_TOO_LARGE).  *status gets the HTTP
 * status; a host that cannot be reached, or stalls for `stall_s` seconds,
 * is CRL_E_UNAVAILABLE naming `addr`. */
int crl_peer_get(const char *addr, const char *token, const char *path, struct crl_buf *buf, int fd,
                 uint64_t max, unsigned stall_s, long *status, struct crl_err *err);

#endif
