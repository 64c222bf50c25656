#include "msg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "proto.h"

/* ---- reading fields ---- */

/* A key or value the peer sent, fit for a message: printable ASCII, the
 * rest as '?', cut at 40 bytes. */
static const char *shown(const char *s, char *buf, size_t n)
{
    size_t o = 0;
    for (; *s && o + 4 < n && o < 40; s++)
        buf[o++] = (*s >= 0x20 && *s < 0x7f) ? *s : '?';
    if (*s && o + 4 <= n) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = 0;
    return buf;
}

static int load(const char *what, const void *p, size_t len, json_t **root, struct crl_err *err)
{
    if (len > CRL_AGENT_MAX_JSON)
        return crl_err_set(err, CRL_E_INVALID, "%s: %zu bytes is over the 64 KiB limit", what, len);
    json_error_t je;
    *root = json_loadb(p, len, JSON_REJECT_DUPLICATES, &je);
    if (!*root)
        return crl_err_set(err, CRL_E_INVALID, "%s: not JSON at byte %d: %s", what, je.position,
                           je.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return crl_err_set(err, CRL_E_INVALID, "%s: not a JSON object", what);
    }
    return 0;
}

/* Refuse keys outside `known` (a NULL-terminated list). */
static int known_keys(const char *what, json_t *o, const char *const *known, struct crl_err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        const char *const *q = known;
        while (*q && strcmp(*q, k) != 0)
            q++;
        if (!*q) {
            char b[48];
            return crl_err_set(err, CRL_E_INVALID, "%s: unknown key \"%s\"", what,
                               shown(k, b, sizeof(b)));
        }
    }
    return 0;
}

enum text_kind {
    T_NAME,   /* printable ASCII */
    T_TEXT,   /* UTF-8 (jansson's check) without control characters but tab */
    T_PATH,   /* absolute */
    T_DEVICE, /* absolute, under /dev/ */
    T_FILE,   /* a small text file: UTF-8 without control characters but tab and newline */
};

static int check_text(const char *what, const char *field, const char *s, size_t n,
                      enum text_kind kind, size_t max, struct crl_err *err)
{
    if (strlen(s) != n)
        return crl_err_set(err, CRL_E_INVALID, "%s: %s holds a NUL", what, field);
    if (n > max)
        return crl_err_set(err, CRL_E_INVALID, "%s: %s of %zu bytes is over the limit of %zu", what,
                           field, n, max);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && !((kind == T_TEXT || kind == T_FILE) && c == '\t') &&
             !(kind == T_FILE && c == '\n')) ||
            c == 0x7f || (kind == T_NAME && c >= 0x80))
            return crl_err_set(err, CRL_E_INVALID, "%s: %s has byte 0x%02x at offset %zu", what,
                               field, c, i);
    }
    if ((kind == T_PATH || kind == T_DEVICE) && s[0] != '/')
        return crl_err_set(err, CRL_E_INVALID, "%s: %s is not an absolute path", what, field);
    if (kind == T_DEVICE && strncmp(s, "/dev/", 5) != 0)
        return crl_err_set(err, CRL_E_INVALID, "%s: %s is not under /dev/", what, field);
    return 0;
}

/* A string field into out (max bytes and a NUL).  Absent: "" if !required. */
static int get_text(const char *what, json_t *o, const char *key, bool required,
                    enum text_kind kind, char *out, size_t max, struct crl_err *err)
{
    json_t *v = json_object_get(o, key);
    out[0] = 0;
    if (!v) {
        if (required)
            return crl_err_set(err, CRL_E_INVALID, "%s: %s is missing", what, key);
        return 0;
    }
    if (!json_is_string(v))
        return crl_err_set(err, CRL_E_INVALID, "%s: %s is not a string", what, key);
    size_t n = json_string_length(v);
    if (check_text(what, key, json_string_value(v), n, kind, max, err) < 0)
        return -1;
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

static int get_int(const char *what, json_t *o, const char *key, bool required, int64_t min,
                   int64_t max, int64_t *out, struct crl_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v) {
        *out = 0;
        if (required)
            return crl_err_set(err, CRL_E_INVALID, "%s: %s is missing", what, key);
        return 0;
    }
    if (!json_is_integer(v))
        return crl_err_set(err, CRL_E_INVALID, "%s: %s is not an integer", what, key);
    json_int_t n = json_integer_value(v);
    if (n < min || n > max)
        return crl_err_set(err, CRL_E_INVALID, "%s: %s %lld is out of range [%lld, %lld]", what,
                           key, (long long)n, (long long)min, (long long)max);
    *out = n;
    return 0;
}

static int get_bool(const char *what, json_t *o, const char *key, bool required, bool *out,
                    struct crl_err *err)
{
    json_t *v = json_object_get(o, key);
    *out = false;
    if (!v) {
        if (required)
            return crl_err_set(err, CRL_E_INVALID, "%s: %s is missing", what, key);
        return 0;
    }
    if (!json_is_boolean(v))
        return crl_err_set(err, CRL_E_INVALID, "%s: %s is not true or false", what, key);
    *out = json_is_true(v);
    return 0;
}

static int check_hostname(const char *what, const char *h, struct crl_err *err)
{
    size_t n = strlen(h);
    if (n == 0 || n > CRL_AGENT_MAX_HOSTNAME)
        return crl_err_set(err, CRL_E_INVALID, "%s: hostname must have 1 to %d bytes", what,
                           CRL_AGENT_MAX_HOSTNAME);
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && !(c == '-' && i > 0 && i + 1 < n))
            return crl_err_set(err, CRL_E_INVALID,
                               "%s: hostname has '%c' at offset %zu (a DNS label is letters, "
                               "digits and inner '-')",
                               what, c >= 0x20 && c < 0x7f ? c : '?', i);
    }
    return 0;
}

/* ---- writing ---- */

/* Compact text of o (consumed; NULL if building it failed), checked by
 * the message's parser, so that what is built is what the other end takes. */
typedef int (*check_fn)(const char *text, size_t len, const void *ctx, struct crl_err *err);

static int finish(const char *what, json_t *o, char **out, size_t *len, check_fn check,
                  const void *ctx, struct crl_err *err)
{
    if (!o)
        return crl_err_set(err, CRL_E_INVALID,
                           "%s: a string is NULL or not valid UTF-8 (or memory ran out)", what);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return crl_err_sys(err, ENOMEM, "%s: building JSON", what);
    size_t n = strlen(s);
    if (check(s, n, ctx, err) < 0) {
        free(s);
        return -1;
    }
    *out = s;
    *len = n;
    return 0;
}

/* json_object_set_new that reports failure (a NULL value: bad UTF-8, or
 * out of memory) by returning false. */
static bool set(json_t *o, const char *key, json_t *v)
{
    return v && json_object_set_new(o, key, v) == 0;
}

/* Build an object from key/value pairs; NULL if any value is NULL. */
static json_t *object(int n, ...)
{
    json_t *o = json_object();
    va_list ap;
    va_start(ap, n);
    bool good = o != NULL;
    for (int i = 0; i < n; i++) {
        const char *k = va_arg(ap, const char *);
        json_t *v = va_arg(ap, json_t *);
        if (!good || !set(o, k, v)) {
            json_decref(v);
            good = false;
        }
    }
    va_end(ap);
    if (!good) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- HELLO ---- */

int crl_agent_parse_hello(const void *p, size_t len, struct crl_agent_hello *m, struct crl_err *err)
{
    static const char *const keys[] = {"proto", "agent", "kernel", NULL};
    const char *what = "HELLO";
    json_t *o;
    if (load(what, p, len, &o, err) < 0)
        return -1;
    int64_t proto = 0;
    int r = -1;
    memset(m, 0, sizeof(*m));
    if (known_keys(what, o, keys, err) < 0 ||
        get_int(what, o, "proto", true, 0, INT32_MAX, &proto, err) < 0 ||
        get_text(what, o, "agent", true, T_NAME, m->agent, CRL_AGENT_MAX_NAME, err) < 0 ||
        get_text(what, o, "kernel", true, T_NAME, m->kernel, CRL_AGENT_MAX_NAME, err) < 0)
        goto out;
    if (proto != CRL_AGENT_PROTO_VERSION) {
        crl_err_set(err, CRL_E_INVALID,
                    "HELLO: protocol version %lld is not supported (%d is: a guest built by "
                    "another version of corral; `corral setup microvm` builds this one's)",
                    (long long)proto, CRL_AGENT_PROTO_VERSION);
        goto out;
    }
    m->proto = (int)proto;
    r = 0;
out:
    json_decref(o);
    return r;
}

static int check_hello(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_hello m;
    return crl_agent_parse_hello(s, n, &m, err);
}

int crl_agent_build_hello(const struct crl_agent_hello *m, char **out, size_t *len,
                          struct crl_err *err)
{
    json_t *o = object(3, "proto", json_integer(m->proto), "agent", json_string(m->agent), "kernel",
                       json_string(m->kernel));
    return finish("HELLO", o, out, len, check_hello, NULL, err);
}

/* ---- CONFIG ---- */

static int parse_net(json_t *net, struct crl_agent_config *m, struct crl_err *err)
{
    static const char *const keys[] = {"address", "prefix", "gateway", NULL};
    const char *what = "CONFIG: net";
    int64_t prefix = 0;
    struct in_addr a;
    if (!json_is_object(net))
        return crl_err_set(err, CRL_E_INVALID, "%s is not an object", what);
    if (known_keys(what, net, keys, err) < 0 ||
        get_text(what, net, "address", true, T_NAME, m->net_address, sizeof(m->net_address) - 1,
                 err) < 0 ||
        get_text(what, net, "gateway", true, T_NAME, m->net_gateway, sizeof(m->net_gateway) - 1,
                 err) < 0 ||
        get_int(what, net, "prefix", true, 1, 32, &prefix, err) < 0)
        return -1;
    if (inet_pton(AF_INET, m->net_address, &a) != 1 || inet_pton(AF_INET, m->net_gateway, &a) != 1)
        return crl_err_set(err, CRL_E_INVALID, "%s: address and gateway are dotted IPv4", what);
    m->net_prefix = (unsigned)prefix;
    return 0;
}

/* CONFIG's volumes: each a device and an absolute path, no two on one
 * device or path. */
static int parse_volumes(json_t *a, struct crl_agent_config *m, struct crl_err *err)
{
    static const char *const keys[] = {"device", "path", "read_only", NULL};
    if (!json_is_array(a))
        return crl_err_set(err, CRL_E_INVALID, "CONFIG: volumes is not an array");
    if (json_array_size(a) > CRL_AGENT_MAX_VOLUMES)
        return crl_err_set(err, CRL_E_INVALID, "CONFIG: %zu volumes is over the limit of %d",
                           json_array_size(a), CRL_AGENT_MAX_VOLUMES);
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        struct crl_agent_volume *mv = &m->volumes[i];
        char what[32];
        snprintf(what, sizeof(what), "CONFIG: volumes[%zu]", i);
        if (!json_is_object(v))
            return crl_err_set(err, CRL_E_INVALID, "%s is not an object", what);
        if (known_keys(what, v, keys, err) < 0 ||
            get_text(what, v, "device", true, T_DEVICE, mv->device, CRL_AGENT_MAX_DEVICE, err) <
                0 ||
            get_text(what, v, "path", true, T_PATH, mv->path, CRL_AGENT_MAX_PATH, err) < 0 ||
            get_bool(what, v, "read_only", false, &mv->read_only, err) < 0)
            return -1;
        for (size_t j = 0; j < i; j++)
            if (strcmp(m->volumes[j].device, mv->device) == 0 ||
                strcmp(m->volumes[j].path, mv->path) == 0)
                return crl_err_set(err, CRL_E_INVALID, "%s: its device or path is volumes[%zu]'s",
                                   what, j);
    }
    m->n_volumes = json_array_size(a);
    return 0;
}

int crl_agent_parse_config(const void *p, size_t len, struct crl_agent_config *m,
                           struct crl_err *err)
{
    static const char *const keys[] = {"hostname", "realtime_ns", "seed",       "layers",
                                       "disk",     "disk_mb",     "etc",        "net",
                                       "volumes",  "init",        "machine_id", NULL};
    const char *what = "CONFIG";
    json_t *o;
    if (load(what, p, len, &o, err) < 0)
        return -1;
    int r = -1;
    int64_t disk_mb = 0;
    memset(m, 0, sizeof(*m));
    if (known_keys(what, o, keys, err) < 0 ||
        get_text(what, o, "hostname", true, T_NAME, m->hostname, CRL_AGENT_MAX_HOSTNAME, err) < 0 ||
        check_hostname(what, m->hostname, err) < 0 ||
        get_int(what, o, "realtime_ns", true, 0, INT64_MAX, &m->realtime_ns, err) < 0 ||
        get_text(what, o, "disk", false, T_DEVICE, m->disk, CRL_AGENT_MAX_DEVICE, err) < 0 ||
        get_int(what, o, "disk_mb", false, 0, CRL_AGENT_MAX_DISK_MB, &disk_mb, err) < 0 ||
        get_text(what, o, "init", false, T_PATH, m->init, CRL_AGENT_MAX_PATH, err) < 0 ||
        get_text(what, o, "machine_id", false, T_NAME, m->machine_id, CRL_AGENT_MACHINE_ID, err) <
            0)
        goto out;
    m->disk_mb = (uint32_t)disk_mb;
    if (m->machine_id[0] && (strlen(m->machine_id) != CRL_AGENT_MACHINE_ID ||
                             strspn(m->machine_id, "0123456789abcdef") != CRL_AGENT_MACHINE_ID)) {
        crl_err_set(err, CRL_E_INVALID, "CONFIG: machine_id is not %d lowercase hex digits",
                    CRL_AGENT_MACHINE_ID);
        goto out;
    }

    json_t *seed = json_object_get(o, "seed");
    if (!json_is_string(seed)) {
        crl_err_set(err, CRL_E_INVALID, "CONFIG: seed is %s", seed ? "not a string" : "missing");
        goto out;
    }
    char *raw = NULL;
    size_t raw_len = 0;
    if (json_string_length(seed) > 4 * CRL_AGENT_MAX_SEED / 3 + 4 ||
        crl_base64_decode(json_string_value(seed), json_string_length(seed), &raw, &raw_len) < 0) {
        crl_err_set(err, CRL_E_INVALID, "CONFIG: seed is not base64 of at most %d bytes",
                    CRL_AGENT_MAX_SEED);
        goto out;
    }
    if (raw_len < CRL_AGENT_MIN_SEED || raw_len > CRL_AGENT_MAX_SEED) {
        free(raw);
        crl_err_set(err, CRL_E_INVALID, "CONFIG: seed of %zu bytes (it needs %d to %d)", raw_len,
                    CRL_AGENT_MIN_SEED, CRL_AGENT_MAX_SEED);
        goto out;
    }
    memcpy(m->seed, raw, raw_len);
    m->seed_len = raw_len;
    free(raw);

    json_t *layers = json_object_get(o, "layers");
    if (!json_is_array(layers)) {
        crl_err_set(err, CRL_E_INVALID, "CONFIG: layers is %s",
                    layers ? "not an array" : "missing");
        goto out;
    }
    if (json_array_size(layers) > CRL_AGENT_MAX_LAYERS) {
        crl_err_set(err, CRL_E_INVALID, "CONFIG: %zu layers is over the limit of %d",
                    json_array_size(layers), CRL_AGENT_MAX_LAYERS);
        goto out;
    }
    for (size_t i = 0; i < json_array_size(layers); i++) {
        json_t *l = json_array_get(layers, i);
        char field[32];
        snprintf(field, sizeof(field), "layers[%zu]", i);
        if (!json_is_string(l)) {
            crl_err_set(err, CRL_E_INVALID, "CONFIG: %s is not a string", field);
            goto out;
        }
        if (check_text(what, field, json_string_value(l), json_string_length(l), T_DEVICE,
                       CRL_AGENT_MAX_DEVICE, err) < 0)
            goto out;
        memcpy(m->layers[i], json_string_value(l), json_string_length(l) + 1);
    }
    m->n_layers = json_array_size(layers);

    json_t *etc = json_object_get(o, "etc");
    static const char *const etc_keys[] = {"hostname", "hosts", "resolv.conf", NULL};
    if (etc && !json_is_object(etc)) {
        crl_err_set(err, CRL_E_INVALID, "CONFIG: etc is not an object");
        goto out;
    }
    if (etc && (known_keys("CONFIG: etc", etc, etc_keys, err) < 0 ||
                get_text("CONFIG: etc", etc, "hostname", false, T_FILE, m->etc_hostname,
                         CRL_AGENT_MAX_ETC, err) < 0 ||
                get_text("CONFIG: etc", etc, "hosts", false, T_FILE, m->etc_hosts,
                         CRL_AGENT_MAX_ETC, err) < 0 ||
                get_text("CONFIG: etc", etc, "resolv.conf", false, T_FILE, m->etc_resolv_conf,
                         CRL_AGENT_MAX_ETC, err) < 0))
        goto out;
    json_t *net = json_object_get(o, "net");
    if (net && parse_net(net, m, err) < 0)
        goto out;
    json_t *volumes = json_object_get(o, "volumes");
    if (volumes && parse_volumes(volumes, m, err) < 0)
        goto out;
    r = 0;
out:
    json_decref(o);
    return r;
}

static int check_config(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_config *m = malloc(sizeof(*m));
    if (!m)
        return crl_err_sys(err, ENOMEM, "CONFIG");
    int r = crl_agent_parse_config(s, n, m, err);
    free(m);
    return r;
}

int crl_agent_build_config(const struct crl_agent_config *m, char **out, size_t *len,
                           struct crl_err *err)
{
    if (m->seed_len > CRL_AGENT_MAX_SEED || m->n_layers > CRL_AGENT_MAX_LAYERS)
        return crl_err_set(err, CRL_E_INVALID, "CONFIG: seed or layers over their limits");
    size_t b64_len = 0;
    char *b64 = crl_base64_encode(m->seed, m->seed_len, &b64_len);
    json_t *layers = json_array();
    for (size_t i = 0; layers && i < m->n_layers; i++) {
        json_t *s = json_string(m->layers[i]);
        if (!s || json_array_append_new(layers, s) < 0) {
            json_decref(layers);
            layers = NULL;
        }
    }
    json_t *o =
        object(4, "hostname", json_string(m->hostname), "realtime_ns", json_integer(m->realtime_ns),
               "seed", b64 ? json_string(b64) : NULL, "layers", layers);
    free(b64);
    if (o && ((m->disk[0] && !set(o, "disk", json_string(m->disk))) ||
              (m->disk_mb && !set(o, "disk_mb", json_integer(m->disk_mb))) ||
              (m->init[0] && !set(o, "init", json_string(m->init))) ||
              (m->machine_id[0] && !set(o, "machine_id", json_string(m->machine_id))))) {
        json_decref(o);
        o = NULL;
    }
    if (o && (m->etc_hostname[0] || m->etc_hosts[0] || m->etc_resolv_conf[0])) {
        json_t *etc = json_object();
        const char *names[3] = {"hostname", "hosts", "resolv.conf"};
        const char *texts[3] = {m->etc_hostname, m->etc_hosts, m->etc_resolv_conf};
        for (int i = 0; etc && i < 3; i++)
            if (texts[i][0] && !set(etc, names[i], json_string(texts[i]))) {
                json_decref(etc);
                etc = NULL;
            }
        if (!set(o, "etc", etc)) {
            json_decref(o);
            o = NULL;
        }
    }
    if (o && m->net_address[0] &&
        !set(o, "net",
             object(3, "address", json_string(m->net_address), "prefix",
                    json_integer(m->net_prefix), "gateway", json_string(m->net_gateway)))) {
        json_decref(o);
        o = NULL;
    }
    if (o && m->n_volumes) {
        json_t *a = m->n_volumes <= CRL_AGENT_MAX_VOLUMES ? json_array() : NULL;
        for (size_t i = 0; a && i < m->n_volumes; i++) {
            const struct crl_agent_volume *v = &m->volumes[i];
            if (json_array_append_new(a, object(3, "device", json_string(v->device), "path",
                                                json_string(v->path), "read_only",
                                                json_boolean(v->read_only))) < 0) {
                json_decref(a);
                a = NULL;
            }
        }
        if (!set(o, "volumes", a)) {
            json_decref(o);
            o = NULL;
        }
    }
    return finish("CONFIG", o, out, len, check_config, NULL, err);
}

/* ---- READY ---- */

int crl_agent_parse_ready(const void *p, size_t len, struct crl_agent_ready *m, struct crl_err *err)
{
    static const char *const keys[] = {"uptime_ms", NULL};
    json_t *o;
    if (load("READY", p, len, &o, err) < 0)
        return -1;
    memset(m, 0, sizeof(*m));
    int r = known_keys("READY", o, keys, err) < 0 ||
                    get_int("READY", o, "uptime_ms", true, 0, CRL_AGENT_MAX_USAGE, &m->uptime_ms,
                            err) < 0
                ? -1
                : 0;
    json_decref(o);
    return r;
}

static int check_ready(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_ready m;
    return crl_agent_parse_ready(s, n, &m, err);
}

int crl_agent_build_ready(const struct crl_agent_ready *m, char **out, size_t *len,
                          struct crl_err *err)
{
    return finish("READY", object(1, "uptime_ms", json_integer(m->uptime_ms)), out, len,
                  check_ready, NULL, err);
}

/* ---- EXEC ---- */

void crl_agent_exec_free(struct crl_agent_exec *m)
{
    for (size_t i = 0; m->argv && i < m->argc; i++)
        free(m->argv[i]);
    for (size_t i = 0; m->env && i < m->envc; i++)
        free(m->env[i]);
    free(m->argv);
    free(m->env);
    m->argv = m->env = NULL;
    m->argc = m->envc = 0;
}

/* A list of strings (argv or env) into a NULL-terminated copy; *total
 * counts their bytes (with NULs) against CRL_AGENT_MAX_ARGS_SIZE. */
static int get_strings(json_t *o, const char *key, bool is_env, char ***out, size_t *count,
                       size_t *total, struct crl_err *err)
{
    json_t *a = json_object_get(o, key);
    if (!a && is_env)
        a = json_array(); /* no env: an empty one */
    else
        json_incref(a);
    int r = -1;
    if (!json_is_array(a)) {
        crl_err_set(err, CRL_E_INVALID, "EXEC: %s is %s", key, a ? "not an array" : "missing");
        goto out;
    }
    size_t n = json_array_size(a);
    if ((!is_env && n == 0) || n > CRL_AGENT_MAX_ARGS) {
        crl_err_set(err, CRL_E_INVALID, "EXEC: %s has %zu entries (it may have %d to %d)", key, n,
                    is_env ? 0 : 1, CRL_AGENT_MAX_ARGS);
        goto out;
    }
    *out = calloc(n + 1, sizeof(char *));
    if (!*out) {
        crl_err_sys(err, ENOMEM, "EXEC: %s", key);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        char field[32];
        snprintf(field, sizeof(field), "%s[%zu]", key, i);
        if (!json_is_string(v)) {
            crl_err_set(err, CRL_E_INVALID, "EXEC: %s is not a string", field);
            goto out;
        }
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        if (strlen(s) != len) {
            crl_err_set(err, CRL_E_INVALID, "EXEC: %s holds a NUL", field);
            goto out;
        }
        const char *eq = strchr(s, '=');
        if (is_env && (!eq || eq == s)) {
            crl_err_set(err, CRL_E_INVALID, "EXEC: %s is not NAME=value", field);
            goto out;
        }
        *total += len + 1;
        if (*total > CRL_AGENT_MAX_ARGS_SIZE) {
            crl_err_set(err, CRL_E_INVALID, "EXEC: argv and env are over %d bytes",
                        CRL_AGENT_MAX_ARGS_SIZE);
            goto out;
        }
        if (!((*out)[i] = strdup(s))) {
            crl_err_sys(err, ENOMEM, "EXEC: %s", field);
            goto out;
        }
        (*count)++;
    }
    r = 0;
out:
    json_decref(a);
    return r;
}

int crl_agent_parse_exec(const void *p, size_t len, struct crl_agent_exec *m, struct crl_err *err)
{
    static const char *const keys[] = {"argv",  "env", "cwd",  "uid",  "gid",
                                       "stdin", "tty", "rows", "cols", NULL};
    const char *what = "EXEC";
    memset(m, 0, sizeof(*m));
    json_t *o;
    if (load(what, p, len, &o, err) < 0)
        return -1;
    int64_t uid = 0, gid = 0, rows = 0, cols = 0;
    size_t total = 0;
    int r = -1;
    if (known_keys(what, o, keys, err) < 0 ||
        get_strings(o, "argv", false, &m->argv, &m->argc, &total, err) < 0 ||
        get_strings(o, "env", true, &m->env, &m->envc, &total, err) < 0 ||
        get_text(what, o, "cwd", true, T_PATH, m->cwd, CRL_AGENT_MAX_PATH, err) < 0 ||
        get_int(what, o, "uid", true, 0, UINT32_MAX - 1, &uid, err) < 0 ||
        get_int(what, o, "gid", true, 0, UINT32_MAX - 1, &gid, err) < 0 ||
        get_bool(what, o, "stdin", false, &m->stdin_open, err) < 0 ||
        get_bool(what, o, "tty", false, &m->tty, err) < 0 ||
        get_int(what, o, "rows", false, 1, CRL_AGENT_MAX_TTY, &rows, err) < 0 ||
        get_int(what, o, "cols", false, 1, CRL_AGENT_MAX_TTY, &cols, err) < 0) {
        crl_agent_exec_free(m);
        goto out;
    }
    m->uid = (uint32_t)uid;
    m->gid = (uint32_t)gid;
    m->rows = rows ? (unsigned)rows : 24;
    m->cols = cols ? (unsigned)cols : 80;
    r = 0;
out:
    json_decref(o);
    return r;
}

static int check_exec(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_exec m;
    if (crl_agent_parse_exec(s, n, &m, err) < 0)
        return -1;
    crl_agent_exec_free(&m);
    return 0;
}

static json_t *string_array(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        json_t *s = v[i] ? json_string(v[i]) : NULL;
        if (!s || json_array_append_new(a, s) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

int crl_agent_build_exec(const struct crl_agent_exec *m, char **out, size_t *len,
                         struct crl_err *err)
{
    json_t *o =
        object(7, "argv", string_array(m->argv, m->argc), "env", string_array(m->env, m->envc),
               "cwd", json_string(m->cwd), "uid", json_integer(m->uid), "gid", json_integer(m->gid),
               "stdin", json_boolean(m->stdin_open), "tty", json_boolean(m->tty));
    if (o && (!set(o, "rows", json_integer(m->rows ? m->rows : 24)) ||
              !set(o, "cols", json_integer(m->cols ? m->cols : 80)))) {
        json_decref(o);
        o = NULL;
    }
    return finish("EXEC", o, out, len, check_exec, NULL, err);
}

/* ---- EXIT ---- */

static const char *const reasons[] = {
    [CRL_AGENT_EXITED] = "exited",
    [CRL_AGENT_SIGNALED] = "signaled",
    [CRL_AGENT_OOM_KILLED] = "oom_killed",
    [CRL_AGENT_START_FAILED] = "start_failed",
};

int crl_agent_parse_exit(const void *p, size_t len, struct crl_agent_exit *m, struct crl_err *err)
{
    static const char *const keys[] = {"reason", "code", "signal", "errno", "usage", NULL};
    static const char *const usage_keys[] = {"utime_us", "stime_us", "maxrss_kb", "disk_bytes",
                                             NULL};
    const char *what = "EXIT";
    json_t *o;
    if (load(what, p, len, &o, err) < 0)
        return -1;
    memset(m, 0, sizeof(*m));
    char reason[CRL_AGENT_MAX_NAME + 1];
    int64_t code = 0, sig = 0, eno = 0;
    int r = -1;
    if (known_keys(what, o, keys, err) < 0 ||
        get_text(what, o, "reason", true, T_NAME, reason, CRL_AGENT_MAX_NAME, err) < 0)
        goto out;
    for (size_t i = 1; i < sizeof(reasons) / sizeof(reasons[0]); i++)
        if (strcmp(reason, reasons[i]) == 0)
            m->reason = (enum crl_agent_exit_reason)i;
    if (!m->reason) {
        char b[48];
        crl_err_set(err, CRL_E_INVALID, "EXIT: reason \"%s\" is unknown",
                    shown(reason, b, sizeof(b)));
        goto out;
    }
    /* exactly the one field the reason names */
    const char *field = m->reason == CRL_AGENT_EXITED         ? "code"
                        : m->reason == CRL_AGENT_START_FAILED ? "errno"
                                                              : "signal";
    for (const char *const *f = (const char *const[]){"code", "signal", "errno", NULL}; *f; f++)
        if (strcmp(*f, field) != 0 && json_object_get(o, *f)) {
            crl_err_set(err, CRL_E_INVALID, "EXIT: %s with reason \"%s\"", *f, reason);
            goto out;
        }
    if (get_int(what, o, "code", m->reason == CRL_AGENT_EXITED, 0, 255, &code, err) < 0 ||
        get_int(what, o, "signal", !strcmp(field, "signal"), 1, CRL_AGENT_MAX_SIGNAL, &sig, err) <
            0 ||
        get_int(what, o, "errno", m->reason == CRL_AGENT_START_FAILED, 1, 4095, &eno, err) < 0)
        goto out;
    m->code = (int)code;
    m->signal = (int)sig;
    m->error_no = (int)eno;

    json_t *u = json_object_get(o, "usage");
    if (!json_is_object(u)) {
        crl_err_set(err, CRL_E_INVALID, "EXIT: usage is %s", u ? "not an object" : "missing");
        goto out;
    }
    const char *uw = "EXIT: usage";
    if (known_keys(uw, u, usage_keys, err) < 0 ||
        get_int(uw, u, "utime_us", true, 0, CRL_AGENT_MAX_USAGE, &m->utime_us, err) < 0 ||
        get_int(uw, u, "stime_us", true, 0, CRL_AGENT_MAX_USAGE, &m->stime_us, err) < 0 ||
        get_int(uw, u, "maxrss_kb", true, 0, CRL_AGENT_MAX_USAGE, &m->maxrss_kb, err) < 0 ||
        get_int(uw, u, "disk_bytes", false, 0, CRL_AGENT_MAX_USAGE, &m->disk_bytes, err) < 0)
        goto out;
    if (!json_object_get(u, "disk_bytes"))
        m->disk_bytes = -1;
    r = 0;
out:
    json_decref(o);
    return r;
}

static int check_exit(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_exit m;
    return crl_agent_parse_exit(s, n, &m, err);
}

int crl_agent_build_exit(const struct crl_agent_exit *m, char **out, size_t *len,
                         struct crl_err *err)
{
    if (m->reason < CRL_AGENT_EXITED || m->reason > CRL_AGENT_START_FAILED)
        return crl_err_set(err, CRL_E_INVALID, "EXIT: reason %d is unknown", (int)m->reason);
    json_t *usage = object(3, "utime_us", json_integer(m->utime_us), "stime_us",
                           json_integer(m->stime_us), "maxrss_kb", json_integer(m->maxrss_kb));
    if (usage && m->disk_bytes >= 0 && !set(usage, "disk_bytes", json_integer(m->disk_bytes))) {
        json_decref(usage);
        usage = NULL;
    }
    json_t *v = m->reason == CRL_AGENT_EXITED         ? json_integer(m->code)
                : m->reason == CRL_AGENT_START_FAILED ? json_integer(m->error_no)
                                                      : json_integer(m->signal);
    const char *field = m->reason == CRL_AGENT_EXITED         ? "code"
                        : m->reason == CRL_AGENT_START_FAILED ? "errno"
                                                              : "signal";
    json_t *o = object(3, "reason", json_string(reasons[m->reason]), field, v, "usage", usage);
    return finish("EXIT", o, out, len, check_exit, NULL, err);
}

/* ---- SIGNAL ---- */

int crl_agent_parse_signal(const void *p, size_t len, struct crl_agent_signal *m,
                           struct crl_err *err)
{
    static const char *const keys[] = {"signal", "scope", NULL};
    json_t *o;
    if (load("SIGNAL", p, len, &o, err) < 0)
        return -1;
    int64_t sig = 0;
    int r = known_keys("SIGNAL", o, keys, err) < 0 ||
                    get_int("SIGNAL", o, "signal", true, 1, CRL_AGENT_MAX_SIGNAL, &sig, err) < 0
                ? -1
                : 0;
    m->signal = (int)sig;
    m->scope = CRL_AGENT_SIGNAL_TREE;
    json_t *scope = json_object_get(o, "scope");
    if (r == 0 && scope) {
        const char *v = json_string_value(scope);
        if (v && strcmp(v, "tree") == 0)
            m->scope = CRL_AGENT_SIGNAL_TREE;
        else if (v && strcmp(v, "descendants") == 0)
            m->scope = CRL_AGENT_SIGNAL_DESCENDANTS;
        else if (v && strcmp(v, "process") == 0)
            m->scope = CRL_AGENT_SIGNAL_PROCESS;
        else if (v && strcmp(v, "group") == 0)
            m->scope = CRL_AGENT_SIGNAL_GROUP;
        else
            r = crl_err_set(err, CRL_E_INVALID,
                            "SIGNAL: scope is not \"tree\", \"descendants\", \"process\" or "
                            "\"group\"");
    }
    json_decref(o);
    return r;
}

static int check_signal(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_signal m;
    return crl_agent_parse_signal(s, n, &m, err);
}

int crl_agent_build_signal(const struct crl_agent_signal *m, char **out, size_t *len,
                           struct crl_err *err)
{
    static const char *const scopes[] = {
        [CRL_AGENT_SIGNAL_DESCENDANTS] = "descendants",
        [CRL_AGENT_SIGNAL_PROCESS] = "process",
        [CRL_AGENT_SIGNAL_GROUP] = "group",
    };
    const char *scope =
        (unsigned)m->scope < sizeof(scopes) / sizeof(scopes[0]) ? scopes[m->scope] : NULL;
    json_t *o = scope ? object(2, "signal", json_integer(m->signal), "scope", json_string(scope))
                      : object(1, "signal", json_integer(m->signal));
    return finish("SIGNAL", o, out, len, check_signal, NULL, err);
}

/* ---- STARTED, RESIZE ---- */

int crl_agent_parse_started(const void *p, size_t len, struct crl_agent_started *m,
                            struct crl_err *err)
{
    static const char *const keys[] = {"pid", NULL};
    json_t *o;
    if (load("STARTED", p, len, &o, err) < 0)
        return -1;
    int64_t pid = 0;
    int r = known_keys("STARTED", o, keys, err) < 0 ||
                    get_int("STARTED", o, "pid", true, 2, 1 << 22, &pid, err) < 0
                ? -1
                : 0;
    m->pid = (int)pid;
    json_decref(o);
    return r;
}

static int check_started(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_started m;
    return crl_agent_parse_started(s, n, &m, err);
}

int crl_agent_build_started(const struct crl_agent_started *m, char **out, size_t *len,
                            struct crl_err *err)
{
    return finish("STARTED", object(1, "pid", json_integer(m->pid)), out, len, check_started, NULL,
                  err);
}

int crl_agent_parse_resize(const void *p, size_t len, struct crl_agent_resize *m,
                           struct crl_err *err)
{
    static const char *const keys[] = {"rows", "cols", NULL};
    json_t *o;
    if (load("RESIZE", p, len, &o, err) < 0)
        return -1;
    int64_t rows = 0, cols = 0;
    int r = known_keys("RESIZE", o, keys, err) < 0 ||
                    get_int("RESIZE", o, "rows", true, 1, CRL_AGENT_MAX_TTY, &rows, err) < 0 ||
                    get_int("RESIZE", o, "cols", true, 1, CRL_AGENT_MAX_TTY, &cols, err) < 0
                ? -1
                : 0;
    m->rows = (unsigned)rows;
    m->cols = (unsigned)cols;
    json_decref(o);
    return r;
}

static int check_resize(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_resize m;
    return crl_agent_parse_resize(s, n, &m, err);
}

int crl_agent_build_resize(const struct crl_agent_resize *m, char **out, size_t *len,
                           struct crl_err *err)
{
    json_t *o = object(2, "rows", json_integer(m->rows), "cols", json_integer(m->cols));
    return finish("RESIZE", o, out, len, check_resize, NULL, err);
}

/* ---- FILE_GET, FILE_PUT ---- */

int crl_agent_parse_file(uint16_t type, const void *p, size_t len, struct crl_agent_file *m,
                         struct crl_err *err)
{
    static const char *const get_keys[] = {"path", "tar", NULL};
    static const char *const put_keys[] = {"path", "tar", "mode", NULL};
    bool put = type == CRL_AGENT_FILE_PUT;
    const char *what = put ? "FILE_PUT" : "FILE_GET";
    json_t *o;
    if (load(what, p, len, &o, err) < 0)
        return -1;
    memset(m, 0, sizeof(*m));
    int64_t mode = 0;
    int r = known_keys(what, o, put ? put_keys : get_keys, err) < 0 ||
                    get_text(what, o, "path", true, T_PATH, m->path, CRL_AGENT_MAX_PATH, err) < 0 ||
                    get_bool(what, o, "tar", false, &m->tar, err) < 0 ||
                    get_int(what, o, "mode", put, 0, 07777, &mode, err) < 0
                ? -1
                : 0;
    m->mode = (int)mode;
    json_decref(o);
    return r;
}

static int check_file(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_file *m = malloc(sizeof(*m));
    if (!m)
        return crl_err_sys(err, ENOMEM, "FILE");
    int r = crl_agent_parse_file(*(const uint16_t *)ctx, s, n, m, err);
    free(m);
    return r;
}

int crl_agent_build_file(uint16_t type, const struct crl_agent_file *m, char **out, size_t *len,
                         struct crl_err *err)
{
    if (type != CRL_AGENT_FILE_GET && type != CRL_AGENT_FILE_PUT)
        return crl_err_set(err, CRL_E_INVALID, "frame type %u is not FILE_GET or FILE_PUT", type);
    bool put = type == CRL_AGENT_FILE_PUT;
    json_t *o = object(2, "path", json_string(m->path), "tar", json_boolean(m->tar));
    if (o && put && !set(o, "mode", json_integer(m->mode))) {
        json_decref(o);
        o = NULL;
    }
    return finish(put ? "FILE_PUT" : "FILE_GET", o, out, len, check_file, &type, err);
}

/* ---- RESULT ---- */

int crl_agent_parse_result(const void *p, size_t len, struct crl_agent_result *m,
                           struct crl_err *err)
{
    static const char *const keys[] = {"ok", "error", "errno", NULL};
    const char *what = "RESULT";
    json_t *o;
    if (load(what, p, len, &o, err) < 0)
        return -1;
    memset(m, 0, sizeof(*m));
    int64_t eno = 0;
    int r = -1;
    if (known_keys(what, o, keys, err) < 0 || get_bool(what, o, "ok", true, &m->ok, err) < 0)
        goto out;
    if (m->ok && (json_object_get(o, "error") || json_object_get(o, "errno"))) {
        crl_err_set(err, CRL_E_INVALID, "RESULT: ok with an error");
        goto out;
    }
    if (get_text(what, o, "error", !m->ok, T_TEXT, m->error, CRL_AGENT_MAX_TEXT, err) < 0 ||
        get_int(what, o, "errno", false, 1, 4095, &eno, err) < 0)
        goto out;
    if (!m->ok && !m->error[0]) {
        crl_err_set(err, CRL_E_INVALID, "RESULT: error is empty");
        goto out;
    }
    m->error_no = (int)eno;
    r = 0;
out:
    json_decref(o);
    return r;
}

static int check_result(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_result *m = malloc(sizeof(*m));
    if (!m)
        return crl_err_sys(err, ENOMEM, "RESULT");
    int r = crl_agent_parse_result(s, n, m, err);
    free(m);
    return r;
}

int crl_agent_build_result(const struct crl_agent_result *m, char **out, size_t *len,
                           struct crl_err *err)
{
    json_t *o = m->ok ? object(1, "ok", json_true())
                      : object(2, "ok", json_false(), "error", json_string(m->error));
    if (o && !m->ok && m->error_no && !set(o, "errno", json_integer(m->error_no))) {
        json_decref(o);
        o = NULL;
    }
    return finish("RESULT", o, out, len, check_result, NULL, err);
}

/* ---- ERROR ---- */

int crl_agent_parse_error(const void *p, size_t len, struct crl_agent_error *m, struct crl_err *err)
{
    static const char *const keys[] = {"message", NULL};
    json_t *o;
    if (load("ERROR", p, len, &o, err) < 0)
        return -1;
    memset(m, 0, sizeof(*m));
    int r =
        known_keys("ERROR", o, keys, err) < 0 || get_text("ERROR", o, "message", true, T_TEXT,
                                                          m->message, CRL_AGENT_MAX_TEXT, err) < 0
            ? -1
            : 0;
    json_decref(o);
    return r;
}

static int check_error(const char *s, size_t n, const void *ctx, struct crl_err *err)
{
    struct crl_agent_error *m = malloc(sizeof(*m));
    if (!m)
        return crl_err_sys(err, ENOMEM, "ERROR");
    int r = crl_agent_parse_error(s, n, m, err);
    free(m);
    return r;
}

int crl_agent_build_error(const struct crl_agent_error *m, char **out, size_t *len,
                          struct crl_err *err)
{
    return finish("ERROR", object(1, "message", json_string(m->message)), out, len, check_error,
                  NULL, err);
}
