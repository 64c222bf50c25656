/* Records of live sandboxes, and the sandboxes a crashed corrald lost
 * (records.h). */
#include "records.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/fdio.h"
#include "../util/log.h"
#include "host.h"

#define RECORD_MAX (64u << 10)

/* sb-<host>-<hex>, as crl_host makes them: a file name of ours, nothing
 * else is taken for one. */
static bool id_ok(const char *id)
{
    size_t n = strlen(id);
    return n > 3 && n < 40 && strncmp(id, "sb-", 3) == 0 &&
           strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

static void record_path(const struct crl_host *h, const char *id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/records/%s.json", h->state_dir, id);
}

/* A record as the lost sandbox is shown: what GET showed of it when it
 * was ready, ended now, with why. */
static json_t *lost_json(json_t *rec, const char *id, double now, const char *why)
{
    json_t *o = json_is_object(rec) ? json_deep_copy(rec) : json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "state", json_string("lost"));
    json_object_set_new(o, "end_reason", json_string("corrald_restarted"));
    json_object_set_new(o, "message", json_string(why));
    json_object_set_new(o, "lost_at", json_real(now));
    return o;
}

int crl_records_open(struct crl_host *h, struct crl_err *err)
{
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/records", h->state_dir);
    if (!(h->lost = json_object()))
        return crl_err_sys(err, ENOMEM, "records");
    if (crl_mkdir_p(dir, 0700) < 0)
        return crl_err_sys(err, errno, "mkdir %s", dir);
    DIR *d = opendir(dir);
    if (!d)
        return crl_err_sys(err, errno, "opendir %s", dir);
    double now = crl_wall_s();
    unsigned n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char id[64], path[4400];
        snprintf(id, sizeof(id), "%.*s", (int)(len - 5), de->d_name);
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        /* What was written by a corrald of ours, but read as anything:
         * bounded, and kept only as an object. */
        char *text = NULL;
        size_t tlen = 0;
        struct crl_err rerr = CRL_ERR_INIT;
        json_t *rec = crl_read_file_alloc(path, RECORD_MAX, &text, &tlen, &rerr) == 0
                          ? json_loadb(text, tlen, 0, NULL)
                          : NULL;
        free(text);
        if (!id_ok(id) || json_object_get(h->lost, id)) {
            unlink(path);
            json_decref(rec);
            continue;
        }
        json_object_set_new(
            h->lost, id,
            lost_json(rec, id, now,
                      "corrald was restarted while it ran (a crash or a kill), and its processes "
                      "went with the daemon: it was not adopted"));
        json_decref(rec);
        unlink(path);
        n++;
    }
    closedir(d);
    if (n)
        crl_warn(NULL,
                 "reconcile: %u sandbox(es) of the previous run lost; each is reported lost "
                 "(GET answers state lost) for %.0f s",
                 n, h->cfg.tombstone_s);
    return 0;
}

void crl_records_free(struct crl_host *h)
{
    json_decref(h->lost);
    h->lost = NULL;
}

void crl_record_write(struct crl_host *h, struct crl_sandbox *sb)
{
    char path[4200], tmp[4300];
    record_path(h, sb->id, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    json_t *o = crl_sandbox_json(sb);
    /* The record is written once, when it is ready; no fsync: it is for a
     * daemon that crashed, not for a machine that did. */
    if (!o || json_dump_file(o, tmp, JSON_COMPACT) < 0 || rename(tmp, path) < 0)
        crl_warn(sb->id, "writing its record %s: %s", path, strerror(errno));
    json_decref(o);
}

void crl_record_remove(struct crl_host *h, struct crl_sandbox *sb)
{
    char path[4200];
    record_path(h, sb->id, path, sizeof(path));
    if (unlink(path) < 0 && errno != ENOENT)
        crl_warn(sb->id, "removing its record %s: %s", path, strerror(errno));
}

json_t *crl_records_lost(struct crl_host *h, const char *id)
{
    json_t *o = h->lost ? json_object_get(h->lost, id) : NULL;
    json_t *at = json_object_get(o, "lost_at");
    if (o && crl_wall_s() - json_real_value(at) > h->cfg.tombstone_s) {
        json_object_del(h->lost, id); /* kept as long as any ended sandbox */
        return NULL;
    }
    return o;
}

void crl_records_list(struct crl_host *h, json_t *items)
{
    const char *id;
    json_t *o, *tmp;
    json_object_foreach_safe(h->lost, tmp, id, o)
    {
        if (crl_records_lost(h, id))
            json_array_append(items, o);
    }
}
