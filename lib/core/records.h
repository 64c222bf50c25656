/* Records of a host's live sandboxes, in one log, <state>/records.log (in a
 * cluster whose hosts share a directory, <shared>/hosts/<id>/records.log,
 * which every host reads for a lost host's sandboxes): a
 * line "+{record}" when a sandbox is ready (what it is: id, spec, labels,
 * times) and "-ID" when it ends, each one write to a descriptor kept open
 * (no file made per sandbox: on ext4 here a new file costs 0.9 ms, an
 * append microseconds); written anew from the live ones once it passes
 * 16 MiB.  A corrald that starts and finds records left there is after one
 * that died without ending them (a crash, a kill -9): their processes went
 * with that daemon and its reconcile removed the rest, so each is reported
 * lost, with why, for as long as an ended sandbox is kept (tombstone_s):
 * a client holding its id gets state `lost`, never a 404. */
#ifndef CRL_CORE_RECORDS_H
#define CRL_CORE_RECORDS_H

#include <jansson.h>

#include "../util/err.h"

struct crl_host;
struct crl_sandbox;

/* At start, after the reconcile: the records left become the lost. */
int crl_records_open(struct crl_host *h, struct crl_err *err);
void crl_records_free(struct crl_host *h);
void crl_record_write(struct crl_host *h, struct crl_sandbox *sb);
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
