/* The journal, a trajectory log's storage layer: framing, validation,
 * recovery of a torn tail, durable appends.  The format and its rules are
 * in journal.h. */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "../util/cleanup.h"

/* The search for a valid record after a bad one reads the file this much at
 * a time. */
#define SCAN_WINDOW (1u << 20)

struct crl_journal {
    int fd;
    char *path;
    uint64_t size;
    uint64_t records;
    int64_t created_ns;
    uint64_t torn_bytes;
    int dirty;
    int poisoned; /* a write could not be undone, or fdatasync failed */
};

/* What walks the records, for a reader and for the validation on open. */
struct scan {
    int fd;
    const char *path;
    uint64_t off; /* the frame of the next record */
    uint64_t index;
    uint8_t *buf; /* the last record's payload, NUL-terminated */
    size_t cap;
    uint8_t type;
    uint32_t len;
    const char *why; /* what was wrong with the last bad record */
    char why_buf[96];
};

struct crl_journal_reader {
    struct scan s;
    char *path;
    int have_header;
    int64_t created_ns;
};

static uint64_t torn_total;

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const uint8_t *p)
{
    return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

static uint32_t record_crc(uint8_t type, const uint8_t *payload, size_t len)
{
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32(c, &type, 1);
    if (len)
        c = crc32(c, payload, (uInt)len);
    return (uint32_t)c;
}

/* pread until len bytes or end of file; the bytes read, or -1 with errno. */
static ssize_t pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

static int pwritev_full(int fd, struct iovec *iov, int n, uint64_t off)
{
    while (n > 0) {
        ssize_t w = pwritev(fd, iov, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        off += (uint64_t)w;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static int fdatasync_retry(int fd)
{
    int r;
    do
        r = fdatasync(fd);
    while (r < 0 && errno == EINTR);
    return r;
}

static void encode_header(uint8_t h[CRL_JOURNAL_HEADER_SIZE], int64_t created_ns)
{
    memset(h, 0, CRL_JOURNAL_HEADER_SIZE);
    memcpy(h, CRL_JOURNAL_MAGIC, 8);
    put_le32(h + 8, CRL_JOURNAL_VERSION);
    put_le64(h + 16, (uint64_t)created_ns);
    put_le32(h + 28, (uint32_t)crc32(crc32(0L, Z_NULL, 0), h, 28));
}

/* 1: a valid header (*created_ns); 0: no header yet (an empty file, or one
 * cut short inside a header as we write it); -1: refused. */
static int header_check(int fd, const char *path, int64_t *created_ns, struct crl_err *err)
{
    uint8_t h[CRL_JOURNAL_HEADER_SIZE], want[CRL_JOURNAL_HEADER_SIZE];
    ssize_t n = pread_full(fd, h, sizeof(h), 0);
    if (n < 0)
        return crl_err_sys(err, errno, "%s: read header", path);
    encode_header(want, 0);
    if ((size_t)n < sizeof(h)) {
        /* Magic, version and flags are known; the time and CRC are not. */
        if (memcmp(h, want, (size_t)n < 16 ? (size_t)n : 16) == 0)
            return 0;
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s: not a trajectory log (%zd bytes, no header at byte offset 0)", path,
                           n);
    }
    if (memcmp(h, CRL_JOURNAL_MAGIC, 8) != 0)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s: not a trajectory log (bad magic at byte offset 0)", path);
    uint32_t version = get_le32(h + 8);
    if (version > CRL_JOURNAL_VERSION)
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "%s: trajectory log version %u (byte offset 8); this build reads "
                           "version %u",
                           path, version, CRL_JOURNAL_VERSION);
    if (version != CRL_JOURNAL_VERSION)
        return crl_err_set(err, CRL_E_INTERNAL, "%s: corrupt header: version %u at byte offset 8",
                           path, version);
    if (get_le32(h + 28) != (uint32_t)crc32(crc32(0L, Z_NULL, 0), h, 28))
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s: corrupt header: CRC mismatch (byte offsets 0 to 31)", path);
    if (get_le32(h + 12) != 0 || get_le32(h + 24) != 0)
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "%s: trajectory log with unknown flags 0x%08x, reserved 0x%08x "
                           "(byte offsets 12 and 24)",
                           path, get_le32(h + 12), get_le32(h + 24));
    *created_ns = (int64_t)get_le64(h + 16);
    return 1;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int write_header(int fd, const char *path, int64_t created_ns, struct crl_err *err)
{
    uint8_t h[CRL_JOURNAL_HEADER_SIZE];
    encode_header(h, created_ns);
    struct iovec iov = {h, sizeof(h)};
    if (pwritev_full(fd, &iov, 1, 0) < 0)
        return crl_err_sys(err, errno, "%s: write header", path);
    if (fdatasync_retry(fd) < 0)
        return crl_err_sys(err, errno, "%s: fdatasync", path);
    return 0;
}

static int fsync_parent(const char *path, struct crl_err *err)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return crl_err_sys(err, errno, "open directory %s", dir);
    if (fsync(dfd) < 0)
        return crl_err_sys(err, errno, "fsync directory %s", dir);
    return 0;
}

/* Create the log with its header under a temporary name, then link it into
 * place: no log without a header is ever seen.  1 and *fdp: created; 0:
 * another process created it first (open theirs); -1: failed. */
static int create_log(const char *path, int *fdp, struct crl_err *err)
{
    static unsigned seq;
    char tmp[PATH_MAX];
    unsigned n = __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED);
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld.%u", path, (long)getpid(), n) >= (int)sizeof(tmp))
        return crl_err_set(err, CRL_E_INVALID, "%s: path too long", path);
    cleanup_close int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return crl_err_sys(err, errno, "%s: create (as %s)", path, tmp);
    if (write_header(fd, tmp, now_ns(), err) < 0) {
        unlink(tmp);
        return -1;
    }
    if (link(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        if (e == EEXIST)
            return 0;
        return crl_err_sys(err, e, "link %s to %s", tmp, path);
    }
    unlink(tmp);
    if (fsync_parent(path, err) < 0)
        return crl_err_prefix(err, "%s: create", path);
    *fdp = steal_fd(&fd);
    return 1;
}

enum { REC_OK, REC_END, REC_BAD };

static int scan_bad(struct scan *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int scan_bad(struct scan *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why_buf, sizeof(s->why_buf), fmt, ap);
    va_end(ap);
    s->why = s->why_buf;
    return REC_BAD;
}

/* Read and check the record at s->off into s->buf: REC_OK, REC_END (no
 * byte there), REC_BAD (s->why says why), or -1 when a read fails. */
static int read_record(struct scan *s, struct crl_err *err)
{
    uint8_t fr[CRL_JOURNAL_FRAME_SIZE];
    ssize_t n = pread_full(s->fd, fr, sizeof(fr), s->off);
    if (n < 0)
        return crl_err_sys(err, errno, "%s: read at byte offset %llu", s->path,
                           (unsigned long long)s->off);
    if (n == 0)
        return REC_END;
    if ((size_t)n < sizeof(fr))
        return scan_bad(s, "frame cut short after %zd of %u bytes", n, CRL_JOURNAL_FRAME_SIZE);
    uint32_t len = get_le32(fr), crc = get_le32(fr + 4);
    uint8_t type = fr[8];
    if (type == 0)
        return scan_bad(s, "record type 0");
    if (len > CRL_JOURNAL_MAX_PAYLOAD)
        return scan_bad(s, "length %u over the limit of %u", len, CRL_JOURNAL_MAX_PAYLOAD);
    if (s->cap < (size_t)len + 1) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < (size_t)len + 1)
            cap *= 2;
        uint8_t *b = realloc(s->buf, cap);
        if (!b)
            return crl_err_sys(err, ENOMEM, "%s: a record of %u bytes", s->path, len);
        s->buf = b;
        s->cap = cap;
    }
    n = pread_full(s->fd, s->buf, len, s->off + CRL_JOURNAL_FRAME_SIZE);
    if (n < 0)
        return crl_err_sys(err, errno, "%s: read at byte offset %llu", s->path,
                           (unsigned long long)(s->off + CRL_JOURNAL_FRAME_SIZE));
    if ((size_t)n < len)
        return scan_bad(s, "payload cut short after %zd of %u bytes", n, len);
    if (record_crc(type, s->buf, len) != crc)
        return scan_bad(s, "CRC mismatch");
    s->buf[len] = 0;
    s->type = type;
    s->len = len;
    return REC_OK;
}

/* The CRC of [off, off+len) of the file, through `tmp`; 0 if the file is
 * shorter than that now. */
static int crc_range(int fd, uint64_t off, size_t len, uint8_t *tmp, size_t tmp_len, uLong *crc)
{
    uLong c = crc32(0L, Z_NULL, 0);
    while (len > 0) {
        size_t k = len < tmp_len ? len : tmp_len;
        ssize_t n = pread_full(fd, tmp, k, off);
        if (n < 0)
            return -1;
        if ((size_t)n < k)
            return 0;
        c = crc32(c, tmp, (uInt)k);
        off += k;
        len -= k;
    }
    *crc = c;
    return 1;
}

/* Is there a valid record at any byte offset in [from, end)?  1 and *found,
 * 0 if none, -1 on a failed read or when the search would checksum more
 * than CRL_JOURNAL_SCAN_BUDGET bytes. */
static int find_valid(const struct scan *s, uint64_t from, uint64_t end, uint64_t *found,
                      struct crl_err *err)
{
    uint64_t wcap = end - from < SCAN_WINDOW ? end - from : SCAN_WINDOW;
    cleanup_free uint8_t *win = malloc(wcap ? wcap : 1);
    cleanup_free uint8_t *tmp = NULL; /* for a candidate longer than the window */
    if (!win)
        return crl_err_sys(err, ENOMEM, "%s: searching for valid records", s->path);
    uint64_t wstart = from, wlen = 0, budget = CRL_JOURNAL_SCAN_BUDGET;
    for (uint64_t p = from; p + CRL_JOURNAL_FRAME_SIZE <= end; p++) {
        if (p + CRL_JOURNAL_FRAME_SIZE > wstart + wlen) {
            uint64_t want = end - p < wcap ? end - p : wcap;
            ssize_t n = pread_full(s->fd, win, (size_t)want, p);
            if (n < 0)
                return crl_err_sys(err, errno, "%s: read at byte offset %llu", s->path,
                                   (unsigned long long)p);
            wstart = p;
            wlen = (uint64_t)n;
            if (wlen < CRL_JOURNAL_FRAME_SIZE)
                return 0;
        }
        const uint8_t *h = win + (p - wstart);
        uint32_t len = get_le32(h);
        if (h[8] == 0 || len > CRL_JOURNAL_MAX_PAYLOAD || len > end - p - CRL_JOURNAL_FRAME_SIZE)
            continue;
        if (budget < (uint64_t)len + 1)
            return crl_err_set(err, CRL_E_INTERNAL,
                               "%s: cannot tell a torn tail from corruption after byte offset "
                               "%llu (search budget spent at byte offset %llu)",
                               s->path, (unsigned long long)from - 1, (unsigned long long)p);
        budget -= (uint64_t)len + 1;
        uLong c;
        if (p + CRL_JOURNAL_FRAME_SIZE + len <= wstart + wlen) {
            c = crc32(crc32(0L, Z_NULL, 0), h + 8, (uInt)len + 1);
        } else {
            if (!tmp && !(tmp = malloc(64 << 10)))
                return crl_err_sys(err, ENOMEM, "%s: searching for valid records", s->path);
            int r = crc_range(s->fd, p + 8, (size_t)len + 1, tmp, 64 << 10, &c);
            if (r < 0)
                return crl_err_sys(err, errno, "%s: read at byte offset %llu", s->path,
                                   (unsigned long long)p);
            if (r == 0)
                continue;
        }
        if ((uint32_t)c == get_le32(h + 4)) {
            *found = p;
            return 1;
        }
    }
    return 0;
}

/* The next record: 1 (s->type, s->len, s->buf; s->off not yet advanced),
 * 0 at the end of the valid records (*torn: bytes after them, 0 if none),
 * -1 for a corrupt log or a failed read. */
static int scan_next(struct scan *s, uint64_t *torn, struct crl_err *err)
{
    *torn = 0;
    int r = read_record(s, err);
    if (r < 0)
        return -1;
    if (r == REC_OK)
        return 1;
    if (r == REC_END)
        return 0;
    struct stat st;
    if (fstat(s->fd, &st) < 0)
        return crl_err_sys(err, errno, "%s: fstat", s->path);
    uint64_t end = (uint64_t)st.st_size, found = 0;
    if (end <= s->off)
        return 0;
    r = find_valid(s, s->off + 1, end, &found, err);
    if (r < 0)
        return -1;
    if (r == 0) {
        *torn = end - s->off;
        return 0;
    }
    /* A writer appending meanwhile may have completed the record since we
     * read it; it writes in order, so once a later record is there, this
     * one is complete or never will be. */
    char why[sizeof(s->why_buf)];
    snprintf(why, sizeof(why), "%s", s->why);
    r = read_record(s, err);
    if (r < 0)
        return -1;
    if (r == REC_OK)
        return 1;
    return crl_err_set(err, CRL_E_INTERNAL,
                       "%s: corrupt record %llu at byte offset %llu: %s, yet a valid record "
                       "follows at byte offset %llu",
                       s->path, (unsigned long long)s->index, (unsigned long long)s->off, why,
                       (unsigned long long)found);
}

static void scan_advance(struct scan *s)
{
    s->off += CRL_JOURNAL_FRAME_SIZE + s->len;
    s->index++;
}

int crl_journal_open(const char *path, struct crl_journal **out, struct crl_err *err)
{
    *out = NULL;
    cleanup_close int fd = -1;
    for (int tries = 0; fd < 0; tries++) {
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0)
            break;
        if (errno != ENOENT || tries == 3)
            return crl_err_sys(err, errno, "open %s", path);
        if (create_log(path, &fd, err) < 0)
            return -1;
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
        if (errno == EAGAIN || errno == EACCES)
            return crl_err_set(err, CRL_E_CONFLICT, "%s: already open for append elsewhere", path);
        return crl_err_sys(err, errno, "%s: lock", path);
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        return crl_err_sys(err, errno, "%s: fstat", path);
    if (!S_ISREG(st.st_mode))
        return crl_err_set(err, CRL_E_INTERNAL, "%s: not a regular file", path);

    cleanup_free struct crl_journal *log = calloc(1, sizeof(*log));
    cleanup_free char *p = strdup(path);
    if (!log || !p)
        return crl_err_sys(err, ENOMEM, "%s: open", path);
    int r = header_check(fd, path, &log->created_ns, err);
    if (r < 0)
        return -1;
    if (r == 0) {
        /* Empty, or a header cut short: no record can be there. */
        log->torn_bytes = (uint64_t)st.st_size;
        log->created_ns = now_ns();
        if (ftruncate(fd, 0) < 0)
            return crl_err_sys(err, errno, "%s: truncate", path);
        if (write_header(fd, path, log->created_ns, err) < 0)
            return -1;
    }

    struct scan s = {.fd = fd, .path = path, .off = CRL_JOURNAL_HEADER_SIZE};
    uint64_t torn = 0;
    while ((r = scan_next(&s, &torn, err)) == 1)
        scan_advance(&s);
    free(s.buf);
    if (r < 0)
        return -1;
    if (torn) {
        if (ftruncate(fd, (off_t)s.off) < 0)
            return crl_err_sys(err, errno, "%s: truncate a torn tail at byte offset %llu", path,
                               (unsigned long long)s.off);
        if (fdatasync_retry(fd) < 0)
            return crl_err_sys(err, errno, "%s: fdatasync", path);
        log->torn_bytes += torn;
    }
    if (log->torn_bytes)
        __atomic_fetch_add(&torn_total, 1, __ATOMIC_RELAXED);
    log->size = s.off;
    log->records = s.index;
    log->fd = steal_fd(&fd);
    log->path = steal_pointer(&p);
    *out = steal_pointer(&log);
    return 0;
}

int crl_journal_append(struct crl_journal *log, uint8_t type, const void *payload, size_t len,
                       struct crl_journal_pos *pos, struct crl_err *err)
{
    if (log->poisoned)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s: unusable after a failed write or sync; reopen it", log->path);
    if (type == 0)
        return crl_err_set(err, CRL_E_INVALID, "%s: record type 0 is reserved", log->path);
    if (len > CRL_JOURNAL_MAX_PAYLOAD)
        return crl_err_set(err, CRL_E_TOO_LARGE,
                           "%s: a record of %zu bytes is over the limit of %u", log->path, len,
                           CRL_JOURNAL_MAX_PAYLOAD);
    uint8_t fr[CRL_JOURNAL_FRAME_SIZE];
    put_le32(fr, (uint32_t)len);
    put_le32(fr + 4, record_crc(type, payload, len));
    fr[8] = type;
    struct iovec iov[2] = {{fr, sizeof(fr)}, {(void *)payload, len}};
    if (pwritev_full(log->fd, iov, len ? 2 : 1, log->size) < 0) {
        int e = errno;
        /* Leave no partial record for the next append to follow. */
        if (ftruncate(log->fd, (off_t)log->size) < 0)
            log->poisoned = 1;
        return crl_err_sys(err, e, "%s: append at byte offset %llu", log->path,
                           (unsigned long long)log->size);
    }
    if (pos) {
        pos->index = log->records;
        pos->offset = log->size;
    }
    log->size += CRL_JOURNAL_FRAME_SIZE + len;
    log->records++;
    log->dirty = 1;
    return 0;
}

int crl_journal_sync(struct crl_journal *log, struct crl_err *err)
{
    if (log->poisoned)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s: unusable after a failed write or sync; reopen it", log->path);
    if (!log->dirty)
        return 0;
    if (fdatasync_retry(log->fd) < 0) {
        log->poisoned = 1;
        return crl_err_sys(err, errno, "%s: fdatasync", log->path);
    }
    log->dirty = 0;
    return 0;
}

int crl_journal_sync_many(struct crl_journal *const *logs, size_t n, struct crl_err *err)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        struct crl_err e = CRL_ERR_INIT;
        if (logs[i] && crl_journal_sync(logs[i], &e) < 0) {
            if (rc == 0 && err)
                *err = e;
            rc = -1;
        }
    }
    return rc;
}

void crl_journal_info(const struct crl_journal *log, struct crl_journal_info *info)
{
    info->records = log->records;
    info->size = log->size;
    info->created_ns = log->created_ns;
    info->torn_bytes = log->torn_bytes;
    info->dirty = log->dirty;
}

const char *crl_journal_path(const struct crl_journal *log)
{
    return log->path;
}

void crl_journal_close(struct crl_journal *log)
{
    if (!log)
        return;
    close(log->fd);
    free(log->path);
    free(log);
}

uint64_t crl_journal_torn_tails_total(void)
{
    return __atomic_load_n(&torn_total, __ATOMIC_RELAXED);
}

int crl_journal_reader_open(const char *path, const struct crl_journal_pos *from,
                            struct crl_journal_reader **out, struct crl_err *err)
{
    *out = NULL;
    if (from && from->offset < CRL_JOURNAL_HEADER_SIZE)
        return crl_err_set(err, CRL_E_INVALID, "%s: byte offset %llu is inside the header", path,
                           (unsigned long long)from->offset);
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return crl_err_sys(err, errno, "open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return crl_err_sys(err, errno, "%s: fstat", path);
    if (!S_ISREG(st.st_mode))
        return crl_err_set(err, CRL_E_INTERNAL, "%s: not a regular file", path);
    cleanup_free struct crl_journal_reader *r = calloc(1, sizeof(*r));
    cleanup_free char *p = strdup(path);
    if (!r || !p)
        return crl_err_sys(err, ENOMEM, "%s: open", path);
    int h = header_check(fd, path, &r->created_ns, err);
    if (h < 0)
        return -1;
    r->have_header = h;
    r->s.off = from ? from->offset : CRL_JOURNAL_HEADER_SIZE;
    r->s.index = from ? from->index : 0;
    r->s.fd = steal_fd(&fd);
    r->s.path = r->path = steal_pointer(&p);
    *out = steal_pointer(&r);
    return 0;
}

int crl_journal_reader_next(struct crl_journal_reader *r, struct crl_journal_record *rec,
                            struct crl_err *err)
{
    if (!r->have_header) {
        /* The file was empty: a writer may have given it its header since. */
        int h = header_check(r->s.fd, r->path, &r->created_ns, err);
        if (h <= 0)
            return h;
        r->have_header = 1;
    }
    uint64_t torn;
    int n = scan_next(&r->s, &torn, err);
    if (n <= 0)
        return n;
    rec->pos.index = r->s.index;
    rec->pos.offset = r->s.off;
    rec->type = r->s.type;
    rec->len = r->s.len;
    rec->payload = r->s.buf;
    scan_advance(&r->s);
    return 1;
}

struct crl_journal_pos crl_journal_reader_pos(const struct crl_journal_reader *r)
{
    return (struct crl_journal_pos){r->s.index, r->s.off};
}

int64_t crl_journal_reader_created_ns(const struct crl_journal_reader *r)
{
    return r->created_ns;
}

void crl_journal_reader_close(struct crl_journal_reader *r)
{
    if (!r)
        return;
    close(r->s.fd);
    free(r->s.buf);
    free(r->path);
    free(r);
}
