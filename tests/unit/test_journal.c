/* lib/traj/journal: the trajectory log's framed, append-only file.  Round trips,
 * reopening, a torn tail cut at every byte of the last record, corruption in
 * the middle (refused, naming the offset), bad headers, the size limit,
 * empty files, the one-writer lock, a reader running beside a writer, and
 * the cost of fdatasync per append against group commit (diag figures; no
 * test gates on a time). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/traj/journal.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

static char dir[4096];

static void make_dir(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/test_journal.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
}

static void remove_dir(void)
{
    crl_rm_rf_at(AT_FDCWD, dir);
}

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

/* The payload of record i in the tests: its size and bytes follow from i. */
static size_t pattern_len(uint64_t i)
{
    return (size_t)((i * 37) % 301);
}

static void pattern_fill(uint8_t *buf, uint64_t i, size_t len)
{
    for (size_t k = 0; k < len; k++)
        buf[k] = (uint8_t)(i * 131 + k * 7);
}

static uint8_t pattern_type(uint64_t i)
{
    return (uint8_t)(1 + i % 255);
}

static int append_pattern(struct crl_journal *log, uint64_t i, struct crl_journal_pos *pos)
{
    uint8_t buf[512];
    size_t len = pattern_len(i);
    pattern_fill(buf, i, len);
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_journal_append(log, pattern_type(i), buf, len, pos, &e);
    if (r < 0)
        diag("append %llu: %s", (unsigned long long)i, e.msg);
    return r;
}

static int record_matches(const struct crl_journal_record *rec, uint64_t i)
{
    uint8_t buf[512];
    size_t len = pattern_len(i);
    pattern_fill(buf, i, len);
    return rec->pos.index == i && rec->type == pattern_type(i) && rec->len == len &&
           memcmp(rec->payload, buf, len) == 0 && rec->payload[len] == 0;
}

/* Write n pattern records to a new log at path; returns the positions. */
static void write_log(const char *path, uint64_t n, struct crl_journal_pos *pos)
{
    struct crl_journal *log = NULL;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_journal_open(path, &log, &e) < 0)
        bail_out(e.msg);
    for (uint64_t i = 0; i < n; i++)
        if (append_pattern(log, i, pos ? &pos[i] : NULL) < 0)
            bail_out("append failed");
    if (crl_journal_sync(log, &e) < 0)
        bail_out(e.msg);
    crl_journal_close(log);
}

/* Read the whole log: the number of records that matched the pattern in
 * order, -1 (and *e) if the reader failed. */
static long long read_all(const char *path, uint64_t first, struct crl_err *e)
{
    struct crl_journal_reader *r = NULL;
    if (crl_journal_reader_open(path, NULL, &r, e) < 0)
        return -1;
    struct crl_journal_record rec;
    long long n = 0;
    int k;
    while ((k = crl_journal_reader_next(r, &rec, e)) == 1) {
        if (!record_matches(&rec, first + (uint64_t)n)) {
            diag("record %lld does not match", n);
            break;
        }
        n++;
    }
    crl_journal_reader_close(r);
    return k < 0 ? -1 : n;
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

static void copy_file(const char *from, const char *to, off_t len)
{
    char *buf = NULL;
    size_t n = 0;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_read_file_alloc(from, 64 << 20, &buf, &n, &e) < 0)
        bail_out(e.msg);
    int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || crl_write_full(fd, buf, len < 0 ? n : (size_t)len) < 0)
        bail_out("copy_file: write failed");
    close(fd);
    free(buf);
}

static void poke(const char *path, off_t off, const void *bytes, size_t len)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || pwrite(fd, bytes, len, off) != (ssize_t)len)
        bail_out("poke: write failed");
    close(fd);
}

static void flip(const char *path, off_t off)
{
    uint8_t b;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 || pread(fd, &b, 1, off) != 1)
        bail_out("flip: read failed");
    b ^= 0x5a;
    if (pwrite(fd, &b, 1, off) != 1)
        bail_out("flip: write failed");
    close(fd);
}

static void test_round_trip(void)
{
    make_dir();
    char path[4200];
    path_of(path, sizeof(path), "log");
    struct crl_journal *log = NULL;
    struct crl_err e = CRL_ERR_INIT;
    int64_t before = (int64_t)time(NULL) * 1000000000;
    is_int(crl_journal_open(path, &log, &e), 0, "open creates a missing log");
    struct crl_journal_info info;
    crl_journal_info(log, &info);
    ok(info.records == 0 && info.size == CRL_JOURNAL_HEADER_SIZE && info.torn_bytes == 0,
       "a new log is a bare header");
    ok(info.created_ns >= before && info.created_ns < before + 60 * 1000000000LL,
       "its creation time is now");
    is_str(crl_journal_path(log), path, "it knows its path");

    struct crl_journal_pos pos[100];
    int fails = 0;
    for (uint64_t i = 0; i < 100; i++)
        fails += append_pattern(log, i, &pos[i]) < 0;
    is_int(fails, 0, "100 appends of 0 to 300 bytes, types 1 to 100");
    uint64_t off = CRL_JOURNAL_HEADER_SIZE;
    int bad = 0;
    for (uint64_t i = 0; i < 100; i++) {
        bad += pos[i].index != i || pos[i].offset != off;
        off += CRL_JOURNAL_FRAME_SIZE + pattern_len(i);
    }
    is_int(bad, 0, "each append returns its index and the offset of its frame");
    crl_journal_info(log, &info);
    ok(info.records == 100 && info.size == off && info.dirty, "info: 100 records, dirty");
    is_int(crl_journal_sync(log, &e), 0, "sync");
    crl_journal_info(log, &info);
    ok(!info.dirty, "a synced log is clean");
    is_int(crl_journal_sync(log, &e), 0, "syncing a clean log is a no-op");
    crl_journal_close(log);
    is_int(file_size(path), off, "the file holds exactly the header and the records");

    is_int(read_all(path, 0, &e), 100, "a reader returns the 100 records in order");

    /* Host independence: the bytes are little-endian whatever the host. */
    uint8_t h[CRL_JOURNAL_HEADER_SIZE + CRL_JOURNAL_FRAME_SIZE];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ok(fd >= 0 && pread(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h), "read the raw header");
    close(fd);
    ok(memcmp(h, "CRLTRAJ1\x01\0\0\0\0\0\0\0", 16) == 0, "magic, version 1 LE, flags 0");
    ok(memcmp(h + 32, "\0\0\0\0", 4) == 0 && h[40] == 1, "record 0: length 0 LE, type 1");

    struct crl_journal_reader *r = NULL;
    is_int(crl_journal_reader_open(path, &pos[60], &r, &e), 0,
           "a reader from record 60's position");
    struct crl_journal_record rec;
    int n = 0, match = 1;
    while (crl_journal_reader_next(r, &rec, &e) == 1)
        match &= record_matches(&rec, 60 + (uint64_t)n++);
    ok(n == 40 && match, "reads records 60 to 99 with their indexes");
    struct crl_journal_pos end = crl_journal_reader_pos(r);
    ok(end.index == 100 && end.offset == off, "and ends at the end of the log");
    ok(crl_journal_reader_created_ns(r) == info.created_ns, "the reader sees the creation time");
    crl_journal_reader_close(r);

    struct crl_journal_pos inside = {0, 8};
    ok(crl_journal_reader_open(path, &inside, &r, &e) < 0 && e.code == CRL_E_INVALID,
       "a position inside the header is refused");
    int fds = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));)
        fds += de->d_name[0] != '.';
    if (d)
        closedir(d);
    is_int(fds, 1, "creating left nothing but the log in its directory");
    remove_dir();
}

static void test_reopen_and_append(void)
{
    make_dir();
    char path[4200];
    path_of(path, sizeof(path), "log");
    write_log(path, 3, NULL);
    struct crl_journal *log = NULL;
    struct crl_err e = CRL_ERR_INIT;
    is_int(crl_journal_open(path, &log, &e), 0, "reopen an existing log");
    struct crl_journal_info info;
    crl_journal_info(log, &info);
    ok(info.records == 3 && info.torn_bytes == 0, "it has its 3 records and no torn tail");
    struct crl_journal_pos pos;
    ok(append_pattern(log, 3, &pos) == 0 && pos.index == 3, "the next append is record 3");
    append_pattern(log, 4, NULL);
    crl_journal_close(log);
    is_int(read_all(path, 0, &e), 5, "all 5 records read back");
    remove_dir();
}

static void test_lock(void)
{
    make_dir();
    char path[4200];
    path_of(path, sizeof(path), "log");
    struct crl_journal *a = NULL, *b = NULL;
    struct crl_err e = CRL_ERR_INIT;
    is_int(crl_journal_open(path, &a, &e), 0, "first open for append");
    ok(crl_journal_open(path, &b, &e) < 0 && e.code == CRL_E_CONFLICT && b == NULL,
       "a second open for append is a conflict");
    like(e.msg, "already open for append", "saying so: %s", e.msg);
    struct crl_journal_reader *r = NULL;
    is_int(crl_journal_reader_open(path, NULL, &r, &e), 0, "a reader needs no lock");
    crl_journal_reader_close(r);
    crl_journal_close(a);
    is_int(crl_journal_open(path, &b, &e), 0, "after close it opens again");
    crl_journal_close(b);
    remove_dir();
}

/* Cut the file at every byte inside its last record: the earlier records
 * stay, the cut record is dropped, and appends go on. */
static void test_torn_tail_every_length(void)
{
    make_dir();
    char full[4200], path[4200];
    path_of(full, sizeof(full), "full");
    path_of(path, sizeof(path), "log");
    struct crl_journal_pos pos[6];
    write_log(full, 6, pos); /* record 5: 9 + 185 bytes */
    off_t size = file_size(full), last = (off_t)pos[5].offset;
    diag("last record: byte offsets %lld to %lld", (long long)last, (long long)size - 1);
    int cuts = 0, read_ok = 0, open_ok = 0, appended = 0;
    char first_bad[600] = "";
    for (off_t cut = last + 1; cut < size; cut++) {
        cuts++;
        copy_file(full, path, cut);
        struct crl_err e = CRL_ERR_INIT;
        if (read_all(path, 0, &e) == 5)
            read_ok++;
        else if (!first_bad[0])
            snprintf(first_bad, sizeof(first_bad), "cut %lld: read: %s", (long long)cut, e.msg);
        struct crl_journal *log = NULL;
        struct crl_journal_info info = {0};
        if (crl_journal_open(path, &log, &e) == 0)
            crl_journal_info(log, &info);
        if (log && info.records == 5 && info.torn_bytes == (uint64_t)(cut - last) &&
            file_size(path) == last)
            open_ok++;
        else if (!first_bad[0])
            snprintf(first_bad, sizeof(first_bad), "cut %lld: open: %s", (long long)cut,
                     log ? "wrong info" : e.msg);
        if (log && append_pattern(log, 5, NULL) == 0 && crl_journal_sync(log, &e) == 0) {
            crl_journal_close(log);
            log = NULL;
            if (read_all(path, 0, &e) == 6 && file_size(path) == size)
                appended++;
        }
        crl_journal_close(log);
    }
    if (first_bad[0])
        diag("%s", first_bad);
    is_int(cuts, size - last - 1, "cut at each of the %d bytes inside the last record", cuts);
    is_int(read_ok, cuts, "a reader sees the 5 whole records and stops, every time");
    is_int(open_ok, cuts, "open drops the torn record and counts its bytes, every time");
    is_int(appended, cuts, "an append after recovery is read back, every time");

    /* Whole but wrong at the end: payload blocks that never reached disk. */
    copy_file(full, path, -1);
    flip(path, size - 3);
    struct crl_err e = CRL_ERR_INIT;
    is_int(read_all(path, 0, &e), 5, "a CRC mismatch in the last record ends a reader");
    uint64_t before = crl_journal_torn_tails_total();
    struct crl_journal *log = NULL;
    struct crl_journal_info info = {0};
    is_int(crl_journal_open(path, &log, &e), 0, "and open accepts the log");
    crl_journal_info(log, &info);
    ok(info.records == 5 && info.torn_bytes == (uint64_t)(size - last), "dropping that record");
    is_int(crl_journal_torn_tails_total(), before + 1, "the process-wide counter counts it");
    crl_journal_close(log);

    /* The file grew but the new blocks read as zeros. */
    copy_file(full, path, -1);
    uint8_t zeros[4096] = {0};
    poke(path, size, zeros, sizeof(zeros));
    is_int(read_all(path, 0, &e), 6, "a zero-filled tail ends a reader");
    ok(crl_journal_open(path, &log, &e) == 0, "open accepts a zero-filled tail");
    crl_journal_info(log, &info);
    ok(info.records == 6 && info.torn_bytes == sizeof(zeros) && file_size(path) == size,
       "and truncates it");
    crl_journal_close(log);
    remove_dir();
}

/* A bad record with valid data after it is corruption: refused, naming the
 * file and the offset, and the file is left alone. */
static void expect_corrupt(const char *path, uint64_t off, const char *what)
{
    char want[64];
    snprintf(want, sizeof(want), "at byte offset %llu:", (unsigned long long)off);
    off_t size = file_size(path);
    struct crl_journal *log = NULL;
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_journal_open(path, &log, &e) < 0 && e.code == CRL_E_INTERNAL && !log, "%s: open refuses",
       what);
    ok(strstr(e.msg, path) && strstr(e.msg, want), "naming the file and %s", want);
    diag("%s", e.msg);
    is_int(file_size(path), size, "%s: the file is left as it was", what);
    e = (struct crl_err)CRL_ERR_INIT;
    ok(read_all(path, 0, &e) < 0 && e.code == CRL_E_INTERNAL && strstr(e.msg, want),
       "%s: a reader fails at the same offset", what);
}

static void test_corrupt_middle(void)
{
    make_dir();
    char full[4200], path[4200];
    path_of(full, sizeof(full), "full");
    path_of(path, sizeof(path), "log");
    struct crl_journal_pos pos[8];
    write_log(full, 8, pos);

    copy_file(full, path, -1);
    flip(path, (off_t)pos[3].offset + CRL_JOURNAL_FRAME_SIZE + 20);
    expect_corrupt(path, pos[3].offset, "a flipped payload byte in record 3");

    copy_file(full, path, -1);
    flip(path, (off_t)pos[2].offset + 5);
    expect_corrupt(path, pos[2].offset, "a flipped CRC byte in record 2");

    /* A length that reaches past the end looks like a torn write; the valid
     * records after it say otherwise. */
    copy_file(full, path, -1);
    poke(path, (off_t)pos[4].offset, "\x00\x00\x10\x00", 4);
    expect_corrupt(path, pos[4].offset, "a length in record 4 past the end of the file");

    copy_file(full, path, -1);
    poke(path, (off_t)pos[1].offset, "\xff\xff\xff\x7f", 4);
    expect_corrupt(path, pos[1].offset, "a length in record 1 over the limit");

    copy_file(full, path, -1);
    poke(path, (off_t)pos[6].offset + 8, "\0", 1);
    expect_corrupt(path, pos[6].offset, "type 0 in record 6");

    /* Corruption in the second to last record, with the last one whole. */
    copy_file(full, path, -1);
    flip(path, (off_t)pos[6].offset + CRL_JOURNAL_FRAME_SIZE + 1);
    expect_corrupt(path, pos[6].offset, "a flipped byte in record 6 of 8");
    remove_dir();
}

static void expect_bad_header(const char *path, enum crl_errc code, const char *re,
                              const char *what)
{
    struct crl_journal *log = NULL;
    struct crl_journal_reader *r = NULL;
    struct crl_err e = CRL_ERR_INIT;
    off_t size = file_size(path);
    ok(crl_journal_open(path, &log, &e) < 0 && e.code == code, "%s: open refuses (%s)", what,
       crl_errc_name(code));
    like(e.msg, re, "%s: the message says why", what);
    is_int(file_size(path), size, "%s: the file is left as it was", what);
    e = (struct crl_err)CRL_ERR_INIT;
    ok(crl_journal_reader_open(path, NULL, &r, &e) < 0 && e.code == code && !r,
       "%s: a reader refuses: %s", what, e.msg);
}

static void test_bad_header(void)
{
    make_dir();
    char full[4200], path[4200];
    path_of(full, sizeof(full), "full");
    path_of(path, sizeof(path), "log");
    write_log(full, 2, NULL);

    copy_file(full, path, -1);
    poke(path, 0, "CRLTRAJ0", 8);
    expect_bad_header(path, CRL_E_INTERNAL,
                      "log: not a trajectory log \\(bad magic at byte offset 0", "wrong magic");
    copy_file(full, path, -1);
    poke(path, 8, "\x02", 1);
    expect_bad_header(path, CRL_E_UNSUPPORTED, "version 2 .*reads version 1", "version 2");
    copy_file(full, path, -1);
    poke(path, 8, "\x00", 1);
    expect_bad_header(path, CRL_E_INTERNAL, "corrupt header: version 0", "version 0");
    copy_file(full, path, -1);
    flip(path, 20);
    expect_bad_header(path, CRL_E_INTERNAL, "corrupt header: CRC mismatch", "a flipped time byte");

    poke(path, 0, "{\"not\": \"a log\"}\n", 17);
    if (truncate(path, 17) < 0)
        bail_out("truncate");
    expect_bad_header(path, CRL_E_INTERNAL, "not a trajectory log \\(17 bytes",
                      "a short JSON file");
    remove_dir();
}

static void test_empty_file(void)
{
    make_dir();
    char path[4200];
    path_of(path, sizeof(path), "log");
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    close(fd);

    struct crl_journal_reader *r = NULL;
    struct crl_journal_record rec;
    struct crl_err e = CRL_ERR_INIT;
    is_int(crl_journal_reader_open(path, NULL, &r, &e), 0, "a reader opens an empty file");
    is_int(crl_journal_reader_next(r, &rec, &e), 0, "which has no records");

    struct crl_journal *log = NULL;
    is_int(crl_journal_open(path, &log, &e), 0, "open for append takes an empty file");
    is_int(file_size(path), CRL_JOURNAL_HEADER_SIZE, "and gives it a header");
    ok(append_pattern(log, 0, NULL) == 0 && append_pattern(log, 1, NULL) == 0, "appends work");
    crl_journal_close(log);
    struct crl_journal_record rec1;
    ok(crl_journal_reader_next(r, &rec1, &e) == 1 && record_matches(&rec1, 0),
       "the reader opened on the empty file now sees record 0");
    ok(crl_journal_reader_next(r, &rec1, &e) == 1 && record_matches(&rec1, 1), "and record 1");
    crl_journal_reader_close(r);

    /* A header write cut short in an empty file. */
    if (truncate(path, 13) < 0)
        bail_out("truncate");
    is_int(read_all(path, 0, &e), 0, "a header cut after 13 bytes holds no records");
    is_int(crl_journal_open(path, &log, &e), 0, "open for append rewrites it");
    struct crl_journal_info info;
    crl_journal_info(log, &info);
    ok(info.records == 0 && info.torn_bytes == 13 && file_size(path) == CRL_JOURNAL_HEADER_SIZE,
       "as a new header, counting 13 torn bytes");
    crl_journal_close(log);
    is_int(read_all(path, 0, &e), 0, "a header-only log reads as no records");

    char missing[4200];
    path_of(missing, sizeof(missing), "no/such/dir/log");
    ok(crl_journal_open(missing, &log, &e) < 0 && e.sys_errno == ENOENT,
       "a log in a missing directory fails with ENOENT: %s", e.msg);
    ok(crl_journal_reader_open(missing, NULL, &r, &e) < 0 && e.sys_errno == ENOENT,
       "a reader of a missing log fails with ENOENT");
    remove_dir();
}

static void test_limits(void)
{
    make_dir();
    char path[4200];
    path_of(path, sizeof(path), "log");
    struct crl_journal *log = NULL;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_journal_open(path, &log, &e) < 0)
        bail_out(e.msg);
    uint8_t *big = malloc(CRL_JOURNAL_MAX_PAYLOAD + 1);
    if (!big)
        bail_out("malloc");
    memset(big, '{', CRL_JOURNAL_MAX_PAYLOAD + 1);
    ok(crl_journal_append(log, 1, big, CRL_JOURNAL_MAX_PAYLOAD + 1, NULL, &e) < 0 &&
           e.code == CRL_E_TOO_LARGE,
       "a payload of 16 MiB + 1 is too large: %s", e.msg);
    ok(crl_journal_append(log, 0, "x", 1, NULL, &e) < 0 && e.code == CRL_E_INVALID,
       "type 0 is refused");
    struct crl_journal_info info;
    crl_journal_info(log, &info);
    ok(info.records == 0 && file_size(path) == CRL_JOURNAL_HEADER_SIZE, "and nothing was written");
    big[CRL_JOURNAL_MAX_PAYLOAD - 1] = '}';
    is_int(crl_journal_append(log, 7, big, CRL_JOURNAL_MAX_PAYLOAD, NULL, &e), 0,
           "a payload of exactly 16 MiB is accepted");
    is_int(crl_journal_append(log, 8, "tail", 4, NULL, &e), 0, "and a record after it");
    crl_journal_close(log);

    struct crl_journal_reader *r = NULL;
    struct crl_journal_record rec;
    crl_journal_reader_open(path, NULL, &r, &e);
    ok(crl_journal_reader_next(r, &rec, &e) == 1 && rec.type == 7 &&
           rec.len == CRL_JOURNAL_MAX_PAYLOAD && memcmp(rec.payload, big, rec.len) == 0,
       "the 16 MiB record reads back");
    ok(crl_journal_reader_next(r, &rec, &e) == 1 && rec.len == 4 &&
           memcmp(rec.payload, "tail", 4) == 0,
       "and so does the one after it");
    crl_journal_reader_close(r);
    free(big);

    /* A write that fails half way (RLIMIT_FSIZE: EFBIG after a short
     * write) leaves no partial record behind. */
    if (crl_journal_open(path, &log, &e) < 0)
        bail_out(e.msg);
    off_t size = file_size(path);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {(rlim_t)size + 50, (rlim_t)size + 50};
    if (setrlimit(RLIMIT_FSIZE, &rl) < 0)
        bail_out("setrlimit");
    uint8_t buf[200] = {0};
    ok(crl_journal_append(log, 2, buf, sizeof(buf), NULL, &e) < 0 && e.sys_errno == EFBIG,
       "an append that hits the file size limit fails: %s", e.msg);
    is_int(file_size(path), size, "and leaves the file as it was");
    is_int(crl_journal_append(log, 3, buf, 20, NULL, &e), 0, "a smaller append still fits");
    crl_journal_close(log);
    rl.rlim_cur = rl.rlim_max = RLIM_INFINITY;
    setrlimit(RLIMIT_FSIZE, &rl);
    remove_dir();
}

/* A writer appends (in another process) while a reader follows: the reader
 * sees a growing prefix, never an error. */
static void test_concurrent_reader(void)
{
    make_dir();
    char path[4200];
    path_of(path, sizeof(path), "log");
    struct crl_journal *log = NULL;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_journal_open(path, &log, &e) < 0)
        bail_out(e.msg);
    const uint64_t total = 3000;
    pid_t pid = fork();
    if (pid == 0) {
        for (uint64_t i = 0; i < total; i++) {
            if (append_pattern(log, i, NULL) < 0)
                _exit(1);
            if (i % 500 == 0)
                crl_journal_sync(log, &e);
        }
        _exit(0);
    }
    struct crl_journal_reader *r = NULL;
    is_int(crl_journal_reader_open(path, NULL, &r, &e), 0, "a reader opens while a writer appends");
    struct crl_journal_record rec;
    uint64_t seen = 0, ends = 0;
    int mismatch = 0, failed = 0;
    unsigned long long t0 = crl_now_ns();
    while (seen < total && crl_now_ns() - t0 < 20000000000ULL) {
        int k = crl_journal_reader_next(r, &rec, &e);
        if (k < 0) {
            failed = 1;
            diag("reader: %s", e.msg);
            break;
        }
        if (k == 0) {
            ends++;
            continue;
        }
        mismatch += !record_matches(&rec, seen);
        seen++;
    }
    int status;
    waitpid(pid, &status, 0);
    crl_journal_close(log);
    ok(!failed, "the reader never failed");
    is_int(seen, total, "it read all %llu records as they came", (unsigned long long)total);
    is_int(mismatch, 0, "each one whole and in order");
    diag("the reader caught up with the writer %llu times", (unsigned long long)ends);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the writer succeeded");
    crl_journal_reader_close(r);
    remove_dir();
}

static void test_sync_many(void)
{
    make_dir();
    struct crl_journal *logs[4] = {0};
    struct crl_err e = CRL_ERR_INIT;
    for (int i = 0; i < 3; i++) {
        char path[4200], name[16];
        snprintf(name, sizeof(name), "log%d", i);
        path_of(path, sizeof(path), name);
        if (crl_journal_open(path, &logs[i], &e) < 0)
            bail_out(e.msg);
    }
    append_pattern(logs[0], 0, NULL);
    append_pattern(logs[2], 0, NULL);
    append_pattern(logs[2], 1, NULL);
    struct crl_journal *list[] = {logs[0], logs[1], NULL, logs[2], logs[0]};
    is_int(crl_journal_sync_many(list, 0, &e), 0, "sync_many of no logs");
    is_int(crl_journal_sync_many(list, 5, &e), 0, "sync_many over dirty, clean, NULL and repeats");
    int dirty = 0;
    for (int i = 0; i < 3; i++) {
        struct crl_journal_info info;
        crl_journal_info(logs[i], &info);
        dirty += info.dirty;
        crl_journal_close(logs[i]);
    }
    is_int(dirty, 0, "every log is clean after it");
    remove_dir();
}

static double secs(unsigned long long ns)
{
    return (double)ns / 1e9;
}

/* Figures, not gates: fdatasync per append against one sync for many
 * appends, and per-log syncs against one sync_many pass over many logs. */
static void test_sync_figures(void)
{
    make_dir();
    struct statfs sf;
    if (statfs(dir, &sf) == 0)
        diag("figures for %s (filesystem magic 0x%lx%s)", dir, (unsigned long)sf.f_type,
             sf.f_type == 0x01021994 ? ", tmpfs: fdatasync costs nothing here" : "");
    enum { N = 200, K = 16, M = 20 };
    char path[4200];
    path_of(path, sizeof(path), "one");
    struct crl_journal *log = NULL;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_journal_open(path, &log, &e) < 0)
        bail_out(e.msg);
    uint8_t payload[512];
    memset(payload, 'x', sizeof(payload));
    int fails = 0;
    unsigned long long t = crl_now_ns();
    for (int i = 0; i < N; i++)
        fails += crl_journal_append(log, 1, payload, sizeof(payload), NULL, &e) < 0 ||
                 crl_journal_sync(log, &e) < 0;
    unsigned long long each = crl_now_ns() - t;
    t = crl_now_ns();
    for (int i = 0; i < N; i++)
        fails += crl_journal_append(log, 1, payload, sizeof(payload), NULL, &e) < 0;
    fails += crl_journal_sync(log, &e) < 0;
    unsigned long long group = crl_now_ns() - t;
    crl_journal_close(log);
    diag("one log, %d appends of 512 B: sync after each %.1f ms (%.0f us/append), one sync at "
         "the end %.2f ms (%.1f us/append): %.0fx",
         N, secs(each) * 1e3, secs(each) * 1e6 / N, secs(group) * 1e3, secs(group) * 1e6 / N,
         (double)each / (double)(group ? group : 1));

    struct crl_journal *logs[K];
    for (int i = 0; i < K; i++) {
        char name[16];
        snprintf(name, sizeof(name), "many%d", i);
        path_of(path, sizeof(path), name);
        if (crl_journal_open(path, &logs[i], &e) < 0)
            bail_out(e.msg);
    }
    t = crl_now_ns();
    for (int round = 0; round < M; round++)
        for (int i = 0; i < K; i++)
            fails += crl_journal_append(logs[i], 1, payload, sizeof(payload), NULL, &e) < 0 ||
                     crl_journal_sync(logs[i], &e) < 0;
    unsigned long long per_log = crl_now_ns() - t;
    t = crl_now_ns();
    for (int round = 0; round < M; round++) {
        for (int i = 0; i < K; i++)
            fails += crl_journal_append(logs[i], 1, payload, sizeof(payload), NULL, &e) < 0;
        fails += crl_journal_sync_many(logs, K, &e) < 0;
    }
    unsigned long long many = crl_now_ns() - t;
    for (int i = 0; i < K; i++)
        crl_journal_close(logs[i]);
    diag("%d logs x %d rounds, one step per log a round: %.0f us/step synced one by one, "
         "%.0f us/step with one sync_many a round (%.2fx): one fdatasync per file is the "
         "unit",
         K, M, secs(per_log) * 1e6 / (K * M), secs(many) * 1e6 / (K * M),
         (double)per_log / (double)(many ? many : 1));
    is_int(fails, 0, "every append and sync of the figures succeeded");
    remove_dir();
}

int main(void)
{
    TAP_RUN(test_round_trip, 30);
    TAP_RUN(test_reopen_and_append, 30);
    TAP_RUN(test_lock, 30);
    TAP_RUN(test_torn_tail_every_length, 120);
    TAP_RUN(test_corrupt_middle, 30);
    TAP_RUN(test_bad_header, 30);
    TAP_RUN(test_empty_file, 30);
    TAP_RUN(test_limits, 60);
    TAP_RUN(test_concurrent_reader, 60);
    TAP_RUN(test_sync_many, 30);
    TAP_RUN(test_sync_figures, 120);
    return done_testing();
}
