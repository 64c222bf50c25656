#include "spec.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/path.h"
#include "services.h"

#define MAX_BODY_DEPTH 16

static const char *const known_backends[] = {"container", "function", "microvm", "vm", "auto"};

char **crl_strv_dup(char *const *v)
{
    size_t n = crl_strv_len(v);
    char **out = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; out && i < n; i++)
        if (!(out[i] = strdup(v[i]))) {
            crl_strv_free(out);
            return NULL;
        }
    return out;
}

void crl_strv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

size_t crl_strv_len(char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

int crl_json_load(const char *json, size_t len, json_t **out, struct crl_err *err)
{
    json_error_t je;
    if (len == 0)
        return crl_err_set(err, CRL_E_JSON, "request body is empty; expected a JSON object");
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return crl_err_set(err, CRL_E_JSON,
                           "request body is not valid JSON: %s at line %d column %d", je.text,
                           je.line, je.column);
    if (!json_is_object(root)) {
        json_decref(root);
        return crl_err_set(err, CRL_E_JSON, "request body must be a JSON object");
    }
    *out = root;
    return 0;
}

const char *crl_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

/* Every key of `obj` must be in `allowed`: a misspelt field is an error, not a silent default. */
int crl_json_check_keys(json_t *obj, const char *where, const char *const *allowed, size_t n,
                        struct crl_err *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        bool ok = false;
        for (size_t i = 0; i < n && !ok; i++)
            ok = strcmp(key, allowed[i]) == 0;
        if (!ok)
            return crl_err_set(err, CRL_E_INVALID, "unknown field '%s%s%s'", where,
                               *where ? "." : "", key);
    }
    return 0;
}

int crl_json_get_uint(json_t *v, const char *name, long long lo, long long hi, unsigned *out,
                      struct crl_err *err)
{
    if (!json_is_integer(v))
        return crl_err_set(err, CRL_E_INVALID,
                           "%s must be an integer between %lld and %lld, not %s", name, lo, hi,
                           crl_json_type_name(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return crl_err_set(err, CRL_E_INVALID, "%s must be between %lld and %lld, not %lld", name,
                           lo, hi, x);
    *out = (unsigned)x;
    return 0;
}

static int get_number(json_t *v, const char *name, double lo, double hi, double *out,
                      struct crl_err *err)
{
    if (!json_is_number(v))
        return crl_err_set(err, CRL_E_INVALID, "%s must be a number between %g and %g, not %s",
                           name, lo, hi, crl_json_type_name(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return crl_err_set(err, CRL_E_INVALID, "%s must be between %g and %g, not %g", name, lo, hi,
                           x);
    *out = x;
    return 0;
}

json_t *crl_json_time(double wall_s)
{
    if (wall_s <= 0)
        return json_null();
    char buf[40];
    crl_fmt_time(wall_s, buf, sizeof(buf));
    return json_string(buf);
}

void crl_json_times(json_t *o, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (json_is_number(v))
            json_object_set_new(o, keys[i], crl_json_time(json_number_value(v)));
    }
}

int crl_json_get_string(json_t *v, const char *name, size_t maxlen, const char **out,
                        struct crl_err *err)
{
    if (!json_is_string(v))
        return crl_err_set(err, CRL_E_INVALID, "%s must be a string, not %s", name,
                           crl_json_type_name(v));
    size_t len = json_string_length(v);
    const char *s = json_string_value(v);
    if (len > maxlen)
        return crl_err_set(err, CRL_E_INVALID, "%s is longer than %zu bytes", name, maxlen);
    if (strlen(s) != len)
        return crl_err_set(err, CRL_E_INVALID, "%s must not contain NUL bytes", name);
    *out = s;
    return 0;
}

static bool label_key_ok(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 63)
        return false;
    for (; *k; k++)
        if (!isalnum((unsigned char)*k) && !strchr("._/-", *k))
            return false;
    return true;
}

static bool printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

static bool env_key_ok(const char *k)
{
    if (!*k || strlen(k) > 255 || !(isalpha((unsigned char)*k) || *k == '_'))
        return false;
    for (; *k; k++)
        if (!isalnum((unsigned char)*k) && *k != '_')
            return false;
    return true;
}

/* A path field (cwd, shell): a string, absolute, bounded, no NUL; *out is
 * a malloc'd copy. */
static int get_abs_path(json_t *v, const char *name, char **out, struct crl_err *err)
{
    const char *s;
    if (crl_json_get_string(v, name, PATH_MAX, &s, err) < 0)
        return -1;
    if (s[0] != '/')
        return crl_err_set(err, CRL_E_INVALID, "%s must be an absolute path, not '%s'", name, s);
    if (strlen(s) >= PATH_MAX)
        return crl_err_set(err, CRL_E_INVALID, "%s is longer than %d bytes", name, PATH_MAX - 1);
    if (!(*out = strdup(s)))
        return crl_err_sys(err, ENOMEM, "parsing %s", name);
    return 0;
}

static int parse_env(json_t *v, const char *name, char ***out, struct crl_err *err)
{
    if (!json_is_object(v))
        return crl_err_set(err, CRL_E_INVALID, "%s must be an object of strings, not %s", name,
                           crl_json_type_name(v));
    size_t n = json_object_size(v);
    if (n > CRL_SPEC_MAX_ENV)
        return crl_err_set(err, CRL_E_INVALID, "%s has %zu variables; at most %d are allowed", name,
                           n, CRL_SPEC_MAX_ENV);
    char **env = calloc(n + 1, sizeof(char *));
    if (!env)
        return crl_err_sys(err, ENOMEM, "parsing %s", name);
    size_t i = 0;
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val)
    {
        const char *s;
        char field[300];
        snprintf(field, sizeof(field), "%s.%s", name, key);
        if (!env_key_ok(key)) {
            crl_strv_free(env);
            return crl_err_set(err, CRL_E_INVALID,
                               "%s: '%s' is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)",
                               name, key);
        }
        if (crl_json_get_string(val, field, 128 * 1024, &s, err) < 0) {
            crl_strv_free(env);
            return -1;
        }
        size_t kl = strlen(key), vl = strlen(s);
        env[i] = malloc(kl + vl + 2);
        if (!env[i]) {
            crl_strv_free(env);
            return crl_err_sys(err, ENOMEM, "parsing %s", name);
        }
        memcpy(env[i], key, kl);
        env[i][kl] = '=';
        memcpy(env[i] + kl + 1, s, vl + 1);
        i++;
    }
    *out = env;
    return 0;
}

void crl_spec_init(struct crl_spec *s)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->backend, sizeof(s->backend), "container");
    snprintf(s->image, sizeof(s->image), "busybox");
    s->cpus = 1.0;
    s->memory_mb = 512;
    s->pids = 512;
    s->disk_mb = 1024;
    s->ttl_s = 3600;
    s->idle_ttl_s = 0;
}

void crl_spec_free(struct crl_spec *s)
{
    for (size_t i = 0; i < s->n_labels; i++) {
        free(s->labels[i].key);
        free(s->labels[i].value);
    }
    s->n_labels = 0;
    crl_strv_free(s->env);
    s->env = NULL;
    free(s->cwd);
    s->cwd = NULL;
    free(s->volumes);
    s->volumes = NULL;
    s->n_volumes = 0;
    crl_net_policy_free(s->network);
    free(s->network);
    s->network = NULL;
    crl_services_free(s->services);
    free(s->services);
    s->services = NULL;
}

static bool image_name_ok(const char *s)
{
    if (!*s || strstr(s, ".."))
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._-:/@", *s))
            return false;
    return true;
}

static int parse_resources(json_t *v, struct crl_spec *s, struct crl_err *err)
{
    static const char *const keys[] = {"cpus", "memory_mb", "pids", "disk_mb"};
    if (!json_is_object(v))
        return crl_err_set(err, CRL_E_INVALID, "resources must be an object, not %s",
                           crl_json_type_name(v));
    if (crl_json_check_keys(v, "resources", keys, CRL_ARRAY_SIZE(keys), err) < 0)
        return -1;
    json_t *f;
    if ((f = json_object_get(v, "cpus")) &&
        get_number(f, "resources.cpus", 0.01, 1024, &s->cpus, err) < 0)
        return -1;
    if ((f = json_object_get(v, "memory_mb")) &&
        crl_json_get_uint(f, "resources.memory_mb", 16, 1 << 20, &s->memory_mb, err) < 0)
        return -1;
    if ((f = json_object_get(v, "pids")) &&
        crl_json_get_uint(f, "resources.pids", 8, 1 << 22, &s->pids, err) < 0)
        return -1;
    if ((f = json_object_get(v, "disk_mb")) &&
        crl_json_get_uint(f, "resources.disk_mb", 1, 1 << 20, &s->disk_mb, err) < 0)
        return -1;
    return 0;
}

int crl_label_parse(const char *kv, struct crl_kv *out, struct crl_err *err)
{
    const char *eq = strchr(kv, '=');
    if (!eq)
        return crl_err_set(err, CRL_E_INVALID, "label '%s' must have the form key=value", kv);
    out->key = strndup(kv, (size_t)(eq - kv));
    out->value = strdup(eq + 1);
    if (!out->key || !out->value) {
        free(out->key);
        free(out->value);
        return crl_err_sys(err, ENOMEM, "parsing label");
    }
    if (!label_key_ok(out->key) || strlen(out->value) > 255 || !printable(out->value)) {
        crl_err_set(err, CRL_E_INVALID,
                    "label '%s' is not valid: keys are 1-63 of [A-Za-z0-9._/-], values at most "
                    "255 printable bytes",
                    kv);
        free(out->key);
        free(out->value);
        return -1;
    }
    return 0;
}

int crl_labels_check(json_t *v, struct crl_err *err)
{
    if (!json_is_object(v))
        return crl_err_set(err, CRL_E_INVALID, "labels must be an object of strings, not %s",
                           crl_json_type_name(v));
    if (json_object_size(v) > CRL_SPEC_MAX_LABELS)
        return crl_err_set(err, CRL_E_INVALID, "labels: at most %d are allowed",
                           CRL_SPEC_MAX_LABELS);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val)
    {
        const char *sv;
        char field[300];
        snprintf(field, sizeof(field), "labels.%.200s", key);
        if (!label_key_ok(key))
            return crl_err_set(err, CRL_E_INVALID,
                               "labels: key '%.200s' is not valid (1-63 of [A-Za-z0-9._/-])", key);
        if (crl_json_get_string(val, field, 255, &sv, err) < 0)
            return -1;
        if (!printable(sv))
            return crl_err_set(err, CRL_E_INVALID, "%s must be printable", field);
    }
    return 0;
}

static int parse_labels(json_t *v, struct crl_spec *s, struct crl_err *err)
{
    if (crl_labels_check(v, err) < 0)
        return -1;
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val)
    {
        struct crl_kv *l = &s->labels[s->n_labels];
        l->key = strdup(key);
        l->value = strdup(json_string_value(val));
        if (!l->key || !l->value) {
            free(l->key);
            free(l->value);
            return crl_err_sys(err, ENOMEM, "parsing labels");
        }
        s->n_labels++;
    }
    return 0;
}

bool crl_traj_id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > CRL_TRAJ_ID_MAX || !isalnum((unsigned char)id[0]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)id[i]) && !strchr("._-", id[i]))
            return false;
    return strcmp(id, "blobs") != 0; /* the checkpoint store's directory */
}

static const char *const checkpoint_modes[] = {
    [CRL_CKPT_EVERY_STEP] = "every-step",
    [CRL_CKPT_ON_REQUEST] = "on-request",
    [CRL_CKPT_NONE] = "none",
};

const char *crl_checkpoint_mode_name(enum crl_checkpoint_mode m)
{
    return checkpoint_modes[m];
}

/* "trajectory": "ID", or {"id": "ID", "checkpoint": "every-step"|"on-request"|"none"}. */
static int parse_trajectory(json_t *f, struct crl_spec *s, struct crl_err *err)
{
    static const char *const keys[] = {"id", "checkpoint"};
    json_t *idv = f;
    if (json_is_object(f)) {
        if (crl_json_check_keys(f, "trajectory", keys, CRL_ARRAY_SIZE(keys), err) < 0)
            return -1;
        idv = json_object_get(f, "id");
        if (!idv)
            return crl_err_set(err, CRL_E_INVALID, "trajectory.id is required");
        json_t *m = json_object_get(f, "checkpoint");
        if (m) {
            const char *str;
            if (crl_json_get_string(m, "trajectory.checkpoint", 16, &str, err) < 0)
                return -1;
            size_t i = 0;
            while (i < CRL_ARRAY_SIZE(checkpoint_modes) && strcmp(str, checkpoint_modes[i]) != 0)
                i++;
            if (i == CRL_ARRAY_SIZE(checkpoint_modes))
                return crl_err_set(err, CRL_E_INVALID,
                                   "trajectory.checkpoint '%s' is unknown; expected every-step, "
                                   "on-request or none",
                                   str);
            s->checkpoint = (enum crl_checkpoint_mode)i;
        }
    } else if (!json_is_string(f)) {
        return crl_err_set(err, CRL_E_INVALID,
                           "trajectory must be an id or an object {\"id\", \"checkpoint\"}, not %s",
                           crl_json_type_name(f));
    }
    const char *id;
    if (crl_json_get_string(idv, "trajectory.id", CRL_TRAJ_ID_MAX * 4, &id, err) < 0)
        return -1;
    if (!crl_traj_id_ok(id))
        return crl_err_set(err, CRL_E_INVALID,
                           "trajectory.id '%s' is not valid: 1-128 of [A-Za-z0-9._-], starting "
                           "with a letter or digit (and not 'blobs')",
                           id);
    snprintf(s->trajectory, sizeof(s->trajectory), "%s", id);
    return 0;
}

/* The policy lives on the heap, NULL for mode none (the default). */
bool crl_volume_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > CRL_VOLUME_NAME_MAX || !isalnum((unsigned char)name[0]))
        return false;
    for (const char *c = name; *c; c++)
        if (!(islower((unsigned char)*c) || isdigit((unsigned char)*c) || strchr("_.-", *c)))
            return false;
    return true;
}

/* Where a volume may not go: over the root, or over (or under) what the
 * sandbox's kernel interfaces are mounted at.  NULL: anywhere else. */
static const char *volume_path_refused(const char *p)
{
    static const char *const kernel[] = {"/proc", "/sys", "/dev"};
    if (strcmp(p, "/") == 0)
        return "a volume may not hide the sandbox's root";
    static const char *const why[] = {"a volume may not be mounted over or under /proc",
                                      "a volume may not be mounted over or under /sys",
                                      "a volume may not be mounted over or under /dev"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(kernel); i++) {
        size_t n = strlen(kernel[i]);
        if (strncmp(p, kernel[i], n) == 0 && (p[n] == 0 || p[n] == '/'))
            return why[i];
    }
    return NULL;
}

static int parse_volume(json_t *v, size_t i, struct crl_spec_volume *out, struct crl_err *err)
{
    static const char *const keys[] = {"name", "path", "read_only"};
    char where[32];
    snprintf(where, sizeof(where), "volumes[%zu]", i);
    if (!json_is_object(v))
        return crl_err_set(err, CRL_E_INVALID,
                           "%s must be an object {\"name\", \"path\", \"read_only\"}, not %s",
                           where, crl_json_type_name(v));
    if (crl_json_check_keys(v, where, keys, CRL_ARRAY_SIZE(keys), err) < 0)
        return -1;
    const char *name, *path;
    json_t *f = json_object_get(v, "name");
    if (!f)
        return crl_err_set(err, CRL_E_INVALID, "%s.name is required", where);
    if (crl_json_get_string(f, "name", 256, &name, err) < 0)
        return crl_err_prefix(err, "%s", where);
    if (!crl_volume_name_ok(name))
        return crl_err_set(err, CRL_E_INVALID,
                           "%s.name '%s' is not a volume name (1-63 of a-z, 0-9, '_', '.', '-', "
                           "starting with a letter or digit)",
                           where, name);
    if (!(f = json_object_get(v, "path")))
        return crl_err_set(err, CRL_E_INVALID, "%s.path is required", where);
    if (crl_json_get_string(f, "path", PATH_MAX, &path, err) < 0)
        return crl_err_prefix(err, "%s", where);
    int n =
        crl_path_normalise(path, strlen(path), CRL_PATH_RULES_API, out->path, sizeof(out->path));
    if (n < 0)
        return crl_err_set(err, CRL_E_INVALID, "%s.path '%s' is %s", where, path,
                           n == CRL_PATH_TOO_LONG ? "longer than 255 bytes" : crl_path_why(n));
    const char *why = volume_path_refused(out->path);
    if (why)
        return crl_err_set(err, CRL_E_INVALID, "%s.path '%s' is refused: %s", where, path, why);
    f = json_object_get(v, "read_only");
    if (f && !json_is_boolean(f))
        return crl_err_set(err, CRL_E_INVALID, "%s.read_only must be true or false", where);
    snprintf(out->name, sizeof(out->name), "%s", name);
    out->read_only = json_is_true(f);
    return 0;
}

static int parse_volumes(json_t *v, struct crl_spec *s, struct crl_err *err)
{
    if (!json_is_array(v))
        return crl_err_set(err, CRL_E_INVALID, "volumes must be an array, not %s",
                           crl_json_type_name(v));
    size_t n = json_array_size(v);
    if (n > CRL_SPEC_MAX_VOLUMES)
        return crl_err_set(err, CRL_E_INVALID, "volumes: %zu given, at most %d", n,
                           CRL_SPEC_MAX_VOLUMES);
    if (n && !(s->volumes = calloc(n, sizeof(*s->volumes))))
        return crl_err_sys(err, ENOMEM, "volumes");
    for (size_t i = 0; i < n; i++) {
        struct crl_spec_volume *vol = &s->volumes[i];
        if (parse_volume(json_array_get(v, i), i, vol, err) < 0)
            return -1;
        s->n_volumes = i + 1;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(s->volumes[j].name, vol->name) == 0)
                return crl_err_set(err, CRL_E_INVALID, "volumes[%zu]: volume '%s' is mounted twice",
                                   i, vol->name);
            size_t a = strlen(s->volumes[j].path), b = strlen(vol->path);
            const char *shorter = a < b ? s->volumes[j].path : vol->path;
            const char *longer = a < b ? vol->path : s->volumes[j].path;
            size_t k = a < b ? a : b;
            if (strncmp(shorter, longer, k) == 0 && (longer[k] == 0 || longer[k] == '/'))
                return crl_err_set(err, CRL_E_INVALID,
                                   "volumes[%zu].path '%s' is at or under volumes[%zu].path '%s': "
                                   "volumes may not nest",
                                   i, vol->path, j, s->volumes[j].path);
        }
    }
    return 0;
}

static int parse_network(json_t *v, struct crl_spec *s, struct crl_err *err)
{
    struct crl_net_policy p;
    if (crl_net_policy_from_json(v, &p, err) < 0)
        return -1;
    if (p.mode == CRL_NET_NONE)
        return 0; /* none takes no rules: nothing to free */
    if (!(s->network = malloc(sizeof(*s->network)))) {
        crl_net_policy_free(&p);
        return crl_err_sys(err, ENOMEM, "parsing network");
    }
    *s->network = p;
    return 0;
}

static int parse_services(json_t *v, struct crl_spec *s, struct crl_err *err)
{
    struct crl_services svc;
    if (crl_services_from_json(v, &svc, err) < 0)
        return -1;
    if (svc.n == 0)
        return 0;
    if (!(s->services = malloc(sizeof(*s->services)))) {
        crl_services_free(&svc);
        return crl_err_sys(err, ENOMEM, "parsing services");
    }
    *s->services = svc;
    return 0;
}

int crl_spec_from_json(json_t *root, struct crl_spec *s, struct crl_err *err)
{
    static const char *const keys[] = {
        "backend",    "runtime", "image", "resources", "network",    "ttl_s",    "on_ttl",
        "idle_ttl_s", "labels",  "env",   "cwd",       "trajectory", "services", "volumes"};
    crl_spec_init(s);
    if (!json_is_object(root))
        return crl_err_set(err, CRL_E_INVALID, "the sandbox spec must be a JSON object");
    if (crl_json_check_keys(root, "", keys, CRL_ARRAY_SIZE(keys), err) < 0)
        goto fail;
    json_t *f;
    const char *str;
    if ((f = json_object_get(root, "backend"))) {
        if (crl_json_get_string(f, "backend", sizeof(s->backend) - 1, &str, err) < 0)
            goto fail;
        bool known = false;
        for (size_t i = 0; i < CRL_ARRAY_SIZE(known_backends) && !known; i++)
            known = strcmp(str, known_backends[i]) == 0;
        if (!known) {
            crl_err_set(
                err, CRL_E_INVALID,
                "backend '%s' is unknown; expected one of function, container, microvm, vm, "
                "auto",
                str);
            goto fail;
        }
        snprintf(s->backend, sizeof(s->backend), "%s", str);
    }
    bool function = strcmp(s->backend, "function") == 0;
    if ((f = json_object_get(root, "runtime"))) {
        if (crl_json_get_string(f, "runtime", sizeof(s->runtime) - 1, &str, err) < 0)
            goto fail;
        if (!function) {
            crl_err_set(err, CRL_E_INVALID,
                        "runtime is for the function backend; backend '%s' runs an image",
                        s->backend);
            goto fail;
        }
        if (strcmp(str, "shell") != 0 && strcmp(str, "python") != 0) {
            crl_err_set(err, CRL_E_INVALID, "runtime '%s' is unknown; expected shell or python",
                        str);
            goto fail;
        }
        snprintf(s->runtime, sizeof(s->runtime), "%s", str);
    } else if (function) {
        snprintf(s->runtime, sizeof(s->runtime), "shell");
    }
    if ((f = json_object_get(root, "image"))) {
        if (crl_json_get_string(f, "image", sizeof(s->image) - 1, &str, err) < 0)
            goto fail;
        if (!image_name_ok(str)) {
            crl_err_set(err, CRL_E_INVALID,
                        "image '%s' is not a valid image name ([A-Za-z0-9._-:/@], no '..')", str);
            goto fail;
        }
        snprintf(s->image, sizeof(s->image), "%s", str);
    }
    /* A call needs far less than a machine: a smaller default, so that
     * admission control (which reserves memory_mb) lets more run at once. */
    if (function)
        s->memory_mb = CRL_SPEC_FUNCTION_MEMORY_MB;
    if ((f = json_object_get(root, "resources")) && parse_resources(f, s, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "network")) && parse_network(f, s, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "services")) && parse_services(f, s, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "ttl_s")) &&
        crl_json_get_uint(f, "ttl_s", 0, 30 * 86400, &s->ttl_s, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "idle_ttl_s")) &&
        crl_json_get_uint(f, "idle_ttl_s", 0, 30 * 86400, &s->idle_ttl_s, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "on_ttl"))) {
        const char *v;
        if (crl_json_get_string(f, "on_ttl", 16, &v, err) < 0)
            goto fail;
        if (strcmp(v, "pause") != 0 && strcmp(v, "destroy") != 0) {
            crl_err_set(err, CRL_E_INVALID, "on_ttl must be destroy or pause, not '%s'", v);
            goto fail;
        }
        s->pause_on_ttl = v[0] == 'p';
    }
    if ((f = json_object_get(root, "labels")) && parse_labels(f, s, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "env")) && parse_env(f, "env", &s->env, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "cwd")) && get_abs_path(f, "cwd", &s->cwd, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "trajectory")) && parse_trajectory(f, s, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "volumes")) && parse_volumes(f, s, err) < 0)
        goto fail;
    return 0;
fail:
    crl_spec_free(s);
    return -1;
}

int crl_spec_parse(const char *json, size_t len, struct crl_spec *s, struct crl_err *err)
{
    json_t *root;
    crl_spec_init(s);
    if (crl_json_load(json, len, &root, err) < 0)
        return -1;
    int r = crl_spec_from_json(root, s, err);
    json_decref(root);
    return r;
}

json_t *crl_spec_to_json(const struct crl_spec *s)
{
    json_t *labels = json_object();
    for (size_t i = 0; i < s->n_labels; i++)
        json_object_set_new(labels, s->labels[i].key, json_string(s->labels[i].value));
    json_t *env = json_object();
    for (char **e = s->env; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        char *k = strndup(*e, (size_t)(eq - *e));
        if (k)
            json_object_set_new(env, k, json_string(eq + 1));
        free(k);
    }
    json_t *o = json_pack("{s:s, s:s, s:{s:f, s:i, s:i, s:i}, s:o, s:i, s:i, s:o, s:o}", "backend",
                          s->backend, "image", s->image, "resources", "cpus", s->cpus, "memory_mb",
                          (json_int_t)s->memory_mb, "pids", (json_int_t)s->pids, "disk_mb",
                          (json_int_t)s->disk_mb, "network", crl_net_policy_to_json(s->network),
                          "ttl_s", (json_int_t)s->ttl_s, "idle_ttl_s", (json_int_t)s->idle_ttl_s,
                          "labels", labels, "env", env);
    /* Only what was given: the spec a sandbox reports can be posted again. */
    if (o && s->cwd)
        json_object_set_new(o, "cwd", json_string(s->cwd));
    if (o && s->pause_on_ttl)
        json_object_set_new(o, "on_ttl", json_string("pause"));
    if (o && s->services)
        json_object_set_new(o, "services", crl_services_to_json(s->services));
    if (o && s->runtime[0])
        json_object_set_new(o, "runtime", json_string(s->runtime));
    if (o && s->n_volumes) {
        json_t *vols = json_array();
        for (size_t i = 0; i < s->n_volumes; i++)
            json_array_append_new(vols, json_pack("{s:s, s:s, s:b}", "name", s->volumes[i].name,
                                                  "path", s->volumes[i].path, "read_only",
                                                  s->volumes[i].read_only));
        json_object_set_new(o, "volumes", vols);
    }
    if (o && s->trajectory[0])
        json_object_set_new(o, "trajectory",
                            json_pack("{s:s, s:s}", "id", s->trajectory, "checkpoint",
                                      crl_checkpoint_mode_name(s->checkpoint)));
    return o;
}

bool crl_spec_labels_match(const struct crl_spec *s, const struct crl_kv *sel, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bool hit = false;
        for (size_t j = 0; j < s->n_labels && !hit; j++)
            hit = strcmp(s->labels[j].key, sel[i].key) == 0 &&
                  strcmp(s->labels[j].value, sel[i].value) == 0;
        if (!hit)
            return false;
    }
    return true;
}

/* Digits only: no sign, no blanks, at most 5 of them, below 65536. */
static int parse_id(const char *s, size_t len, unsigned long *out)
{
    if (len == 0 || len > 5)
        return -1;
    unsigned long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (v > 65535)
        return -1;
    *out = v;
    return 0;
}

/* "root", "UID" or "UID:GID", numeric inside the sandbox's 65536-id range. */
int crl_user_parse(const char *s, struct crl_user *u, struct crl_err *err)
{
    if (strcmp(s, "root") == 0) {
        u->uid = 0;
        u->gid = 0;
        u->set = true;
        return 0;
    }
    const char *colon = strchr(s, ':');
    size_t ul = colon ? (size_t)(colon - s) : strlen(s);
    unsigned long uid, gid;
    if (parse_id(s, ul, &uid) < 0 || (colon && parse_id(colon + 1, strlen(colon + 1), &gid) < 0))
        return crl_err_set(err, CRL_E_INVALID,
                           "user '%s' is not valid: expected root, UID or UID:GID with ids below "
                           "65536",
                           s);
    u->uid = (uid_t)uid;
    u->gid = (gid_t)(colon ? gid : uid);
    u->set = true;
    return 0;
}

void crl_exec_req_free(struct crl_exec_req *r)
{
    crl_strv_free(r->argv);
    crl_strv_free(r->env);
    free(r->cwd);
    free(r->stdin_data);
    free(r->tag);
    memset(r, 0, sizeof(*r));
}

int crl_tty_size_parse(json_t *v, const char *what, unsigned short *rows, unsigned short *cols,
                       struct crl_err *err)
{
    static const char *const keys[] = {"rows", "cols"};
    if (!json_is_object(v))
        return crl_err_set(err, CRL_E_INVALID, "%s must be an object {\"rows\", \"cols\"}, not %s",
                           what, crl_json_type_name(v));
    if (crl_json_check_keys(v, what, keys, CRL_ARRAY_SIZE(keys), err))
        return -1;
    unsigned r = CRL_TTY_DEFAULT_ROWS, c = CRL_TTY_DEFAULT_COLS;
    json_t *f;
    char name[64];
    snprintf(name, sizeof(name), "%s.rows", what);
    if ((f = json_object_get(v, "rows")) && crl_json_get_uint(f, name, 1, CRL_TTY_MAX, &r, err) < 0)
        return -1;
    snprintf(name, sizeof(name), "%s.cols", what);
    if ((f = json_object_get(v, "cols")) && crl_json_get_uint(f, name, 1, CRL_TTY_MAX, &c, err) < 0)
        return -1;
    *rows = (unsigned short)r;
    *cols = (unsigned short)c;
    return 0;
}

static int parse_cmd(json_t *v, bool session, struct crl_exec_req *r, struct crl_err *err)
{
    size_t total = 0;
    if (json_is_string(v)) {
        const char *s;
        if (json_string_length(v) > CRL_EXEC_MAX_ARGS_BYTES)
            return crl_err_set(err, CRL_E_TOO_LARGE, "cmd is larger than %u bytes",
                               CRL_EXEC_MAX_ARGS_BYTES);
        if (crl_json_get_string(v, "cmd", CRL_EXEC_MAX_ARGS_BYTES, &s, err) < 0)
            return -1;
        if (!*s)
            return crl_err_set(err, CRL_E_INVALID, "cmd must not be empty");
        r->argv = calloc(4, sizeof(char *));
        if (!r->argv)
            return crl_err_sys(err, ENOMEM, "parsing cmd");
        r->argv[0] = strdup("/bin/sh");
        r->argv[1] = strdup("-c");
        r->argv[2] = strdup(s);
        r->shell = true;
        if (!r->argv[0] || !r->argv[1] || !r->argv[2])
            return crl_err_sys(err, ENOMEM, "parsing cmd");
        return 0;
    }
    if (session)
        return crl_err_set(err, CRL_E_INVALID, "cmd must be a string for a session, not %s",
                           crl_json_type_name(v));
    if (!json_is_array(v))
        return crl_err_set(err, CRL_E_INVALID,
                           "cmd must be a string (run with /bin/sh -c) or an array of strings "
                           "(argv), not %s",
                           crl_json_type_name(v));
    size_t n = json_array_size(v);
    if (n == 0)
        return crl_err_set(err, CRL_E_INVALID, "cmd must not be an empty array");
    if (n > 65536)
        return crl_err_set(err, CRL_E_INVALID, "cmd has more than 65536 arguments");
    r->argv = calloc(n + 1, sizeof(char *));
    if (!r->argv)
        return crl_err_sys(err, ENOMEM, "parsing cmd");
    for (size_t i = 0; i < n; i++) {
        const char *s;
        char name[32];
        snprintf(name, sizeof(name), "cmd[%zu]", i);
        if (crl_json_get_string(json_array_get(v, i), name, CRL_EXEC_MAX_ARGS_BYTES, &s, err) < 0)
            return -1;
        total += strlen(s) + 1;
        if (total > CRL_EXEC_MAX_ARGS_BYTES)
            return crl_err_set(err, CRL_E_TOO_LARGE, "cmd is larger than %u bytes",
                               CRL_EXEC_MAX_ARGS_BYTES);
        if (!(r->argv[i] = strdup(s)))
            return crl_err_sys(err, ENOMEM, "parsing cmd");
    }
    if (!r->argv[0][0])
        return crl_err_set(err, CRL_E_INVALID, "cmd[0] must not be empty");
    return 0;
}

int crl_exec_req_parse(const char *json, size_t len, enum crl_exec_kind kind,
                       struct crl_exec_req *r, struct crl_err *err)
{
    static const char *const exec_keys[] = {"cmd",  "stdin",     "stdin_b64",        "env",   "cwd",
                                            "user", "timeout_s", "max_output_bytes", "stream"};
    static const char *const session_keys[] = {"cmd", "timeout_s", "max_output_bytes", "stream"};
    static const char *const process_keys[] = {
        "cmd",  "stdin",     "stdin_b64", "env", "cwd",
        "user", "timeout_s", "tty",       "tag", "output_buffer_bytes"};
    bool session = kind == CRL_EXEC_KIND_SESSION;
    json_t *root;
    memset(r, 0, sizeof(*r));
    r->timeout_s = kind == CRL_EXEC_KIND_PROCESS ? 0 : CRL_EXEC_DEFAULT_TIMEOUT_S;
    r->max_output = CRL_EXEC_DEFAULT_OUTPUT;
    r->ring_bytes = CRL_PROCESS_RING_DEFAULT;
    if (crl_json_load(json, len, &root, err) < 0)
        return -1;
    json_t *f;
    const char *s;
    int bad = kind == CRL_EXEC_KIND_SESSION
                  ? crl_json_check_keys(root, "", session_keys, CRL_ARRAY_SIZE(session_keys), err)
              : kind == CRL_EXEC_KIND_PROCESS
                  ? crl_json_check_keys(root, "", process_keys, CRL_ARRAY_SIZE(process_keys), err)
                  : crl_json_check_keys(root, "", exec_keys, CRL_ARRAY_SIZE(exec_keys), err);
    if (bad)
        goto fail;
    if ((f = json_object_get(root, "tty")) && !json_is_false(f)) {
        r->tty = true;
        r->rows = CRL_TTY_DEFAULT_ROWS;
        r->cols = CRL_TTY_DEFAULT_COLS;
        if (!json_is_true(f) && crl_tty_size_parse(f, "tty", &r->rows, &r->cols, err) < 0)
            goto fail;
    }
    if ((f = json_object_get(root, "tag"))) {
        if (crl_json_get_string(f, "tag", CRL_PROCESS_TAG_MAX, &s, err) < 0)
            goto fail;
        if (!(r->tag = strdup(s))) {
            crl_err_sys(err, ENOMEM, "tag");
            goto fail;
        }
    }
    if ((f = json_object_get(root, "output_buffer_bytes"))) {
        unsigned v;
        if (crl_json_get_uint(f, "output_buffer_bytes", 0, CRL_PROCESS_RING_MAX, &v, err) < 0)
            goto fail;
        r->ring_bytes = v;
    }
    /* An exec without cmd runs the image's entrypoint and cmd. */
    if (!(f = json_object_get(root, "cmd")) && session) {
        crl_err_set(err, CRL_E_INVALID, "cmd is required");
        goto fail;
    }
    if (f && parse_cmd(f, session, r, err) < 0)
        goto fail;
    json_t *in = json_object_get(root, "stdin"), *in64 = json_object_get(root, "stdin_b64");
    if (in && in64) {
        crl_err_set(err, CRL_E_INVALID, "give stdin or stdin_b64, not both");
        goto fail;
    }
    if (in) {
        if (!json_is_string(in)) {
            crl_err_set(err, CRL_E_INVALID, "stdin must be a string, not %s",
                        crl_json_type_name(in));
            goto fail;
        }
        r->stdin_len = json_string_length(in);
        r->stdin_data = malloc(r->stdin_len + 1);
        if (!r->stdin_data) {
            crl_err_sys(err, ENOMEM, "parsing stdin");
            goto fail;
        }
        memcpy(r->stdin_data, json_string_value(in), r->stdin_len + 1);
    } else if (in64) {
        if (crl_json_get_string(in64, "stdin_b64", 64u << 20, &s, err) < 0)
            goto fail;
        if (crl_base64_decode(s, strlen(s), &r->stdin_data, &r->stdin_len) < 0) {
            crl_err_set(err, CRL_E_INVALID, "stdin_b64 is not valid base64");
            goto fail;
        }
    }
    if ((f = json_object_get(root, "env")) && parse_env(f, "env", &r->env, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "cwd")) && get_abs_path(f, "cwd", &r->cwd, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "user"))) {
        if (crl_json_get_string(f, "user", 32, &s, err) < 0 || crl_user_parse(s, &r->user, err) < 0)
            goto fail;
    }
    if ((f = json_object_get(root, "timeout_s")) &&
        get_number(f, "timeout_s", 0, CRL_EXEC_MAX_TIMEOUT_S, &r->timeout_s, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "max_output_bytes"))) {
        unsigned v;
        if (crl_json_get_uint(f, "max_output_bytes", 0, CRL_EXEC_MAX_OUTPUT, &v, err) < 0)
            goto fail;
        r->max_output = v;
    }
    if ((f = json_object_get(root, "stream"))) {
        if (!json_is_boolean(f)) {
            crl_err_set(err, CRL_E_INVALID, "stream must be a boolean, not %s",
                        crl_json_type_name(f));
            goto fail;
        }
        r->stream = json_is_true(f);
    }
    json_decref(root);
    return 0;
fail:
    json_decref(root);
    crl_exec_req_free(r);
    return -1;
}

void crl_session_req_free(struct crl_session_req *r)
{
    crl_strv_free(r->env);
    free(r->cwd);
    free(r->shell);
    memset(r, 0, sizeof(*r));
}

int crl_session_req_parse(const char *json, size_t len, struct crl_session_req *r,
                          struct crl_err *err)
{
    static const char *const keys[] = {"env", "cwd", "shell", "user"};
    json_t *root;
    memset(r, 0, sizeof(*r));
    /* An empty body is an empty request: every field has a default. */
    if (len == 0)
        root = json_object();
    else if (crl_json_load(json, len, &root, err) < 0)
        return -1;
    json_t *f;
    const char *s;
    if (crl_json_check_keys(root, "", keys, CRL_ARRAY_SIZE(keys), err) < 0)
        goto fail;
    if ((f = json_object_get(root, "env")) && parse_env(f, "env", &r->env, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "cwd")) && get_abs_path(f, "cwd", &r->cwd, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "shell")) && get_abs_path(f, "shell", &r->shell, err) < 0)
        goto fail;
    if ((f = json_object_get(root, "user"))) {
        if (crl_json_get_string(f, "user", 32, &s, err) < 0 || crl_user_parse(s, &r->user, err) < 0)
            goto fail;
    }
    if (!r->shell && !(r->shell = strdup("/bin/sh")))
        goto nomem;
    json_decref(root);
    return 0;
nomem:
    crl_err_sys(err, ENOMEM, "parsing session request");
fail:
    json_decref(root);
    crl_session_req_free(r);
    return -1;
}
