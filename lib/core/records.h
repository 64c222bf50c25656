/* Records of a host's live sandboxes, in one log, <state>/records.log (in a
 * cluster whose hosts share a directory, <shared>/hosts/<id>/records.log,
 * which every host reads for a lost host's sandboxes): a
 * line "+{record}" when a sandbox is ready (what it is: id, spec, labels,
 * times) and "-ID" when it ends, each one write to a descriptor kept open
 * (no file made per sandbox: on ext4 here a new file costs 0.9 ms, an
 * append microseconds); written anew from the live ones once it passes
 * 16 MiB.  A corrald that starts and finds records left there is after one
 * that died without ending them (a crash, a kill -9).  A record of a
 * backend that can be adopted says how its sandbox ran ("adopt": the
 * boot, slot, uid base, image id, TTL, and the backend's part, such as
 * its PID 1's pid and start time), and the new corrald takes that sandbox
 * over if it still runs as recorded (lib/core/host.c).  Every other one is
 * reported lost, with why, for as long as an ended sandbox is kept
 * (tombstone_s): a client holding its id gets state `lost`, never a 404. */
#ifndef CRL_CORE_RECORDS_H
#define CRL_CORE_RECORDS_H

#include <jansson.h>

#include "../util/err.h"

struct crl_host;
struct crl_sandbox;

#define CRL_RECORD_ADOPT_V 1 /* the "adopt" object's version */

/* At start: the log is opened anew and *left gets the records the last
 * run left (an object by id, or NULL), each written to the new log again
 * until it is adopted or reported lost (crl_records_lost_add). */
int crl_records_open(struct crl_host *h, json_t **left, struct crl_err *err);
/* A record left that is not adopted: reported lost for `reason` (a word,
 * lost_reason in its JSON), with a message. */
void crl_records_lost_add(struct crl_host *h, json_t *rec, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void crl_records_free(struct crl_host *h);
void crl_record_write(struct crl_host *h, struct crl_sandbox *sb);
/* The record of a sandbox, as crl_record_write writes it. */
json_t *crl_record_json(struct crl_sandbox *sb);
void crl_record_remove(struct crl_host *h, struct crl_sandbox *sb);
/* A lost sandbox's JSON (borrowed), or NULL. */
json_t *crl_records_lost(struct crl_host *h, const char *id);
/* Append every lost sandbox's JSON to `items`. */
void crl_records_list(struct crl_host *h, json_t *items);

/* Where host `host_id` keeps its records when the hosts share `shared_dir`. */
void crl_records_dir(const char *shared_dir, const char *host_id, char *out, size_t cap);
/* The records a host left in `dir` (records.log): those of the sandboxes
 * it had when it died, as an object by id; NULL when there are none. */
json_t *crl_records_read(const char *dir);

#endif
