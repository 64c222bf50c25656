/* The journal: the storage layer of a trajectory's log
 * (<state>/trajectories/<tid>/log), an append-only file of framed records,
 * with recovery of a torn tail.  The payload of a record is opaque here;
 * the trajectory module puts JSON in it.
 *
 * Format (version 1).  Every integer is little-endian, whatever the host, so
 * a log written on one host reads the same on another over a shared
 * filesystem; nothing in it names the host, a pid or an fd.
 *
 *   file header, 32 bytes:
 *     0  8  magic "CRLTRAJ1"
 *     8  4  u32 version (1; a newer one is refused with CRL_E_UNSUPPORTED)
 *    12  4  u32 flags (0; non-zero is refused)
 *    16  8  i64 created, nanoseconds since the Unix epoch
 *    24  4  u32 reserved (0)
 *    28  4  u32 CRC-32 of bytes 0..27
 *   then records, back to back, each 9 bytes of frame and its payload:
 *     0  4  u32 len, the payload's length (at most CRL_JOURNAL_MAX_PAYLOAD)
 *     4  4  u32 CRC-32 of the type byte followed by the payload
 *     8  1  u8 type (1..255; 0 is never written, so zeros never validate)
 *     9     len bytes of payload
 *
 * The checksum is CRC-32 as zlib computes it (the IEEE 802.3 polynomial,
 * crc32(3)), not CRC-32C.  Debian's only C library with CRC-32C is Intel's
 * ISA-L (libisal), a new dependency for one function; zlib is on every host
 * already (python3-dev pulls in zlib1g-dev).  Speed does not decide it: zlib
 * 1.2.13 checks 5 GB/s here, 3 ms for a 16 MiB record, against the
 * fdatasync that makes it durable.  CRC-32C would catch more bit errors for
 * certain in one record (Koopman: 6 against 4 at 650 bytes, 4 against 3
 * past 11 KiB); against a torn write or random damage either misses 2^-32.
 * Changing it is a new version of the format.
 *
 * Recovery.  A record is written in one pwritev(2) at the end of the file.
 * A crash can leave a torn tail: a short frame, a short payload, or a
 * payload whose CRC does not match (its blocks never reached the disk).
 * When a record at offset X is bad, the rest of the file is searched for a
 * valid record at any byte offset after X:
 *   - none: X starts a torn tail.  Opening for append truncates the file to
 *     X (counted in crl_journal_info.torn_bytes); a reader stops there.
 *   - one:  the log is corrupt (a bad record followed by valid data): both
 *     refuse with CRL_E_INTERNAL and a message naming the file and X.
 * The search is bounded (CRL_JOURNAL_SCAN_BUDGET bytes checksummed); past that
 * the log is refused rather than guessed at.  A torn record whose payload
 * embeds the bytes of a valid record would be taken for corruption: refusal
 * loses nothing, and JSON payloads cannot hold the NUL bytes a frame has.
 * A file shorter than the header that starts like one (a header write torn
 * in an empty file) holds no records: a reader sees none and opening for
 * append writes the header anew.
 *
 * Durability.  crl_journal_append() only writes; a record is durable once
 * crl_journal_sync() (fdatasync(2)) or crl_journal_sync_many() returns 0 after
 * it.  One fdatasync per file is the unit of cost: group commit is many
 * appends, to one log or to many, then one pass that syncs each dirty log
 * once.  N appends to one log and one sync cost about one sync; across logs
 * the syncs run one after another, each its own fdatasync.  (Issuing them
 * in parallel, which a journaling filesystem may batch into one commit, is
 * the caller's choice, from its worker pool.)  A failed fdatasync poisons
 * the log, since the kernel may have dropped the dirty pages and a retry
 * would lie: every later call fails, and the caller reopens, which
 * re-validates what is on disk.  A new log is created under a temporary
 * name, its header synced, then linked into place and the directory synced,
 * so no log without a header ever appears.
 *
 * One writer per log: opening for append takes an OFD write lock on the file
 * (fcntl F_OFD_SETLK; over NFS, a lock of the lock manager), and a second
 * opener gets CRL_E_CONFLICT.  Readers take no lock and may run while a
 * writer appends: they see a prefix of the log.
 *
 * Errors are struct crl_err (lib/util/err.h); every message about the
 * contents of a log names its path and the byte offset. */
#ifndef CRL_TRAJ_JOURNAL_H
#define CRL_TRAJ_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

#define CRL_JOURNAL_MAGIC "CRLTRAJ1"
#define CRL_JOURNAL_VERSION 1u
#define CRL_JOURNAL_HEADER_SIZE 32u
#define CRL_JOURNAL_FRAME_SIZE 9u
#define CRL_JOURNAL_MAX_PAYLOAD (16u << 20)
#define CRL_JOURNAL_SCAN_BUDGET (256ull << 20)

struct crl_journal;
struct crl_journal_reader;

/* Where a record is: its number from 0 and the byte offset of its frame. */
struct crl_journal_pos {
    uint64_t index;
    uint64_t offset;
};

struct crl_journal_info {
    uint64_t records;    /* records in the log */
    uint64_t size;       /* bytes in the file: where the next record goes */
    int64_t created_ns;  /* from the header */
    uint64_t torn_bytes; /* dropped by this open as a torn tail (0: none) */
    int dirty;           /* appended since the last sync */
};

/* Open the log at `path` for appending, creating it (mode 0600; its
 * directory must exist) if it does not exist.  Validates every record and
 * truncates a torn tail.  Fails with CRL_E_CONFLICT if another open holds it
 * for append, CRL_E_UNSUPPORTED for a newer version, CRL_E_INTERNAL for a
 * file that is not a log or is corrupt (message: path and byte offset). */
int crl_journal_open(const char *path, struct crl_journal **out, struct crl_err *err);

/* Append one record (type 1..255; len <= CRL_JOURNAL_MAX_PAYLOAD, else
 * CRL_E_INVALID / CRL_E_TOO_LARGE).  Written, not yet durable.  *pos (may be
 * NULL) gets the record's index and offset.  A failed write leaves the file
 * as it was before the call, or poisons the log if it cannot. */
int crl_journal_append(struct crl_journal *log, uint8_t type, const void *payload, size_t len,
                       struct crl_journal_pos *pos, struct crl_err *err);

/* Make every appended record durable: one fdatasync(2), none if nothing
 * was appended since the last sync. */
int crl_journal_sync(struct crl_journal *log, struct crl_err *err);

/* Group commit: sync each dirty log in logs[0..n) once (a log listed twice
 * is synced once, as it is clean by then; NULL entries are skipped).  Every
 * log is tried; on failure returns -1 with *err about the first log that
 * failed (each failed one is poisoned), and the others are durable. */
int crl_journal_sync_many(struct crl_journal *const *logs, size_t n, struct crl_err *err);

void crl_journal_info(const struct crl_journal *log, struct crl_journal_info *info);
const char *crl_journal_path(const struct crl_journal *log);

/* Close (NULL is fine).  Does not sync: records not synced may be lost. */
void crl_journal_close(struct crl_journal *log);

/* Torn tails dropped by crl_journal_open() in this process, for metrics. */
uint64_t crl_journal_torn_tails_total(void);

/* One record from a reader: payload (len bytes, followed by a NUL not
 * counted in len) stays valid until the next call on the reader. */
struct crl_journal_record {
    struct crl_journal_pos pos;
    uint8_t type;
    uint32_t len;
    const uint8_t *payload;
};

/* Read the log at `path` from the first record, or from `from` (a position
 * that crl_journal_append() or a record returned; indexes continue from
 * from->index).  Validates the header like crl_journal_open(). */
int crl_journal_reader_open(const char *path, const struct crl_journal_pos *from,
                            struct crl_journal_reader **out, struct crl_err *err);

/* The next record: 1 and *rec, 0 at the end of what is there now (a torn or
 * still-being-written tail ends it too; call again later to see records
 * appended since), -1 for a corrupt log (CRL_E_INTERNAL naming the path and
 * offset) or a failed read. */
int crl_journal_reader_next(struct crl_journal_reader *r, struct crl_journal_record *rec,
                            struct crl_err *err);

/* Where the next record would start, and the header's creation time. */
struct crl_journal_pos crl_journal_reader_pos(const struct crl_journal_reader *r);
int64_t crl_journal_reader_created_ns(const struct crl_journal_reader *r);

void crl_journal_reader_close(struct crl_journal_reader *r);

#endif
