/* Records of live sandboxes, and the sandboxes a crashed corrald lost
 * (records.h). */
#include "records.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "../image/store.h"
#include "host.h"

#define LOG_READ_MAX (256u << 20) /* what a start reads of a log left behind */
#define LOG_COMPACT (16u << 20)   /* a log this long is written anew from the live */

/* sb-<host>-<hex>, as crl_host makes them: nothing else is taken for one. */
static bool id_ok(const char *id)
{
    size_t n = strlen(id);
    return n > 3 && n < 40 && strncmp(id, "sb-", 3) == 0 &&
           strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

static void log_path(const struct crl_host *h, char *out, size_t cap, const char *suffix)
{
    snprintf(out, cap, "%s/records.log%s", h->records_dir, suffix);
}

void crl_records_dir(const char *shared_dir, const char *host_id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/hosts/%s", shared_dir, host_id);
}

/* What a sandbox is, not how it runs (no usage: reading that costs a
 * create as much again); and, for a backend that can be adopted, what a
 * corrald started anew needs to take it over (records.h). */
json_t *crl_record_json(struct crl_sandbox *sb)
{
    json_t *labels = json_object();
    for (size_t i = 0; i < sb->spec.n_labels; i++)
        json_object_set_new(labels, sb->spec.labels[i].key, json_string(sb->spec.labels[i].value));
    json_t *o = json_pack("{s:s, s:s, s:s?, s:o, s:o, s:o, s:o}", "id", sb->id, "backend",
                          sb->spec.backend, "image", sb->spec.image[0] ? sb->spec.image : NULL,
                          "spec", crl_spec_to_json(&sb->spec), "labels", labels, "created_at",
                          crl_json_time(sb->created_at), "ready_at", crl_json_time(sb->ready_at));
    json_t *backend = sb->ops->adopt_record ? sb->ops->adopt_record(sb) : NULL;
    if (o && backend) {
        const struct crl_host *h = sb->host;
        if (json_object_size(sb->children))
            json_object_set(backend, "children", sb->children);
        if (json_object_size(sb->lost_children))
            json_object_set(backend, "lost_children", sb->lost_children);
        if (json_object_size(sb->notes))
            json_object_set(backend, "notes", sb->notes);
        json_t *a = json_pack("{s:i, s:s, s:i, s:I, s:s?, s:f, s:f, s:f, s:i, s:b, s:b, s:o}", "v",
                              CRL_RECORD_ADOPT_V, "boot_id", h->boot_id, "slot", (int)sb->slot,
                              "uid_base", (json_int_t)(h->cfg.uid_base + sb->slot * 65536u),
                              "image_id", sb->image && sb->image->rec ? sb->image->rec->id : NULL,
                              "created_s", sb->created_at, "ready_s", sb->ready_at, "expires_at",
                              sb->expires_at, "timeout_s", (int)sb->timeout_s, "ttl_paused",
                              sb->ttl_paused, "net_linked", sb->net_linked, "backend", backend);
        if (a && sb->net_linked) /* its addresses are the range's */
            json_object_set_new(a, "network_range", json_string(h->cfg.network_range));
        json_object_set_new(o, "adopt", a);
    } else {
        json_decref(backend);
    }
    return o;
}

/* One line, in one write (O_APPEND: whole, or cut short by a crash, which
 * the next start skips). */
static void append(struct crl_host *h, const char *line, size_t len)
{
    if (h->records_fd < 0)
        return;
    if (crl_write_full(h->records_fd, line, len) < 0)
        crl_warn(NULL, "records: %s", strerror(errno));
    h->records_bytes += len;
}

/* "+{record}\n", in one write. */
static int append_record(struct crl_host *h, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    size_t n = s ? strlen(s) : 0;
    char *line = s ? malloc(n + 3) : NULL;
    if (line) {
        line[0] = '+';
        memcpy(line + 1, s, n);
        line[n + 1] = '\n';
        append(h, line, n + 2);
    }
    free(line);
    free(s);
    return line ? 0 : -1;
}

static int reopen(struct crl_host *h, struct crl_err *err)
{
    char path[4200];
    log_path(h, path, sizeof(path), "");
    if (h->records_fd >= 0)
        close(h->records_fd);
    h->records_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    h->records_bytes = 0;
    return h->records_fd < 0 ? crl_err_sys(err, errno, "open %s", path) : 0;
}

/* Read the log a run left: each "+{record}" line adds, "-ID" removes;
 * what is left was live when it died. */
json_t *crl_records_read(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/records.log", dir);
    char *text = NULL;
    size_t len = 0;
    struct crl_err err = CRL_ERR_INIT;
    if (crl_read_file_alloc(path, LOG_READ_MAX, &text, &len, &err) < 0) {
        if (access(path, F_OK) == 0)
            crl_warn(NULL, "records: %s", err.msg);
        return NULL;
    }
    json_t *live = json_object();
    for (char *line = text, *end = text + len; line < end;) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl)
            break; /* cut short by the crash */
        *nl = 0;
        if (line[0] == '-') {
            json_object_del(live, line + 1);
        } else if (line[0] == '+') {
            json_t *rec = json_loadb(line + 1, (size_t)(nl - line - 1), 0, NULL);
            const char *id = json_string_value(json_object_get(rec, "id"));
            if (json_is_object(rec) && id && id_ok(id))
                json_object_set(live, id, rec);
            json_decref(rec);
        }
        line = nl + 1;
    }
    free(text);
    return live;
}

void crl_records_lost_add(struct crl_host *h, json_t *rec, const char *reason, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *id = json_string_value(json_object_get(rec, "id"));
    if (!id)
        return;
    crl_warn(id, "lost (%s): %s", reason, msg);
    json_object_del(rec, "adopt"); /* how it ran: nothing a client needs */
    json_object_set_new(rec, "state", json_string("lost"));
    json_object_set_new(rec, "end_reason", json_string("corrald_restarted"));
    json_object_set_new(rec, "lost_reason", json_string(reason));
    json_object_set_new(rec, "message", json_string(msg));
    json_object_set_new(rec, "lost_at", json_real(crl_wall_s()));
    json_object_set(h->lost, id, rec);
    char line[64];
    int n = snprintf(line, sizeof(line), "-%s\n", id);
    append(h, line, (size_t)n);
}

int crl_records_open(struct crl_host *h, json_t **left, struct crl_err *err)
{
    *left = NULL;
    if (!(h->lost = json_object()))
        return crl_err_sys(err, ENOMEM, "records");
    if (h->cfg.shared_dir) {
        crl_records_dir(h->cfg.shared_dir, h->cfg.host_id, h->records_dir, sizeof(h->records_dir));
        if (crl_mkdir_p(h->records_dir, 0700) < 0)
            return crl_err_sys(err, errno, "%s", h->records_dir);
    } else {
        snprintf(h->records_dir, sizeof(h->records_dir), "%s", h->state_dir);
    }
    json_t *live = crl_records_read(h->records_dir);
    if (reopen(h, err) < 0) {
        json_decref(live);
        return -1;
    }
    /* Written again at once: a crash before each is adopted or reported
     * lost finds them all as they were. */
    const char *id;
    json_t *rec;
    json_object_foreach(live, id, rec) append_record(h, rec);
    *left = live;
    return 0;
}

void crl_records_free(struct crl_host *h)
{
    json_decref(h->lost);
    h->lost = NULL;
    if (h->records_fd >= 0)
        close(h->records_fd);
    h->records_fd = -1;
}

/* The log written anew from the live sandboxes, once it has grown long. */
static void compact(struct crl_host *h)
{
    char path[4200], tmp[4300];
    log_path(h, path, sizeof(path), "");
    log_path(h, tmp, sizeof(tmp), ".tmp");
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    for (struct crl_sandbox *sb = h->sandboxes; sb; sb = sb->next) {
        if (sb->pool || sb->ready_at <= 0 || sb->state == CRL_SB_DESTROYED)
            continue;
        json_t *o = crl_record_json(sb);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (s)
            crl_buf_printf(&b, "+%s\n", s);
        free(s);
        json_decref(o);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (b.len && crl_write_full(fd, b.data, b.len) < 0) || rename(tmp, path) < 0) {
        crl_warn(NULL, "records: compacting %s: %s", path, strerror(errno));
    } else {
        close(h->records_fd);
        h->records_fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
        h->records_bytes = b.len;
    }
    if (fd >= 0)
        close(fd);
    crl_buf_free(&b);
}

void crl_record_write(struct crl_host *h, struct crl_sandbox *sb)
{
    json_t *o = crl_record_json(sb);
    if (!o || append_record(h, o) < 0)
        crl_warn(sb->id, "records: encoding its record");
    json_decref(o);
}

void crl_record_remove(struct crl_host *h, struct crl_sandbox *sb)
{
    char line[64];
    int n = snprintf(line, sizeof(line), "-%s\n", sb->id);
    append(h, line, (size_t)n);
    if (h->records_bytes > LOG_COMPACT)
        compact(h);
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
