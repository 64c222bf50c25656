/* libFuzzer driver for lib/traj/journal: arbitrary bytes as a trajectory
 * log file.  Beyond "no crash, no leak, no UB" it checks the contract of
 * journal.h:
 *   - a reader either refuses the header (CRL_E_INTERNAL or
 *     CRL_E_UNSUPPORTED, naming the file) or returns records that lie inside
 *     the file, back to back from byte 32, then ends (0) or fails with
 *     CRL_E_INTERNAL naming the file and a byte offset;
 *   - opening for append agrees with the reader: it refuses exactly when the
 *     reader failed, and then leaves the file byte for byte as it was;
 *     otherwise it keeps the records the reader saw, truncates the rest, and
 *     a record appended then is read back after them.
 * The file lives in $TMPDIR, else /dev/shm (fdatasync is free on tmpfs).
 *
 *   tests/fuzz/run.sh builds it; corpus: tests/fuzz/corpus/journal,
 *   dictionary: tests/fuzz/journal.dict */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/traj/journal.h"
#include "../../lib/util/fdio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_journal: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static char dir[4096], path[4200];

static void remove_dir(void)
{
    crl_rm_rf_at(AT_FDCWD, dir);
}

static void setup(void)
{
    struct stat st;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof(dir), "%s/corral-fuzz-traj.XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "fuzz_journal: mkdtemp %s: %s\n", dir, strerror(errno));
        abort();
    }
    snprintf(path, sizeof(path), "%s/log", dir);
    atexit(remove_dir);
}

static void write_input(const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    CHECK(crl_write_full(fd, data, size) == 0);
    close(fd);
}

/* The file's bytes now (malloc'd, *len). */
static uint8_t *slurp(size_t *len)
{
    char *buf = NULL;
    struct crl_err e = CRL_ERR_INIT;
    CHECK(crl_read_file_alloc(path, 1 << 26, &buf, len, &e) == 0);
    return (uint8_t *)buf;
}

static void check_message(const struct crl_err *e)
{
    CHECK(e->msg[0] != 0);
    CHECK(memchr(e->msg, 0, sizeof(e->msg)) != NULL);
    CHECK(strstr(e->msg, path) != NULL);
}

struct outcome {
    int refused;  /* the reader refused the header */
    int failed;   /* the reader failed after it, on a record */
    uint64_t n;   /* records read */
    uint64_t end; /* the offset after the last of them */
};

static struct outcome read_log(size_t size)
{
    struct outcome o = {0};
    struct crl_journal_reader *r = NULL;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_journal_reader_open(path, NULL, &r, &e) < 0) {
        CHECK(e.code == CRL_E_INTERNAL || e.code == CRL_E_UNSUPPORTED);
        check_message(&e);
        CHECK(r == NULL);
        o.refused = 1;
        return o;
    }
    o.end = CRL_JOURNAL_HEADER_SIZE;
    struct crl_journal_record rec;
    int k;
    while ((k = crl_journal_reader_next(r, &rec, &e)) == 1) {
        CHECK(rec.pos.index == o.n && rec.pos.offset == o.end);
        CHECK(rec.type != 0 && rec.len <= CRL_JOURNAL_MAX_PAYLOAD);
        CHECK(rec.pos.offset + CRL_JOURNAL_FRAME_SIZE + rec.len <= size);
        CHECK(rec.payload[rec.len] == 0);
        o.end += CRL_JOURNAL_FRAME_SIZE + rec.len;
        o.n++;
    }
    struct crl_journal_pos pos = crl_journal_reader_pos(r);
    CHECK(pos.index == o.n && pos.offset == o.end);
    if (k < 0) {
        CHECK(e.code == CRL_E_INTERNAL);
        check_message(&e);
        CHECK(strstr(e.msg, "byte offset") != NULL);
        o.failed = 1;
    }
    crl_journal_reader_close(r);
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    write_input(data, size);
    struct outcome o = read_log(size);

    struct crl_journal *log = NULL;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_journal_open(path, &log, &e) < 0) {
        CHECK(o.refused || o.failed);
        CHECK(log == NULL);
        CHECK(e.code == CRL_E_INTERNAL || e.code == CRL_E_UNSUPPORTED);
        check_message(&e);
        size_t len;
        uint8_t *now = slurp(&len);
        CHECK(len == size && memcmp(now, data, size) == 0);
        free(now);
        return 0;
    }
    CHECK(!o.refused && !o.failed);
    struct crl_journal_info info;
    crl_journal_info(log, &info);
    CHECK(info.records == o.n && info.size == o.end);
    size_t len;
    uint8_t *now = slurp(&len);
    CHECK(len == info.size);
    if (size >= CRL_JOURNAL_HEADER_SIZE && info.torn_bytes == size - info.size)
        CHECK(memcmp(now, data, len) == 0); /* the valid prefix is untouched */
    else
        CHECK(o.n == 0 && info.torn_bytes == size); /* no header yet: a new one */
    free(now);

    struct crl_journal_pos pos;
    CHECK(crl_journal_append(log, 0x42, "{\"fuzz\":1}", 10, &pos, &e) == 0);
    CHECK(pos.index == o.n && pos.offset == o.end);
    CHECK(crl_journal_sync(log, &e) == 0);
    crl_journal_close(log);

    struct outcome after = read_log(o.end + CRL_JOURNAL_FRAME_SIZE + 10);
    CHECK(!after.refused && !after.failed);
    CHECK(after.n == o.n + 1 && after.end == o.end + CRL_JOURNAL_FRAME_SIZE + 10);
    return 0;
}
