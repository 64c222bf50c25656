/* FILE_GET and FILE_PUT of regular files: the path checked (absolute, no
 * "..") and opened inside the root (openat2, RESOLVE_IN_ROOT), its bytes
 * as DATA within the stream's windows, a RESULT at the end. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../../lib/util/path.h"
#include "serve_int.h"

int crl_ga_file_start(struct agent *a, uint32_t id, const struct crl_agent_frame *f,
                      struct crl_err *err)
{
    struct crl_err perr = CRL_ERR_INIT;
    struct crl_agent_file m;
    if (crl_agent_parse_file(f->type, f->payload, f->len, &m, &perr) < 0)
        return crl_ga_stream_fail(a, NULL, id, perr.msg, err);
    char msg[CRL_AGENT_MAX_TEXT];
    if (m.tar)
        return crl_ga_send_result(a, id, ENOTSUP,
                                  "directories as tar are not supported by this agent yet", err);
    int bad = crl_path_normalise(m.path, strlen(m.path), CRL_PATH_RULES_API, NULL, 0);
    if (bad < 0) {
        snprintf(msg, sizeof(msg), "path %.200s is %s", m.path, crl_path_why(bad));
        return crl_ga_send_result(a, id, EINVAL, msg, err);
    }
    bool put = f->type == CRL_AGENT_FILE_PUT;
    int fd = crl_path_fd(crl_path_open_in_root(
        a->rootfd, m.path, put ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY, (mode_t)m.mode));
    int e = errno;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) < 0)
        e = errno;
    else if (fd >= 0 && !S_ISREG(st.st_mode))
        e = put ? EEXIST : EISDIR;
    else if (fd >= 0 && put && fchmod(fd, (mode_t)m.mode) < 0)
        e = errno;
    else if (fd >= 0)
        e = 0;
    if (e) {
        if (fd >= 0)
            close(fd);
        snprintf(msg, sizeof(msg), "%s %.200s: %s", put ? "write" : "read", m.path,
                 e == EISDIR || e == EEXIST ? "not a regular file" : strerror(e));
        return crl_ga_send_result(a, id, e, msg, err);
    }
    struct stream *s = crl_ga_stream_new(a, id, put ? K_PUT : K_GET);
    if (!s) {
        close(fd);
        return crl_err_sys(err, ENOMEM, "a stream");
    }
    s->fd = fd;
    return 0;
}

/* One chunk of a file being read, within the window; at its end the empty
 * DATA and the RESULT. */
int crl_ga_file_send(struct agent *a, struct stream *s, struct crl_err *err)
{
    uint32_t room = s->win.send < CHUNK ? s->win.send : CHUNK;
    if (room == 0)
        return 0;
    char buf[CHUNK];
    ssize_t n;
    while ((n = read(s->fd, buf, room)) < 0 && errno == EINTR)
        ;
    if (n < 0) {
        char msg[128];
        snprintf(msg, sizeof(msg), "read: %s", strerror(errno));
        int r = crl_ga_send_result(a, s->id, errno, msg, err);
        crl_ga_stream_drop(a, s);
        return r;
    }
    if (n == 0) {
        uint8_t end[CRL_AGENT_HEADER_SIZE];
        crl_agent_encode_empty(end, CRL_AGENT_DATA, s->id);
        uint32_t id = s->id;
        crl_ga_stream_drop(a, s);
        if (crl_buf_append(&a->out, end, sizeof(end)) < 0)
            return crl_err_sys(err, ENOMEM, "queueing DATA");
        return crl_ga_send_result(a, id, 0, NULL, err);
    }
    if (crl_agent_window_sending(&s->win, (uint32_t)n, err) < 0)
        return -1;
    return crl_ga_queue(a, CRL_AGENT_DATA, s->id, buf, (uint32_t)n, err);
}

int crl_ga_file_data(struct agent *a, struct stream *s, const struct crl_agent_frame *f,
                     struct crl_err *err)
{
    if (f->len == 0) {
        int r = fsync(s->fd) < 0 ? errno : 0;
        if (close(s->fd) < 0 && !r)
            r = errno;
        s->fd = -1;
        uint32_t id = s->id;
        crl_ga_stream_drop(a, s);
        char msg[128];
        snprintf(msg, sizeof(msg), "write: %s", strerror(r));
        return crl_ga_send_result(a, id, r, r ? msg : NULL, err);
    }
    if (crl_write_full(s->fd, f->payload, f->len) < 0) {
        char msg[128];
        int e = errno;
        snprintf(msg, sizeof(msg), "write: %s", strerror(e));
        uint32_t id = s->id;
        crl_ga_stream_drop(a, s);
        return crl_ga_send_result(a, id, e, msg, err);
    }
    s->ungranted += f->len;
    return crl_ga_send_credit(a, s, false, err);
}
