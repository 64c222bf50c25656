#include "functions.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "jsonschema.h"

#define MAX_DESCRIPTION 4096
#define MAX_EXEC_ARGS_BYTES (64u << 10)

/* ---- one function ---- */

void crl_function_ref(struct crl_function *fn)
{
    fn->refs++;
}

void crl_function_unref(struct crl_function *fn)
{
    if (!fn || --fn->refs > 0)
        return;
    free(fn->error);
    free(fn->description);
    json_decref(fn->schema);
    json_decref(fn->entry);
    free(fn->dir);
    free(fn->source);
    crl_strv_free(fn->argv);
    free(fn);
}

bool crl_function_name_ok(const char *name)
{
    size_t n = strlen(name);
    return n > 0 && n <= CRL_FUNCTION_NAME_MAX &&
           strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

static bool identifier_ok(const char *s)
{
    if (!*s || strlen(s) > CRL_FUNCTION_NAME_MAX || !(isalpha((unsigned char)*s) || *s == '_'))
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return false;
    return true;
}

/* Read FILE (a Python entry) from fn->dir, if it changed since the last
 * read: its identity and mtime are the test. */
static int load_source(struct crl_function *fn, struct crl_err *err)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", fn->dir, fn->file);
    cleanup_close int fd = crl_openat(AT_FDCWD, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return crl_err_sys(err, errno, "entry: reading %s", fn->file);
    if (!S_ISREG(st.st_mode))
        return crl_err_set(err, CRL_E_INVALID, "entry: %s is not a regular file", fn->file);
    int64_t mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    if (fn->source && st.st_dev == fn->src_dev && st.st_ino == fn->src_ino &&
        st.st_size == fn->src_size && mtime_ns == fn->src_mtime_ns)
        return 0;
    if (st.st_size > (off_t)CRL_FUNCTION_MAX_SOURCE)
        return crl_err_set(err, CRL_E_INVALID, "entry: %s is larger than %u bytes", fn->file,
                           CRL_FUNCTION_MAX_SOURCE);
    size_t want = (size_t)st.st_size;
    cleanup_free char *src = malloc(want + 1);
    if (!src)
        return crl_err_sys(err, ENOMEM, "entry: reading %s", fn->file);
    ssize_t n = crl_read_full(fd, src, want + 1);
    if (n < 0)
        return crl_err_sys(err, errno, "entry: reading %s", fn->file);
    if ((size_t)n > want) /* it grew while we read: the next call reads it again */
        n = (ssize_t)want;
    src[n] = 0;
    free(fn->source);
    fn->source = steal_pointer(&src);
    fn->source_len = (size_t)n;
    fn->src_dev = st.st_dev;
    fn->src_ino = st.st_ino;
    fn->src_size = st.st_size;
    fn->src_mtime_ns = mtime_ns;
    return 0;
}

static int parse_python_entry(struct crl_function *fn, const char *entry, struct crl_err *err)
{
    const char *colon = strrchr(entry, ':');
    size_t fl = colon ? (size_t)(colon - entry) : 0;
    if (!colon || fl < 4 || fl >= sizeof(fn->file) || strncmp(colon - 3, ".py", 3) != 0)
        return crl_err_set(err, CRL_E_INVALID,
                           "entry '%s' is not FILE.py:CALLABLE (or {\"exec\": [...]})", entry);
    memcpy(fn->file, entry, fl);
    fn->file[fl] = 0;
    /* FILE is a name in the functions dir: no path, nothing hidden. */
    if (strchr(fn->file, '/') || strstr(fn->file, "..") || fn->file[0] == '.' ||
        strspn(fn->file, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != fl)
        return crl_err_set(err, CRL_E_INVALID,
                           "entry: '%s' must be a file name in the functions directory "
                           "([A-Za-z0-9_.-], no '/' or '..')",
                           fn->file);
    if (!identifier_ok(colon + 1))
        return crl_err_set(err, CRL_E_INVALID, "entry: '%s' is not a Python identifier", colon + 1);
    snprintf(fn->callable, sizeof(fn->callable), "%s", colon + 1);
    fn->kind = CRL_FN_PYTHON;
    return load_source(fn, err);
}

static int parse_exec_entry(struct crl_function *fn, json_t *entry, struct crl_err *err)
{
    json_t *argv = json_object_get(entry, "exec");
    if (json_object_size(entry) != 1 || !argv)
        return crl_err_set(err, CRL_E_INVALID,
                           "entry must be \"FILE.py:CALLABLE\" or {\"exec\": [argv...]}");
    if (!json_is_array(argv) || json_array_size(argv) == 0 || json_array_size(argv) > 4096)
        return crl_err_set(err, CRL_E_INVALID,
                           "entry.exec must be a non-empty array of strings (argv), not %s",
                           crl_json_type_name(argv));
    size_t n = json_array_size(argv), total = 0;
    if (!(fn->argv = calloc(n + 1, sizeof(char *))))
        return crl_err_sys(err, ENOMEM, "entry");
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(argv, i);
        if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a))
            return crl_err_set(err, CRL_E_INVALID, "entry.exec[%zu] must be a string without NUL",
                               i);
        total += json_string_length(a) + 1;
        if (total > MAX_EXEC_ARGS_BYTES)
            return crl_err_set(err, CRL_E_INVALID, "entry.exec is larger than %u bytes",
                               MAX_EXEC_ARGS_BYTES);
        if (!(fn->argv[i] = strdup(json_string_value(a))))
            return crl_err_sys(err, ENOMEM, "entry");
    }
    if (!fn->argv[0][0])
        return crl_err_set(err, CRL_E_INVALID, "entry.exec[0] must not be empty");
    fn->kind = CRL_FN_EXEC;
    return 0;
}

/* A limit in [lo, hi]: the ranges of the sandbox spec and of exec
 * (lib/core/spec.c), named as the definition names them. */
static int limit_number(json_t *lim, const char *key, double lo, double hi, bool integer,
                        double *out, struct crl_err *err)
{
    json_t *v = json_object_get(lim, key);
    if (!v)
        return 0;
    if (integer ? !json_is_integer(v) : !json_is_number(v))
        return crl_err_set(err, CRL_E_INVALID, "limits.%s must be %s between %g and %g, not %s",
                           key, integer ? "an integer" : "a number", lo, hi, crl_json_type_name(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return crl_err_set(err, CRL_E_INVALID, "limits.%s must be between %g and %g, not %g", key,
                           lo, hi, x);
    *out = x;
    return 0;
}

static int parse_limits(struct crl_function *fn, json_t *lim, struct crl_err *err)
{
    static const char *const keys[] = {"timeout_s", "memory_mb", "cpus", "pids",
                                       "max_output_bytes"};
    struct crl_function_limits *l = &fn->limits;
    if (!lim)
        return 0;
    if (!json_is_object(lim))
        return crl_err_set(err, CRL_E_INVALID, "limits must be an object, not %s",
                           crl_json_type_name(lim));
    const char *key;
    json_t *v;
    json_object_foreach(lim, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < CRL_ARRAY_SIZE(keys) && !known; i++)
            known = strcmp(key, keys[i]) == 0;
        if (!known)
            return crl_err_set(err, CRL_E_INVALID,
                               "unknown field 'limits.%s' (known: timeout_s, memory_mb, cpus, "
                               "pids, max_output_bytes)",
                               key);
    }
    double mem = 0, pids = 0, out = (double)l->max_output;
    if (limit_number(lim, "timeout_s", 0, CRL_EXEC_MAX_TIMEOUT_S, false, &l->timeout_s, err) < 0 ||
        limit_number(lim, "memory_mb", 16, 1 << 20, true, &mem, err) < 0 ||
        limit_number(lim, "cpus", 0.01, 1024, false, &l->cpus, err) < 0 ||
        limit_number(lim, "pids", 8, 1 << 22, true, &pids, err) < 0 ||
        limit_number(lim, "max_output_bytes", 0, CRL_EXEC_MAX_OUTPUT, true, &out, err) < 0)
        return -1;
    l->memory_mb = (unsigned)mem;
    l->pids = (unsigned)pids;
    l->max_output = (size_t)out;
    return 0;
}

static int parse_def(struct crl_function *fn, json_t *def, struct crl_err *err)
{
    static const char *const keys[] = {"name",   "runtime", "entry",
                                       "limits", "schema",  "description"};
    if (!json_is_object(def))
        return crl_err_set(err, CRL_E_INVALID, "a definition must be a JSON object, not %s",
                           crl_json_type_name(def));
    const char *key;
    json_t *v;
    json_object_foreach(def, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < CRL_ARRAY_SIZE(keys) && !known; i++)
            known = strcmp(key, keys[i]) == 0;
        if (!known)
            return crl_err_set(err, CRL_E_INVALID,
                               "unknown field '%s' (known: name, runtime, entry, description, "
                               "limits, schema)",
                               key);
    }
    if ((v = json_object_get(def, "name")) &&
        (!json_is_string(v) || strcmp(json_string_value(v), fn->name) != 0))
        return crl_err_set(err, CRL_E_INVALID,
                           "name must be \"%s\", the name of its file (%s.json)", fn->name,
                           fn->name);
    json_t *entry = json_object_get(def, "entry");
    if (!entry)
        return crl_err_set(err, CRL_E_INVALID,
                           "entry is required: \"FILE.py:CALLABLE\" or {\"exec\": [argv...]}");
    if (json_is_string(entry)) {
        if (parse_python_entry(fn, json_string_value(entry), err) < 0)
            return -1;
    } else if (json_is_object(entry)) {
        if (parse_exec_entry(fn, entry, err) < 0)
            return -1;
    } else {
        return crl_err_set(err, CRL_E_INVALID,
                           "entry must be \"FILE.py:CALLABLE\" or {\"exec\": [argv...]}, not %s",
                           crl_json_type_name(entry));
    }
    fn->entry = json_incref(entry);
    /* The runtime follows from the entry; when it is written, it must agree. */
    const char *rt = fn->kind == CRL_FN_PYTHON ? "python" : "shell";
    if ((v = json_object_get(def, "runtime"))) {
        const char *s = json_string_value(v);
        if (!s || (strcmp(s, "python") != 0 && strcmp(s, "shell") != 0))
            return crl_err_set(err, CRL_E_INVALID, "runtime must be \"python\" or \"shell\"");
        if (strcmp(s, rt) != 0)
            return crl_err_set(err, CRL_E_INVALID,
                               "runtime \"%s\" does not fit the entry: a FILE.py:CALLABLE entry "
                               "runs in python, an {\"exec\": [...]} entry in shell",
                               s);
    }
    snprintf(fn->runtime, sizeof(fn->runtime), "%s", rt);
    if ((v = json_object_get(def, "description"))) {
        if (!json_is_string(v) || json_string_length(v) > MAX_DESCRIPTION)
            return crl_err_set(err, CRL_E_INVALID,
                               "description must be a string of at most %d bytes", MAX_DESCRIPTION);
        if (!(fn->description = strdup(json_string_value(v))))
            return crl_err_sys(err, ENOMEM, "description");
    }
    if (parse_limits(fn, json_object_get(def, "limits"), err) < 0)
        return -1;
    if ((v = json_object_get(def, "schema"))) {
        if (crl_jsonschema_check(v, err) < 0)
            return crl_err_prefix(err, "schema");
        fn->schema = json_incref(v);
    }
    return 0;
}

static struct crl_function *fn_new(const char *name, const char *dir)
{
    struct crl_function *fn = calloc(1, sizeof(*fn));
    if (!fn || !(fn->dir = strdup(dir))) {
        free(fn);
        return NULL;
    }
    fn->refs = 1;
    snprintf(fn->name, sizeof(fn->name), "%s", name);
    fn->limits.timeout_s = CRL_EXEC_DEFAULT_TIMEOUT_S;
    fn->limits.max_output = CRL_EXEC_DEFAULT_OUTPUT;
    return fn;
}

/* A definition that cannot be used, listed with why. */
static struct crl_function *fn_broken(const char *name, const char *dir, struct crl_err *why,
                                      struct crl_err *err)
{
    struct crl_function *fn = fn_new(name, dir);
    crl_utf8_sanitize(why->msg);
    if (!fn || !(fn->error = strdup(why->msg))) {
        crl_function_unref(fn);
        crl_err_sys(err, ENOMEM, "function %s", name);
        return NULL;
    }
    return fn;
}

struct crl_function *crl_function_parse(const char *name, json_t *def, const char *dir,
                                        struct crl_err *err)
{
    struct crl_err why = CRL_ERR_INIT;
    if (!crl_function_name_ok(name)) {
        crl_err_set(&why, CRL_E_INVALID, "'%s.json': a function's name is 1-64 of [a-z0-9_-]",
                    name);
        return fn_broken(name, dir, &why, err);
    }
    struct crl_function *fn = fn_new(name, dir);
    if (!fn) {
        crl_err_sys(err, ENOMEM, "function %s", name);
        return NULL;
    }
    if (parse_def(fn, def, &why) < 0) {
        crl_function_unref(fn);
        return fn_broken(name, dir, &why, err);
    }
    return fn;
}

json_t *crl_function_json(const struct crl_function *fn, bool full)
{
    if (fn->error)
        return json_pack("{s:s, s:s}", "name", fn->name, "error", fn->error);
    json_t *o = json_pack("{s:s, s:s, s:s, s:O}", "name", fn->name, "runtime", fn->runtime,
                          "description", fn->description ? fn->description : "", "schema",
                          fn->schema ? fn->schema : json_null());
    if (o && full) {
        const struct crl_function_limits *l = &fn->limits;
        json_t *lim = json_pack("{s:f, s:I}", "timeout_s", l->timeout_s, "max_output_bytes",
                                (json_int_t)l->max_output);
        if (lim && l->memory_mb)
            json_object_set_new(lim, "memory_mb", json_integer(l->memory_mb));
        if (lim && l->cpus > 0)
            json_object_set_new(lim, "cpus", json_real(l->cpus));
        if (lim && l->pids)
            json_object_set_new(lim, "pids", json_integer(l->pids));
        json_object_set(o, "entry", fn->entry);
        json_object_set_new(o, "limits", lim);
    }
    return o;
}

/* ---- a call ---- */

int crl_function_args(const struct crl_function *fn, const char *body, size_t len, json_t **out,
                      struct crl_err *err)
{
    if (len > CRL_FUNCTION_MAX_ARGS)
        return crl_err_set(err, CRL_E_TOO_LARGE, "the arguments are larger than %u bytes",
                           CRL_FUNCTION_MAX_ARGS);
    size_t blank = 0;
    while (blank < len && strchr(" \t\r\n", body[blank]))
        blank++;
    json_t *args;
    if (blank == len) {
        args = json_object(); /* no body: no arguments */
    } else {
        json_error_t je;
        args =
            json_loadb(body, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
        if (!args)
            return crl_err_set(err, CRL_E_JSON,
                               "the arguments are not valid JSON: %s at line %d column %d", je.text,
                               je.line, je.column);
    }
    if (!args)
        return crl_err_sys(err, ENOMEM, "arguments");
    if (fn->schema && crl_jsonschema_validate(fn->schema, args, "args", err) < 0) {
        json_decref(args);
        return -1;
    }
    *out = args;
    return 0;
}

int crl_function_spec(const struct crl_function *fn, struct crl_spec *spec, struct crl_err *err)
{
    const struct crl_function_limits *l = &fn->limits;
    /* A spec as a client would send it, through the one parser: the
     * function backend's checks and defaults apply as they do to anyone. */
    json_auto_t *j = json_pack("{s:s, s:s, s:{s:s}}", "backend", "function", "runtime", fn->runtime,
                               "labels", CRL_FUNCTION_LABEL, fn->name);
    json_t *res = json_object();
    if (!j || !res) {
        json_decref(res);
        crl_spec_init(spec);
        return crl_err_sys(err, ENOMEM, "function spec");
    }
    if (l->memory_mb)
        json_object_set_new(res, "memory_mb", json_integer(l->memory_mb));
    if (l->cpus > 0)
        json_object_set_new(res, "cpus", json_real(l->cpus));
    if (l->pids)
        json_object_set_new(res, "pids", json_integer(l->pids));
    json_object_set_new(j, "resources", res);
    /* A backstop should the call's own destroy never come: its time and a margin. */
    if (l->timeout_s > 0)
        json_object_set_new(j, "ttl_s", json_integer((json_int_t)l->timeout_s + 60));
    else
        json_object_set_new(j, "ttl_s", json_integer(0));
    if (crl_spec_from_json(j, spec, err) < 0)
        return crl_err_prefix(err, "function %s", fn->name);
    return 0;
}

char *crl_function_runner(const char *file, const char *callable, const char *source, size_t len)
{
    /* The module's source travels in base64: any bytes, its own coding
     * cookie honoured by compile().  FILE and CALLABLE are checked names
     * ([A-Za-z0-9_.-]), safe inside quotes.  The function's prints go to
     * stderr, fd 1 included (a subprocess's too); only the result reaches
     * the real stdout. */
    cleanup_free char *b64 = crl_base64_encode(source, len, NULL);
    if (!b64)
        return NULL;
    char module[CRL_FUNCTION_NAME_MAX + 8];
    snprintf(module, sizeof(module), "%s", file);
    char *dot = strrchr(module, '.');
    if (dot)
        *dot = 0;
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    int rc =
        crl_buf_printf(&b,
                       "import base64, json, os, sys, traceback, types\n"
                       "def _corral_call():\n"
                       "    sys.stdout.flush()\n"
                       "    out = os.fdopen(os.dup(1), 'w', encoding='utf-8')\n"
                       "    os.dup2(2, 1)\n"
                       "    sys.stdout = sys.stderr\n"
                       "    mod = types.ModuleType('%s')\n"
                       "    mod.__file__ = '%s'\n"
                       "    sys.modules['%s'] = mod\n"
                       "    try:\n"
                       "        exec(compile(base64.b64decode('%s'), '%s', 'exec'), mod.__dict__)\n"
                       "        fn = getattr(mod, '%s', None)\n"
                       "        if not callable(fn):\n"
                       "            raise LookupError(\"%s defines no callable '%s'\")\n"
                       "        raw = sys.stdin.buffer.read()\n"
                       "        args = json.loads(raw) if raw.strip() else {}\n"
                       "        result = fn(**args) if isinstance(args, dict) else fn(args)\n"
                       "        text = json.dumps(result, allow_nan=False)\n"
                       "    except SystemExit:\n"
                       "        raise\n"
                       "    except BaseException as e:\n"
                       "        tb = e.__traceback__\n"
                       "        traceback.print_exception(type(e), e, tb.tb_next or tb)\n"
                       "        sys.stderr.flush()\n"
                       "        sys.exit(1)\n"
                       "    sys.stderr.flush()\n"
                       "    out.write(text)\n"
                       "    out.write('\\n')\n"
                       "    out.flush()\n"
                       "_corral_call()\n",
                       module, file, module, b64, file, callable, file, callable);
    if (rc < 0) {
        crl_buf_free(&b);
        return NULL;
    }
    return b.data;
}

int crl_function_exec_req(struct crl_function *fn, json_t *args, struct crl_exec_req *req,
                          struct crl_err *err)
{
    memset(req, 0, sizeof(*req));
    if (fn->error)
        return crl_err_set(err, CRL_E_CONFLICT, "function %s cannot be called: %s", fn->name,
                           fn->error);
    char *in = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!in)
        return crl_err_sys(err, ENOMEM, "arguments");
    size_t in_len = strlen(in);
    req->stdin_data = realloc(in, in_len + 2);
    if (!req->stdin_data) {
        free(in);
        return crl_err_sys(err, ENOMEM, "arguments");
    }
    memcpy(req->stdin_data + in_len, "\n", 2); /* a line, for `read` */
    req->stdin_len = in_len + 1;
    req->timeout_s = fn->limits.timeout_s;
    req->max_output = fn->limits.max_output + 1;
    req->stream = true;
    if (fn->kind == CRL_FN_EXEC) {
        size_t n = crl_strv_len(fn->argv);
        if (!(req->argv = calloc(n + 1, sizeof(char *))))
            goto nomem;
        for (size_t i = 0; i < n; i++)
            if (!(req->argv[i] = strdup(fn->argv[i])))
                goto nomem;
        return 0;
    }
    if (load_source(fn, err) < 0) {
        crl_exec_req_free(req);
        err->code = CRL_E_CONFLICT;
        return crl_err_prefix(err, "function %s cannot be called", fn->name);
    }
    /* A Python runtime runs a string cmd (sh -c form) as Python source. */
    if (!(req->argv = calloc(4, sizeof(char *))) || !(req->argv[0] = strdup("/bin/sh")) ||
        !(req->argv[1] = strdup("-c")) ||
        !(req->argv[2] = crl_function_runner(fn->file, fn->callable, fn->source, fn->source_len)))
        goto nomem;
    req->shell = true;
    return 0;
nomem:
    crl_exec_req_free(req);
    return crl_err_sys(err, ENOMEM, "function %s", fn->name);
}

/* Output as a JSON string: invalid UTF-8 and NUL bytes become '?'. */
static json_t *text_json(const char *data, size_t len)
{
    if (!len)
        return json_string("");
    if (crl_utf8_valid(data, len))
        return json_stringn(data, len);
    cleanup_free char *copy = malloc(len + 1);
    if (!copy)
        return json_string("");
    for (size_t i = 0; i < len; i++)
        copy[i] = data[i] ? data[i] : '?';
    copy[len] = 0;
    crl_utf8_sanitize(copy);
    return json_stringn(copy, len);
}

/* The last line of stderr, where a traceback names its exception. */
static void last_line(const char *s, size_t len, char *out, size_t cap)
{
    out[0] = 0;
    while (len && strchr("\r\n \t", s[len - 1]))
        len--;
    size_t start = len;
    while (start && s[start - 1] != '\n')
        start--;
    size_t n = len - start;
    if (n >= cap)
        n = cap - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = s[start + i] ? s[start + i] : '?';
    out[n] = 0;
    out[crl_utf8_complete_prefix(out, n)] = 0;
    crl_utf8_sanitize(out);
}

json_t *crl_function_answer(const struct crl_exec_result *r, const char *out, size_t out_len,
                            const char *err_out, size_t err_len, bool overflow)
{
    char msg[512];
    const char *reason = overflow ? "output_limit" : r->reason;
    if (!overflow && strcmp(r->reason, "exited") == 0 && r->exit_code == 0) {
        json_error_t je;
        json_t *result = json_loadb(out ? out : "", out_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (result)
            return json_pack("{s:b, s:o, s:f, s:o}", "ok", 1, "result", result, "duration_s",
                             r->duration_s, "stderr", text_json(err_out, err_len));
        snprintf(msg, sizeof(msg),
                 out_len ? "its output is not one JSON value: %s at line %d column %d"
                         : "it wrote no result (stdout is empty)",
                 je.text, je.line, je.column);
    } else if (overflow) {
        snprintf(msg, sizeof(msg),
                 "it wrote more than its limit of output (limits.max_output_bytes) and was "
                 "killed");
    } else if (strcmp(reason, "timeout") == 0) {
        snprintf(msg, sizeof(msg),
                 "it ran out of time (limits.timeout_s) after %.3f s and was killed",
                 r->duration_s);
    } else if (strcmp(reason, "oom") == 0) {
        snprintf(msg, sizeof(msg), "it ran out of memory (limits.memory_mb) and was killed");
    } else if (strcmp(reason, "killed") == 0) {
        snprintf(msg, sizeof(msg), "its sandbox was destroyed while it ran");
    } else if (r->signal) {
        const char *abbrev = sigabbrev_np(r->signal);
        snprintf(msg, sizeof(msg), "it was killed by signal %d (SIG%s)", r->signal,
                 abbrev ? abbrev : "?");
    } else {
        char line[300];
        last_line(err_out ? err_out : "", err_len, line, sizeof(line));
        snprintf(msg, sizeof(msg), "it exited with status %d%s%s", r->exit_code,
                 line[0] ? ": " : "", line);
    }
    size_t shown = out_len;
    if (shown > CRL_FUNCTION_STDOUT_SHOWN)
        shown = crl_utf8_complete_prefix(out, CRL_FUNCTION_STDOUT_SHOWN);
    return json_pack("{s:b, s:s, s:o, s:o, s:s, s:o, s:o, s:f}", "ok", 0, "reason", reason,
                     "exit_code", r->signal ? json_null() : json_integer(r->exit_code), "signal",
                     r->signal ? json_integer(r->signal) : json_null(), "error", msg, "stdout",
                     text_json(out, shown), "stderr", text_json(err_out, err_len), "duration_s",
                     r->duration_s);
}

/* ---- the directory ---- */

struct entry {
    struct crl_function *fn;
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
};

struct crl_functions {
    char *dir;
    struct entry *e;
    size_t n;
    bool loaded;
    /* the directory as last read: a change of any of these reloads */
    bool exists;
    dev_t dev;
    ino_t ino;
    int64_t mtime_ns;
    bool racy;
};

static int64_t mtime_of(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

struct crl_functions *crl_functions_new(const char *dir)
{
    struct crl_functions *fs = calloc(1, sizeof(*fs));
    if (fs && !(fs->dir = strdup(dir))) {
        free(fs);
        return NULL;
    }
    return fs;
}

static void entries_free(struct entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        crl_function_unref(e[i].fn);
    free(e);
}

void crl_functions_free(struct crl_functions *fs)
{
    if (!fs)
        return;
    entries_free(fs->e, fs->n);
    free(fs->dir);
    free(fs);
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->fn->name, ((const struct entry *)b)->fn->name);
}

/* One NAME.json: parsed, or the function of the last scan when its file is
 * the same (no re-read, no second log line for the same fault). */
static struct crl_function *load_one(struct crl_functions *fs, int dfd, const char *fname,
                                     struct entry *e)
{
    char name[CRL_FUNCTION_NAME_MAX + 1];
    size_t stem = strlen(fname) - 5;
    snprintf(name, sizeof(name), "%.*s", (int)(stem < sizeof(name) ? stem : sizeof(name) - 1),
             fname);
    crl_utf8_sanitize(name);
    struct crl_err err = CRL_ERR_INIT;
    cleanup_close int fd = crl_openat(dfd, fname, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
    struct stat st;
    json_auto_t *def = NULL;
    if (fd < 0 || fstat(fd, &st) < 0) {
        crl_err_sys(&err, errno, "reading %s", fname);
    } else if (!S_ISREG(st.st_mode) || st.st_size > (off_t)CRL_FUNCTION_MAX_DEF) {
        crl_err_set(&err, CRL_E_INVALID, "%s is not a regular file of at most %u bytes", fname,
                    CRL_FUNCTION_MAX_DEF);
    } else {
        e->dev = st.st_dev;
        e->ino = st.st_ino;
        e->size = st.st_size;
        e->mtime_ns = mtime_of(&st);
        for (size_t i = 0; i < fs->n; i++) {
            struct entry *old = &fs->e[i];
            if (strcmp(old->fn->name, name) == 0 && old->dev == e->dev && old->ino == e->ino &&
                old->size == e->size && old->mtime_ns == e->mtime_ns) {
                crl_function_ref(old->fn);
                return old->fn;
            }
        }
        json_error_t je;
        if (!(def = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je)))
            crl_err_set(&err, CRL_E_INVALID, "not valid JSON: %s at line %d column %d", je.text,
                        je.line, je.column);
    }
    struct crl_function *fn =
        def ? crl_function_parse(name, def, fs->dir, NULL) : fn_broken(name, fs->dir, &err, NULL);
    if (fn && fn->error)
        crl_warn(NULL, "functions: %s/%s: %s", fs->dir, fname, fn->error);
    else if (fn)
        crl_info(NULL, "functions: loaded %s (%s)", fn->name, fn->runtime);
    return fn;
}

static void scan(struct crl_functions *fs)
{
    struct entry *e = NULL;
    size_t n = 0, cap = 0;
    int dfd = crl_openat(AT_FDCWD, fs->dir, O_RDONLY | O_DIRECTORY, 0);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (errno != ENOENT)
            crl_log_syscall(NULL, errno, "opendir %s", fs->dir);
        if (dfd >= 0)
            close(dfd);
    }
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len <= 5 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct entry *ne = realloc(e, ncap * sizeof(*e));
            if (!ne)
                break;
            e = ne;
            cap = ncap;
        }
        memset(&e[n], 0, sizeof(e[n]));
        if ((e[n].fn = load_one(fs, dirfd(d), de->d_name, &e[n])))
            n++;
    }
    if (d)
        closedir(d);
    if (n)
        qsort(e, n, sizeof(*e), entry_cmp);
    entries_free(fs->e, fs->n);
    fs->e = e;
    fs->n = n;
}

/* Has a definition file changed in place (written over, not renamed in:
 * that would change the directory)? */
static bool files_changed(struct crl_functions *fs)
{
    int dfd = crl_openat(AT_FDCWD, fs->dir, O_RDONLY | O_DIRECTORY | O_PATH, 0);
    if (dfd < 0)
        return true;
    bool changed = false;
    for (size_t i = 0; i < fs->n && !changed; i++) {
        char fname[CRL_FUNCTION_NAME_MAX + 8];
        struct stat st;
        snprintf(fname, sizeof(fname), "%s.json", fs->e[i].fn->name);
        changed = fstatat(dfd, fname, &st, 0) < 0 || st.st_ino != fs->e[i].ino ||
                  st.st_size != fs->e[i].size || mtime_of(&st) != fs->e[i].mtime_ns;
    }
    close(dfd);
    return changed;
}

void crl_functions_refresh(struct crl_functions *fs)
{
    struct stat st;
    bool exists = stat(fs->dir, &st) == 0 && S_ISDIR(st.st_mode);
    if (!exists) {
        if (fs->loaded && !fs->exists)
            return;
        entries_free(fs->e, fs->n);
        fs->e = NULL;
        fs->n = 0;
        fs->exists = false;
        fs->loaded = true;
        return;
    }
    bool same = fs->loaded && fs->exists && !fs->racy && st.st_dev == fs->dev &&
                st.st_ino == fs->ino && mtime_of(&st) == fs->mtime_ns;
    if (same && !files_changed(fs))
        return;
    /* A change in the same clock tick as our read would leave the mtime as
     * it was: until the directory's mtime is a second old, look again each
     * time (git's "racy" entries). */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    fs->racy = now_ns - mtime_of(&st) < 1000000000;
    fs->exists = true;
    fs->dev = st.st_dev;
    fs->ino = st.st_ino;
    fs->mtime_ns = mtime_of(&st);
    fs->loaded = true;
    scan(fs);
}

struct crl_function *crl_functions_get(struct crl_functions *fs, const char *name,
                                       struct crl_err *err)
{
    crl_functions_refresh(fs);
    for (size_t i = 0; i < fs->n; i++)
        if (strcmp(fs->e[i].fn->name, name) == 0) {
            crl_function_ref(fs->e[i].fn);
            return fs->e[i].fn;
        }
    struct crl_buf known;
    crl_buf_init(&known, CRL_BUF_UNBOUNDED);
    for (size_t i = 0; i < fs->n; i++)
        crl_buf_printf(&known, "%s%s", i ? ", " : "", fs->e[i].fn->name);
    crl_err_set(err, CRL_E_NOT_FOUND, "no function '%s' (known: %s)", name,
                known.len ? known.data : "none");
    crl_buf_free(&known);
    return NULL;
}

json_t *crl_functions_list_json(struct crl_functions *fs)
{
    crl_functions_refresh(fs);
    json_t *list = json_array();
    for (size_t i = 0; i < fs->n; i++)
        json_array_append_new(list, crl_function_json(fs->e[i].fn, false));
    return json_pack("{s:o}", "functions", list);
}
