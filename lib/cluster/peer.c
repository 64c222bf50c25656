#include "peer.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../util/fdio.h"

size_t crl_curl_gather(char *data, size_t size, size_t n, void *buf)
{
    /* past the buffer's cap the transfer stops: an answer is never read on
     * and on only to be thrown away */
    if (crl_buf_append(buf, data, size * n) < 0 || crl_buf_truncated(buf))
        return 0;
    return size * n;
}

struct sink {
    int fd;
    uint64_t max, got;
    int werr; /* errno of a failed write */
};

static size_t to_fd(char *data, size_t size, size_t n, void *ctx)
{
    struct sink *s = ctx;
    size_t len = size * n;
    if (s->got + len > s->max)
        return 0; /* over the cap: the transfer stops */
    if (crl_write_full(s->fd, data, len) < 0) {
        s->werr = errno;
        return 0;
    }
    s->got += len;
    return len;
}

int crl_peer_get(const char *addr, const char *token, const char *path, struct crl_buf *buf, int fd,
                 uint64_t max, unsigned stall_s, long *status, struct crl_err *err)
{
    char url[512], auth[4200];
    if ((size_t)snprintf(url, sizeof(url), "%s%s", addr, path) >= sizeof(url))
        return crl_err_set(err, CRL_E_INVALID, "the URL %s%s is too long", addr, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token ? token : "");
    CURL *c = curl_easy_init();
    struct curl_slist *hdrs = curl_slist_append(NULL, auth);
    if (!c || !hdrs) {
        curl_slist_free_all(hdrs);
        curl_easy_cleanup(c);
        return crl_err_sys(err, ENOMEM, "GET %s", url);
    }
    struct sink sink = {.fd = fd, .max = max};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)(stall_s ? stall_s : 10));
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    if (buf) {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, crl_curl_gather);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, buf);
    } else {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, to_fd);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
    }
    CURLcode rc = curl_easy_perform(c);
    *status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    if (rc == CURLE_WRITE_ERROR && sink.werr)
        return crl_err_sys(err, sink.werr, "GET %s: writing its body", url);
    if (rc == CURLE_WRITE_ERROR)
        return crl_err_set(err, CRL_E_TOO_LARGE, "GET %s: more than the %llu bytes expected", url,
                           (unsigned long long)(buf ? buf->cap : max));
    if (rc != CURLE_OK)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "GET %s: %s", url, curl_easy_strerror(rc));
    return 0;
}
