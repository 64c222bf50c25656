/* lib/core/spec: the one parser and validator of sandbox specs, exec and
 * session requests (docs/api.md).  Every refusal must carry the right error
 * code (400 invalid_argument / invalid_json, 501 not_implemented) and a
 * message that names the offending field. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/spec.h"
#include "../../lib/util/buf.h"
#include "tap.h"

/* ---- helpers ---- */

static const char *code_name(enum crl_errc c)
{
    return crl_errc_name(c);
}

/* The spec `json` is refused with `code` and a message matching `re`. */
static void spec_bad(const char *json, enum crl_errc code, const char *re)
{
    struct crl_spec s;
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_spec_parse(json, strlen(json), &s, &e);
    if (!ok(r < 0 && e.code == code, "spec %.120s: refused as %s", json, code_name(code)))
        diag("returned %d, code %s, message '%s'", r, code_name(e.code), e.msg);
    like(e.msg, re, "spec %.120s: the message matches /%s/", json, re);
    if (r == 0)
        crl_spec_free(&s);
}

static bool spec_good(const char *json, struct crl_spec *s)
{
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_spec_parse(json, strlen(json), s, &e);
    if (!ok(r == 0, "spec %.120s: accepted", json))
        diag("refused: %s (%s)", e.msg, code_name(e.code));
    return r == 0;
}

/* Accepted and freed at once: for values on the edge of a range. */
static void spec_ok(const char *json)
{
    struct crl_spec s;
    if (spec_good(json, &s))
        crl_spec_free(&s);
}

static enum crl_exec_kind kind_of(bool session)
{
    return session ? CRL_EXEC_KIND_SESSION : CRL_EXEC_KIND_EXEC;
}

static void exec_bad(const char *json, bool session, enum crl_errc code, const char *re)
{
    struct crl_exec_req q;
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_exec_req_parse(json, strlen(json), kind_of(session), &q, &e);
    if (!ok(r < 0 && e.code == code, "%s %.120s: refused as %s", session ? "session run" : "exec",
            json, code_name(code)))
        diag("returned %d, code %s, message '%s'", r, code_name(e.code), e.msg);
    like(e.msg, re, "%s %.120s: the message matches /%s/", session ? "session run" : "exec", json,
         re);
    if (r == 0)
        crl_exec_req_free(&q);
}

static bool exec_good(const char *json, bool session, struct crl_exec_req *q)
{
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_exec_req_parse(json, strlen(json), kind_of(session), q, &e);
    if (!ok(r == 0, "%s %.120s: accepted", session ? "session run" : "exec", json))
        diag("refused: %s (%s)", e.msg, code_name(e.code));
    return r == 0;
}

static void exec_ok(const char *json)
{
    struct crl_exec_req q;
    if (exec_good(json, false, &q))
        crl_exec_req_free(&q);
}

static bool strv_has(char *const *v, const char *s)
{
    for (; v && *v; v++)
        if (strcmp(*v, s) == 0)
            return true;
    return false;
}

/* A JSON document built by printf, for long values. */
static char *jsonf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *jsonf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        bail_out("vasprintf");
    va_end(ap);
    return s;
}

static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        bail_out("malloc");
    memset(s, c, n);
    s[n] = 0;
    return s;
}

/* ---- the sandbox spec ---- */

static void test_spec_defaults(void)
{
    struct crl_spec s;
    if (!spec_good("{}", &s))
        return;
    is_str(s.backend, "container", "default backend is container");
    is_str(s.image, "busybox", "default image is busybox");
    ok(s.cpus == 1.0, "default cpus is 1");
    is_int(s.memory_mb, 512, "default memory_mb is 512");
    is_int(s.pids, 512, "default pids is 512");
    is_int(s.disk_mb, 1024, "default disk_mb is 1024");
    ok(s.network == NULL, "default network mode is none (no policy)");
    is_int(s.ttl_s, 3600, "default ttl_s is 3600");
    is_int(s.idle_ttl_s, 0, "default idle_ttl_s is 0 (none)");
    is_int(s.n_labels, 0, "no labels by default");
    ok(s.env == NULL, "no env by default");
    ok(s.cwd == NULL, "no cwd by default (the image's)");
    is_str(s.runtime, "", "no runtime but for the function backend");
    crl_spec_free(&s);

    if (spec_good("{\"backend\": \"function\"}", &s)) {
        is_str(s.runtime, "shell", "the function backend's default runtime is shell");
        is_int(s.memory_mb, 128, "and its default memory_mb is 128");
        crl_spec_free(&s);
    }
    if (spec_good("{\"backend\": \"function\", \"runtime\": \"python\", "
                  "\"resources\": {\"memory_mb\": 300}}",
                  &s)) {
        is_str(s.runtime, "python", "a runtime given is kept");
        is_int(s.memory_mb, 300, "a memory_mb given wins over the function default");
        crl_spec_free(&s);
    }

    struct crl_spec i;
    crl_spec_init(&i);
    ok(strcmp(i.backend, "container") == 0 && i.memory_mb == 512 && i.ttl_s == 3600,
       "crl_spec_init gives the same defaults");
    crl_spec_free(&i);

    if (spec_good("{\"resources\": {}, \"network\": {}, \"labels\": {}, \"env\": {}}", &s)) {
        ok(s.memory_mb == 512 && s.cpus == 1.0 && s.n_labels == 0 && crl_strv_len(s.env) == 0,
           "empty nested objects keep the defaults");
        crl_spec_free(&s);
    }
}

static const char full_spec[] =
    "{\"backend\": \"container\", \"image\": \"python:3.12-slim\","
    " \"resources\": {\"cpus\": 2.5, \"memory_mb\": 2048, \"pids\": 100, \"disk_mb\": 300},"
    " \"network\": {\"mode\": \"none\"}, \"ttl_s\": 600, \"idle_ttl_s\": 60,"
    " \"labels\": {\"team\": \"ml\", \"run.id/x-y_z\": \"42 \\u00e9\"},"
    " \"env\": {\"PATH\": \"/usr/bin:/bin\", \"_X1\": \"\", \"LANG\": \"C.UTF-8\"},"
    " \"cwd\": \"/work/dir\"}";

static void test_spec_full(void)
{
    struct crl_spec s;
    if (!spec_good(full_spec, &s))
        return;
    is_str(s.backend, "container", "backend");
    is_str(s.image, "python:3.12-slim", "image");
    ok(s.cpus == 2.5, "resources.cpus 2.5");
    is_int(s.memory_mb, 2048, "resources.memory_mb");
    is_int(s.pids, 100, "resources.pids");
    is_int(s.disk_mb, 300, "resources.disk_mb");
    ok(s.network == NULL, "network.mode none: no policy");
    is_int(s.ttl_s, 600, "ttl_s");
    is_int(s.idle_ttl_s, 60, "idle_ttl_s");
    is_int(s.n_labels, 2, "two labels");
    struct crl_kv sel[2] = {{(char *)"team", (char *)"ml"},
                            {(char *)"run.id/x-y_z", (char *)"42 \xc3\xa9"}};
    ok(crl_spec_labels_match(&s, sel, 2), "both labels are there with their values");
    is_int(crl_strv_len(s.env), 3, "three env entries");
    ok(strv_has(s.env, "PATH=/usr/bin:/bin") && strv_has(s.env, "_X1=") &&
           strv_has(s.env, "LANG=C.UTF-8"),
       "env entries are K=V, an empty value included");
    is_str(s.cwd, "/work/dir", "cwd");
    crl_spec_free(&s);
    ok(s.env == NULL && s.cwd == NULL && s.n_labels == 0, "crl_spec_free clears what it freed");

    static const char *const backends[] = {"container", "function", "microvm", "vm", "auto"};
    for (size_t i = 0; i < 5; i++) {
        char *j = jsonf("{\"backend\": \"%s\"}", backends[i]);
        if (spec_good(j, &s)) {
            is_str(s.backend, backends[i], "backend '%s' is kept", backends[i]);
            crl_spec_free(&s);
        }
        free(j);
    }
    static const char *const images[] = {"busybox", "debian:12", "ghcr.io/org/img:1.0",
                                         "reg.example.com:5000/a/b@sha256:0123abcd", "a_b-c.d"};
    for (size_t i = 0; i < 5; i++) {
        char *j = jsonf("{\"image\": \"%s\"}", images[i]);
        if (spec_good(j, &s)) {
            is_str(s.image, images[i], "image '%s' is kept", images[i]);
            crl_spec_free(&s);
        }
        free(j);
    }
    if (spec_good("{\"resources\": {\"cpus\": 3}}", &s)) {
        ok(s.cpus == 3.0, "an integer cpus is taken as a number");
        crl_spec_free(&s);
    }
}

static void test_spec_types(void)
{
    spec_bad("{\"backend\": 1}", CRL_E_INVALID, "^backend must be a string, not an integer");
    spec_bad("{\"image\": true}", CRL_E_INVALID, "^image must be a string, not a boolean");
    spec_bad("{\"image\": null}", CRL_E_INVALID, "^image must be a string, not null");
    spec_bad("{\"resources\": []}", CRL_E_INVALID, "^resources must be an object, not an array");
    spec_bad("{\"resources\": 4}", CRL_E_INVALID, "^resources must be an object");
    spec_bad("{\"resources\": {\"cpus\": \"2\"}}", CRL_E_INVALID,
             "^resources\\.cpus must be a number.*not a string");
    spec_bad("{\"resources\": {\"cpus\": null}}", CRL_E_INVALID,
             "^resources\\.cpus must be a number");
    spec_bad("{\"resources\": {\"memory_mb\": 512.5}}", CRL_E_INVALID,
             "^resources\\.memory_mb must be an integer.*not a number");
    spec_bad("{\"resources\": {\"memory_mb\": 512.0}}", CRL_E_INVALID,
             "^resources\\.memory_mb must be an integer");
    spec_bad("{\"resources\": {\"memory_mb\": \"512\"}}", CRL_E_INVALID,
             "^resources\\.memory_mb must be an integer.*not a string");
    spec_bad("{\"resources\": {\"pids\": null}}", CRL_E_INVALID,
             "^resources\\.pids must be an integer");
    spec_bad("{\"resources\": {\"disk_mb\": {}}}", CRL_E_INVALID,
             "^resources\\.disk_mb must be an integer.*not an object");
    spec_bad("{\"network\": \"none\"}", CRL_E_INVALID, "^network must be an object, not a string");
    spec_bad("{\"network\": {\"mode\": 1}}", CRL_E_INVALID, "^network\\.mode must be a string");
    spec_bad("{\"ttl_s\": 1.5}", CRL_E_INVALID, "^ttl_s must be an integer");
    spec_bad("{\"ttl_s\": \"3600\"}", CRL_E_INVALID, "^ttl_s must be an integer.*not a string");
    spec_bad("{\"idle_ttl_s\": false}", CRL_E_INVALID, "^idle_ttl_s must be an integer.*boolean");
    spec_bad("{\"labels\": []}", CRL_E_INVALID,
             "^labels must be an object of strings, not an array");
    spec_bad("{\"labels\": {\"k\": 1}}", CRL_E_INVALID, "^labels\\.k must be a string");
    spec_bad("{\"labels\": {\"k\": null}}", CRL_E_INVALID,
             "^labels\\.k must be a string, not null");
    spec_bad("{\"env\": [\"A=1\"]}", CRL_E_INVALID,
             "^env must be an object of strings, not an array");
    spec_bad("{\"env\": {\"A\": 1}}", CRL_E_INVALID, "^env\\.A must be a string, not an integer");
    spec_bad("{\"env\": {\"A\": true}}", CRL_E_INVALID, "^env\\.A must be a string");
    spec_bad("{\"cwd\": 1}", CRL_E_INVALID, "^cwd must be a string");
    spec_bad("{\"cwd\": [\"/\"]}", CRL_E_INVALID, "^cwd must be a string, not an array");
}

static void test_spec_ranges(void)
{
    /* resources.cpus 0.01 - 1024 */
    spec_ok("{\"resources\": {\"cpus\": 0.01}}");
    spec_bad("{\"resources\": {\"cpus\": 0.0099}}", CRL_E_INVALID,
             "^resources\\.cpus must be between 0\\.01 and 1024");
    spec_bad("{\"resources\": {\"cpus\": 0}}", CRL_E_INVALID, "resources\\.cpus");
    spec_bad("{\"resources\": {\"cpus\": -1}}", CRL_E_INVALID, "resources\\.cpus");
    spec_ok("{\"resources\": {\"cpus\": 1024}}");
    spec_bad("{\"resources\": {\"cpus\": 1024.001}}", CRL_E_INVALID, "resources\\.cpus");
    spec_bad("{\"resources\": {\"cpus\": 1e300}}", CRL_E_INVALID, "resources\\.cpus");
    /* resources.memory_mb 16 - 1048576 */
    spec_ok("{\"resources\": {\"memory_mb\": 16}}");
    spec_bad("{\"resources\": {\"memory_mb\": 15}}", CRL_E_INVALID,
             "^resources\\.memory_mb must be between 16 and 1048576, not 15$");
    spec_ok("{\"resources\": {\"memory_mb\": 1048576}}");
    spec_bad("{\"resources\": {\"memory_mb\": 1048577}}", CRL_E_INVALID,
             "resources\\.memory_mb must be between 16 and 1048576, not 1048577");
    spec_bad("{\"resources\": {\"memory_mb\": -512}}", CRL_E_INVALID, "resources\\.memory_mb");
    /* 2^32 + 512 must not wrap to 512 in the unsigned field */
    spec_bad("{\"resources\": {\"memory_mb\": 4294967808}}", CRL_E_INVALID,
             "resources\\.memory_mb.*not 4294967808");
    /* resources.pids 8 - 4194304 */
    spec_ok("{\"resources\": {\"pids\": 8}}");
    spec_bad("{\"resources\": {\"pids\": 7}}", CRL_E_INVALID,
             "^resources\\.pids must be between 8");
    spec_ok("{\"resources\": {\"pids\": 4194304}}");
    spec_bad("{\"resources\": {\"pids\": 4194305}}", CRL_E_INVALID, "resources\\.pids");
    /* resources.disk_mb 1 - 1048576 */
    spec_ok("{\"resources\": {\"disk_mb\": 1}}");
    spec_bad("{\"resources\": {\"disk_mb\": 0}}", CRL_E_INVALID,
             "^resources\\.disk_mb must be between 1");
    spec_ok("{\"resources\": {\"disk_mb\": 1048576}}");
    spec_bad("{\"resources\": {\"disk_mb\": 1048577}}", CRL_E_INVALID, "resources\\.disk_mb");
    /* ttl_s, idle_ttl_s 0 - 2592000 */
    spec_ok("{\"ttl_s\": 0}");
    spec_bad("{\"ttl_s\": -1}", CRL_E_INVALID, "^ttl_s must be between 0 and 2592000, not -1$");
    spec_ok("{\"ttl_s\": 2592000}");
    spec_bad("{\"ttl_s\": 2592001}", CRL_E_INVALID, "^ttl_s must be between 0 and 2592000");
    spec_bad("{\"ttl_s\": 4294967296}", CRL_E_INVALID, "^ttl_s.*not 4294967296");
    spec_ok("{\"idle_ttl_s\": 0}");
    spec_bad("{\"idle_ttl_s\": -1}", CRL_E_INVALID, "^idle_ttl_s must be between");
    spec_ok("{\"idle_ttl_s\": 2592000}");
    spec_bad("{\"idle_ttl_s\": 2592001}", CRL_E_INVALID, "^idle_ttl_s must be between");

    struct crl_spec s;
    if (spec_good("{\"ttl_s\": 0, \"idle_ttl_s\": 2592000}", &s)) {
        ok(s.ttl_s == 0 && s.idle_ttl_s == 2592000, "range edges are stored as given");
        crl_spec_free(&s);
    }

    /* strings: backend, image */
    spec_bad("{\"backend\": \"docker\"}", CRL_E_INVALID, "^backend 'docker' is unknown");
    spec_bad("{\"backend\": \"\"}", CRL_E_INVALID, "^backend '' is unknown");
    spec_bad("{\"backend\": \"Container\"}", CRL_E_INVALID, "backend 'Container' is unknown");
    spec_bad("{\"backend\": \"containercontainer\"}", CRL_E_INVALID,
             "^backend is longer than 15 bytes");
    spec_bad("{\"image\": \"\"}", CRL_E_INVALID, "^image '' is not a valid image name");
    spec_bad("{\"image\": \"a..b\"}", CRL_E_INVALID, "^image 'a\\.\\.b' is not a valid image name");
    spec_bad("{\"image\": \"../../etc\"}", CRL_E_INVALID, "^image .* is not a valid image name");
    spec_bad("{\"image\": \"a b\"}", CRL_E_INVALID,
             "^image 'a b' is not valid|^image 'a b' is not a valid");
    spec_bad("{\"image\": \"img;rm\"}", CRL_E_INVALID, "^image 'img;rm' is not a valid image name");
    spec_bad("{\"image\": \"caf\\u00e9\"}", CRL_E_INVALID, "^image .* is not a valid image name");
    char *img = repeat('i', CRL_IMAGE_NAME_MAX);
    char *j = jsonf("{\"image\": \"%s\"}", img);
    spec_ok(j);
    free(j);
    free(img);
    img = repeat('i', CRL_IMAGE_NAME_MAX + 1);
    j = jsonf("{\"image\": \"%s\"}", img);
    spec_bad(j, CRL_E_INVALID, "^image is longer than 255 bytes");
    free(j);
    free(img);

    /* cwd: absolute, bounded */
    spec_bad("{\"cwd\": \"work\"}", CRL_E_INVALID, "^cwd must be an absolute path, not 'work'");
    spec_bad("{\"cwd\": \"\"}", CRL_E_INVALID, "^cwd must be an absolute path");
    char *p = repeat('d', PATH_MAX);
    p[0] = '/';
    j = jsonf("{\"cwd\": \"%s\"}", p);
    spec_bad(j, CRL_E_INVALID, "^cwd is longer than 4095 bytes");
    free(j);
    p[PATH_MAX - 1] = 0;
    j = jsonf("{\"cwd\": \"%s\"}", p);
    spec_ok(j);
    free(j);
    free(p);
}

static void test_spec_unknown_fields(void)
{
    spec_bad("{\"imagee\": \"busybox\"}", CRL_E_INVALID, "^unknown field 'imagee'$");
    spec_bad("{\"Image\": \"busybox\"}", CRL_E_INVALID, "^unknown field 'Image'$");
    spec_bad("{\"image\": \"busybox\", \"extra\": null}", CRL_E_INVALID, "^unknown field 'extra'$");
    spec_bad("{\"resources\": {\"memory\": 512}}", CRL_E_INVALID,
             "^unknown field 'resources\\.memory'$");
    spec_bad("{\"resources\": {\"cpus\": 1, \"gpu\": 1}}", CRL_E_INVALID,
             "^unknown field 'resources\\.gpu'$");
    spec_bad("{\"network\": {\"mode\": \"none\", \"ports\": [80]}}", CRL_E_INVALID,
             "^unknown field 'network\\.ports'$");
    spec_bad("{\"\": 1}", CRL_E_INVALID, "^unknown field ''$");
}

static void test_spec_trajectory(void)
{
    spec_bad("{\"trajectory\": true}", CRL_E_INVALID, "^trajectory must be an id or an object");
    spec_bad("{\"trajectory\": {\"path\": \"/x\"}}", CRL_E_INVALID, "trajectory\\.path");
    spec_bad("{\"trajectory\": {}}", CRL_E_INVALID, "^trajectory\\.id is required");
    spec_bad("{\"trajectory\": \"\"}", CRL_E_INVALID, "^trajectory\\.id '' is not valid");
    spec_bad("{\"trajectory\": \"../x\"}", CRL_E_INVALID, "^trajectory\\.id '\\.\\./x'");
    spec_bad("{\"trajectory\": \"blobs\"}", CRL_E_INVALID, "not 'blobs'");
    spec_bad("{\"trajectory\": \"-x\"}", CRL_E_INVALID, "starting with a letter or digit");
    spec_bad("{\"trajectory\": {\"id\": \"t\", \"checkpoint\": \"always\"}}", CRL_E_INVALID,
             "^trajectory\\.checkpoint 'always' is unknown");
    struct crl_spec s;
    if (spec_good("{\"trajectory\": \"t-1.a_b\"}", &s)) {
        is_str(s.trajectory, "t-1.a_b", "a trajectory given as a string");
        ok(s.checkpoint == CRL_CKPT_EVERY_STEP, "checkpoints every step by default");
        json_t *j = crl_spec_to_json(&s);
        is_str(json_string_value(json_object_get(json_object_get(j, "trajectory"), "checkpoint")),
               "every-step", "the spec reports the checkpoint mode");
        json_decref(j);
        crl_spec_free(&s);
    }
    if (spec_good("{\"trajectory\": {\"id\": \"T9\", \"checkpoint\": \"on-request\"}}", &s)) {
        is_str(s.trajectory, "T9", "a trajectory given as an object");
        ok(s.checkpoint == CRL_CKPT_ON_REQUEST, "checkpoint on-request");
        crl_spec_free(&s);
    }
}

static void test_spec_unsupported(void)
{
    spec_bad("{\"network\": {\"mode\": \"bridge\"}}", CRL_E_INVALID,
             "^network\\.mode 'bridge' is unknown");
    spec_bad("{\"network\": {\"mode\": \"\"}}", CRL_E_INVALID, "^network\\.mode '' is unknown");
    struct crl_spec s;
    if (spec_good("{\"network\": {\"mode\": \"none\"}}", &s)) {
        ok(s.network == NULL, "network.mode none is accepted");
        crl_spec_free(&s);
    }
}

static void test_spec_labels(void)
{
    struct crl_spec s;
    if (spec_good("{\"labels\": {\"a\": \"\", \"A.b/c-d_e\": \"any printable: ~!@ \\u00e9\"}}",
                  &s)) {
        is_int(s.n_labels, 2, "two labels kept");
        crl_spec_free(&s);
    }
    char *k63 = repeat('k', 63), *k64 = repeat('k', 64), *v255 = repeat('v', 255),
         *v256 = repeat('v', 256);
    char *j = jsonf("{\"labels\": {\"%s\": \"%s\"}}", k63, v255);
    spec_ok(j);
    free(j);
    j = jsonf("{\"labels\": {\"%s\": \"v\"}}", k64);
    spec_bad(j, CRL_E_INVALID, "^labels: key 'k{64}' is not valid");
    free(j);
    j = jsonf("{\"labels\": {\"k\": \"%s\"}}", v256);
    spec_bad(j, CRL_E_INVALID, "^labels\\.k is longer than 255 bytes");
    free(j);
    free(k63);
    free(k64);
    free(v255);
    free(v256);
    spec_bad("{\"labels\": {\"\": \"v\"}}", CRL_E_INVALID, "^labels: key '' is not valid");
    spec_bad("{\"labels\": {\"a b\": \"v\"}}", CRL_E_INVALID, "^labels: key 'a b' is not valid");
    spec_bad("{\"labels\": {\"a=b\": \"v\"}}", CRL_E_INVALID, "^labels: key 'a=b' is not valid");
    spec_bad("{\"labels\": {\"k\\u00e9\": \"v\"}}", CRL_E_INVALID, "^labels: key .* is not valid");
    spec_bad("{\"labels\": {\"k\": \"line\\nbreak\"}}", CRL_E_INVALID,
             "^labels\\.k must be printable");
    spec_bad("{\"labels\": {\"k\": \"tab\\there\"}}", CRL_E_INVALID,
             "^labels\\.k must be printable");
    spec_bad("{\"labels\": {\"k\": \"del\\u007f\"}}", CRL_E_INVALID,
             "^labels\\.k must be printable");

    /* 64 labels is the most */
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    crl_buf_printf(&b, "{\"labels\": {");
    for (int i = 0; i < 64; i++)
        crl_buf_printf(&b, "%s\"l%d\": \"%d\"", i ? ", " : "", i, i);
    size_t before_end = b.len;
    crl_buf_printf(&b, "}}");
    if (spec_good(b.data, &s)) {
        is_int(s.n_labels, 64, "64 labels are kept");
        crl_spec_free(&s);
    }
    b.len = before_end;
    crl_buf_printf(&b, ", \"l64\": \"64\"}}");
    spec_bad(b.data, CRL_E_INVALID, "^labels: at most 64 are allowed");
    crl_buf_free(&b);

    /* selectors */
    struct crl_kv kv;
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_label_parse("team=ml", &kv, &e) == 0 && strcmp(kv.key, "team") == 0 &&
           strcmp(kv.value, "ml") == 0,
       "label selector team=ml");
    free(kv.key);
    free(kv.value);
    ok(crl_label_parse("k=a=b", &kv, &e) == 0 && strcmp(kv.key, "k") == 0 &&
           strcmp(kv.value, "a=b") == 0,
       "a selector splits at the first '='");
    free(kv.key);
    free(kv.value);
    ok(crl_label_parse("k=", &kv, &e) == 0 && strcmp(kv.value, "") == 0,
       "k= selects an empty value");
    free(kv.key);
    free(kv.value);
    e = (struct crl_err)CRL_ERR_INIT;
    ok(crl_label_parse("novalue", &kv, &e) < 0 && e.code == CRL_E_INVALID,
       "a selector without '=' is refused");
    like(e.msg, "label 'novalue' must have the form key=value", "and the message says so");
    ok(crl_label_parse("=v", &kv, &e) < 0 && e.code == CRL_E_INVALID,
       "a selector with an empty key is refused");
    ok(crl_label_parse("a b=v", &kv, &e) < 0, "a selector with a bad key is refused");
    ok(crl_label_parse("k=\x01", &kv, &e) < 0, "a selector with an unprintable value is refused");

    if (spec_good("{\"labels\": {\"team\": \"ml\", \"env\": \"prod\"}}", &s)) {
        struct crl_kv a = {(char *)"team", (char *)"ml"}, b2 = {(char *)"env", (char *)"prod"},
                      c = {(char *)"env", (char *)"dev"}, d = {(char *)"zone", (char *)"ml"};
        struct crl_kv both[] = {a, b2}, mism[] = {a, c};
        ok(crl_spec_labels_match(&s, NULL, 0), "no selector matches everything");
        ok(crl_spec_labels_match(&s, &a, 1), "one matching selector");
        ok(crl_spec_labels_match(&s, both, 2), "two matching selectors");
        ok(!crl_spec_labels_match(&s, mism, 2), "all selectors must match");
        ok(!crl_spec_labels_match(&s, &c, 1), "the value must match");
        ok(!crl_spec_labels_match(&s, &d, 1), "the key must match");
        crl_spec_free(&s);
    }
}

static void test_spec_env(void)
{
    spec_bad("{\"env\": {\"1A\": \"x\"}}", CRL_E_INVALID,
             "^env: '1A' is not a valid variable name");
    spec_bad("{\"env\": {\"A-B\": \"x\"}}", CRL_E_INVALID,
             "^env: 'A-B' is not a valid variable name");
    spec_bad("{\"env\": {\"A=B\": \"x\"}}", CRL_E_INVALID,
             "^env: 'A=B' is not a valid variable name");
    spec_bad("{\"env\": {\"\": \"x\"}}", CRL_E_INVALID, "^env: '' is not a valid variable name");
    spec_bad("{\"env\": {\"A B\": \"x\"}}", CRL_E_INVALID, "^env: 'A B' is not a valid");
    char *k = repeat('K', 255);
    char *j = jsonf("{\"env\": {\"%s\": \"v\"}}", k);
    spec_ok(j);
    free(j);
    free(k);
    k = repeat('K', 256);
    j = jsonf("{\"env\": {\"%s\": \"v\"}}", k);
    spec_bad(j, CRL_E_INVALID, "^env: 'K{256}' is not a valid variable name");
    free(j);
    free(k);
    char *v = repeat('v', 128 * 1024);
    j = jsonf("{\"env\": {\"BIG\": \"%s\"}}", v);
    spec_ok(j);
    free(j);
    free(v);
    v = repeat('v', 128 * 1024 + 1);
    j = jsonf("{\"env\": {\"BIG\": \"%s\"}}", v);
    spec_bad(j, CRL_E_INVALID, "^env\\.BIG is longer than 131072 bytes");
    free(j);
    free(v);

    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    crl_buf_printf(&b, "{\"env\": {");
    for (int i = 0; i < 256; i++)
        crl_buf_printf(&b, "%s\"V%d\": \"%d\"", i ? ", " : "", i, i);
    size_t end = b.len;
    crl_buf_printf(&b, "}}");
    struct crl_spec s;
    if (spec_good(b.data, &s)) {
        is_int(crl_strv_len(s.env), 256, "256 variables are kept");
        ok(strv_has(s.env, "V0=0") && strv_has(s.env, "V255=255"), "as K=V strings");
        crl_spec_free(&s);
    }
    b.len = end;
    crl_buf_printf(&b, ", \"V256\": \"x\"}}");
    spec_bad(b.data, CRL_E_INVALID, "^env has 257 variables; at most 256 are allowed");
    crl_buf_free(&b);
}

static void test_spec_json_errors(void)
{
    struct crl_spec s;
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_spec_parse("", 0, &s, &e) < 0 && e.code == CRL_E_JSON, "an empty body is invalid_json");
    like(e.msg, "empty", "and the message says it is empty");
    spec_bad("{", CRL_E_JSON, "^request body is not valid JSON");
    spec_bad("{\"image\": }", CRL_E_JSON, "not valid JSON.*line 1");
    spec_bad("{'image': 'x'}", CRL_E_JSON, "not valid JSON");
    spec_bad("{\"image\": \"busybox\",}", CRL_E_JSON, "not valid JSON");
    spec_bad("{} {}", CRL_E_JSON, "not valid JSON");
    spec_bad("{}x", CRL_E_JSON, "not valid JSON");
    spec_bad("[]", CRL_E_JSON, "^request body must be a JSON object");
    spec_bad("null", CRL_E_JSON, "JSON object|expected");
    spec_bad("\"{}\"", CRL_E_JSON, "JSON object|expected");
    spec_bad("42", CRL_E_JSON, "JSON object|expected");
    spec_bad("{\"image\": \"a\", \"image\": \"b\"}", CRL_E_JSON, "duplicate");
    spec_bad("{\"labels\": {\"k\": \"1\", \"k\": \"2\"}}", CRL_E_JSON, "duplicate");
    spec_bad("{\"resources\": {\"pids\": 10, \"pids\": 20}}", CRL_E_JSON, "duplicate");
    spec_bad("{\"ttl_s\": 99999999999999999999999}", CRL_E_JSON, "not valid JSON");
    spec_bad("{\"resources\": {\"cpus\": 1e999}}", CRL_E_JSON, "not valid JSON");
    spec_bad("{\"image\": \"a\\u0000b\"}", CRL_E_JSON, "not valid JSON");
    spec_bad("{\"image\": \"\xff\"}", CRL_E_JSON, "not valid JSON");
    /* the length is the body's: a NUL inside it is not an end */
    const char body[] = "{}\0{\"x\": 1}";
    e = (struct crl_err)CRL_ERR_INIT;
    ok(crl_spec_parse(body, sizeof(body) - 1, &s, &e) < 0 && e.code == CRL_E_JSON,
       "bytes after a NUL in the body are not ignored");
    /* only `len` bytes are read */
    e = (struct crl_err)CRL_ERR_INIT;
    ok(crl_spec_parse("{}garbage", 2, &s, &e) == 0, "parsing stops at len");
    crl_spec_free(&s);

    char *deep = malloc(100000 + 1);
    size_t n = strlen("{\"labels\": ");
    memcpy(deep, "{\"labels\": ", n);
    for (int i = 0; i < 40000; i++)
        deep[n++] = '[';
    deep[n] = 0;
    e = (struct crl_err)CRL_ERR_INIT;
    ok(crl_spec_parse(deep, n, &s, &e) < 0 && e.code == CRL_E_JSON,
       "40000 nested arrays are refused without a crash");
    free(deep);

    json_t *arr = json_array();
    e = (struct crl_err)CRL_ERR_INIT;
    ok(crl_spec_from_json(arr, &s, &e) < 0 && e.code == CRL_E_INVALID,
       "crl_spec_from_json refuses a non-object");
    like(e.msg, "must be a JSON object", "naming what it needs");
    json_decref(arr);
}

/* A refusal after some fields were parsed leaves a clean spec (and the
 * sanitizer build checks nothing leaked). */
static void test_spec_failure_cleanup(void)
{
    struct crl_spec s;
    struct crl_err e = CRL_ERR_INIT;
    const char *j = "{\"labels\": {\"a\": \"1\", \"b\": \"2\"}, \"env\": {\"X\": \"1\"},"
                    " \"cwd\": \"relative\"}";
    ok(crl_spec_parse(j, strlen(j), &s, &e) < 0, "a late error fails the parse");
    ok(s.n_labels == 0 && s.env == NULL && s.cwd == NULL,
       "labels and env parsed before the error are freed and cleared");
    crl_spec_free(&s);
    j = "{\"labels\": {\"a\": \"1\", \"b\": 2}}";
    ok(crl_spec_parse(j, strlen(j), &s, &e) < 0 && s.n_labels == 0,
       "a bad second label frees the first");
    j = "{\"env\": {\"A\": \"1\", \"B\": 2}}";
    ok(crl_spec_parse(j, strlen(j), &s, &e) < 0 && s.env == NULL,
       "a bad second variable frees the first");
    crl_spec_free(&s); /* safe on a spec a failed parse left */
}

static bool same_network(const struct crl_net_policy *a, const struct crl_net_policy *b)
{
    json_t *ja = crl_net_policy_to_json(a), *jb = crl_net_policy_to_json(b);
    bool same = ja && jb && json_equal(ja, jb);
    json_decref(ja);
    json_decref(jb);
    return same;
}

static bool specs_equal(const struct crl_spec *a, const struct crl_spec *b)
{
    if (strcmp(a->backend, b->backend) || strcmp(a->image, b->image) || a->cpus != b->cpus ||
        a->memory_mb != b->memory_mb || a->pids != b->pids || a->disk_mb != b->disk_mb ||
        !same_network(a->network, b->network) || a->ttl_s != b->ttl_s ||
        a->idle_ttl_s != b->idle_ttl_s || a->n_labels != b->n_labels ||
        crl_strv_len(a->env) != crl_strv_len(b->env) || (!a->cwd != !b->cwd) ||
        (a->cwd && strcmp(a->cwd, b->cwd)))
        return false;
    if (!crl_spec_labels_match(a, b->labels, b->n_labels))
        return false;
    for (char **e = a->env; e && *e; e++)
        if (!strv_has(b->env, *e))
            return false;
    return true;
}

/* `bug`: the TODO reason if spec -> JSON -> spec is known to fail here. */
static void round_trip(const char *json, const char *what, const char *bug)
{
    struct crl_spec a, b;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_spec_parse(json, strlen(json), &a, &e) < 0) {
        fail("%s: parse the original: %s", what, e.msg);
        return;
    }
    json_t *j = crl_spec_to_json(&a);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    ok(text != NULL, "%s: crl_spec_to_json gives JSON", what);
    int r = text ? crl_spec_parse(text, strlen(text), &b, &e) : -1;
    if (bug)
        todo_start(bug);
    if (!ok(r == 0, "%s: the JSON parses back as a spec", what))
        diag("%s\nrefused: %s", text ? text : "(null)", e.msg);
    if (r == 0) {
        ok(specs_equal(&a, &b), "%s: the spec survives spec -> JSON -> spec", what);
        crl_spec_free(&b);
    }
    if (bug)
        todo_end();
    free(text);
    json_decref(j);
    crl_spec_free(&a);
}

static void test_spec_round_trip(void)
{
    round_trip(full_spec, "full spec", NULL);
    round_trip("{\"resources\": {\"cpus\": 0.33}, \"cwd\": \"/\"}", "a fractional cpus (0.33)",
               NULL);
    round_trip("{}", "the default spec", NULL);
}

/* ---- exec requests ---- */

static void test_exec_cmd(void)
{
    struct crl_exec_req q;
    if (exec_good("{\"cmd\": \"echo hi | wc -c\"}", false, &q)) {
        ok(q.shell, "a string cmd runs in a shell");
        ok(crl_strv_len(q.argv) == 3 && strcmp(q.argv[0], "/bin/sh") == 0 &&
               strcmp(q.argv[1], "-c") == 0 && strcmp(q.argv[2], "echo hi | wc -c") == 0,
           "as /bin/sh -c CMD");
        ok(q.timeout_s == CRL_EXEC_DEFAULT_TIMEOUT_S, "default timeout_s is 300");
        is_int(q.max_output, CRL_EXEC_DEFAULT_OUTPUT, "default max_output_bytes is 1 MiB");
        ok(!q.stream, "stream defaults to false");
        ok(q.user.uid == 0 && q.user.gid == 0, "user defaults to root");
        ok(q.env == NULL && q.cwd == NULL && q.stdin_data == NULL && q.stdin_len == 0,
           "no env, cwd or stdin by default");
        crl_exec_req_free(&q);
    }
    if (exec_good("{\"cmd\": [\"ls\", \"-l\", \"\", \"a b\"]}", false, &q)) {
        ok(!q.shell, "an array cmd is argv");
        ok(crl_strv_len(q.argv) == 4 && strcmp(q.argv[0], "ls") == 0 &&
               strcmp(q.argv[2], "") == 0 && strcmp(q.argv[3], "a b") == 0 && q.argv[4] == NULL,
           "argv is taken as given, empty arguments included, NULL-terminated");
        crl_exec_req_free(&q);
    }
    if (exec_good("{}", false, &q)) {
        ok(q.argv == NULL, "an exec with no cmd leaves argv to the image's entrypoint and cmd");
        crl_exec_req_free(&q);
    }
    exec_bad("{\"cmd\": \"\"}", false, CRL_E_INVALID, "^cmd must not be empty$");
    exec_bad("{\"cmd\": []}", false, CRL_E_INVALID, "^cmd must not be an empty array$");
    exec_bad("{\"cmd\": [\"\"]}", false, CRL_E_INVALID, "^cmd\\[0\\] must not be empty$");
    exec_bad("{\"cmd\": [\"\", \"x\"]}", false, CRL_E_INVALID, "^cmd\\[0\\] must not be empty");
    exec_bad("{\"cmd\": [\"ls\", 1]}", false, CRL_E_INVALID,
             "^cmd\\[1\\] must be a string, not an integer");
    exec_bad("{\"cmd\": [\"ls\", null]}", false, CRL_E_INVALID,
             "^cmd\\[1\\] must be a string, not null");
    exec_bad("{\"cmd\": [[\"ls\"]]}", false, CRL_E_INVALID,
             "^cmd\\[0\\] must be a string, not an array");
    exec_bad("{\"cmd\": 5}", false, CRL_E_INVALID,
             "^cmd must be a string .* or an array of strings");
    exec_bad("{\"cmd\": null}", false, CRL_E_INVALID, "^cmd must be a string");
    exec_bad("{\"cmd\": {\"a\": 1}}", false, CRL_E_INVALID, "not an object");
    exec_bad("{\"cmd\": \"ls\", \"args\": []}", false, CRL_E_INVALID, "^unknown field 'args'$");

    /* argv is bounded at 1 MiB in total */
    char *big = repeat('a', 600 * 1024);
    char *j = jsonf("{\"cmd\": [\"%s\", \"%s\"]}", big, big);
    exec_bad(j, false, CRL_E_TOO_LARGE, "^cmd is larger than 1048576 bytes");
    free(j);
    free(big);
    big = repeat('a', CRL_EXEC_MAX_ARGS_BYTES - 1);
    j = jsonf("{\"cmd\": [\"%s\"]}", big);
    exec_ok(j);
    free(j);
    free(big);
    big = repeat('a', CRL_EXEC_MAX_ARGS_BYTES + 1);
    j = jsonf("{\"cmd\": \"%s\"}", big);
    exec_bad(j, false, CRL_E_TOO_LARGE, "^cmd is larger than 1048576 bytes");
    free(j);
    free(big);
}

static void test_exec_stdin(void)
{
    struct crl_exec_req q;
    if (exec_good("{\"cmd\": \"cat\", \"stdin\": \"line 1\\nline 2\\u00e9\"}", false, &q)) {
        ok(q.stdin_len == 15 && memcmp(q.stdin_data, "line 1\nline 2\xc3\xa9", 15) == 0,
           "stdin text is taken as UTF-8 bytes with its length");
        crl_exec_req_free(&q);
    }
    if (exec_good("{\"cmd\": \"cat\", \"stdin\": \"\"}", false, &q)) {
        ok(q.stdin_data != NULL && q.stdin_len == 0, "an empty stdin is zero bytes, not none");
        crl_exec_req_free(&q);
    }
    if (exec_good("{\"cmd\": \"cat\", \"stdin_b64\": \"AAEC/w==\"}", false, &q)) {
        ok(q.stdin_len == 4 && memcmp(q.stdin_data, "\x00\x01\x02\xff", 4) == 0,
           "stdin_b64 carries binary bytes, NUL included");
        crl_exec_req_free(&q);
    }
    if (exec_good("{\"cmd\": \"cat\", \"stdin_b64\": \"\"}", false, &q)) {
        ok(q.stdin_len == 0, "an empty stdin_b64 is zero bytes");
        crl_exec_req_free(&q);
    }
    exec_bad("{\"cmd\": \"cat\", \"stdin\": \"a\", \"stdin_b64\": \"YQ==\"}", false, CRL_E_INVALID,
             "^give stdin or stdin_b64, not both$");
    exec_bad("{\"cmd\": \"cat\", \"stdin\": \"\", \"stdin_b64\": \"\"}", false, CRL_E_INVALID,
             "not both");
    exec_bad("{\"cmd\": \"cat\", \"stdin\": 5}", false, CRL_E_INVALID,
             "^stdin must be a string, not an integer");
    exec_bad("{\"cmd\": \"cat\", \"stdin\": [\"a\"]}", false, CRL_E_INVALID,
             "^stdin must be a string");
    exec_bad("{\"cmd\": \"cat\", \"stdin_b64\": 5}", false, CRL_E_INVALID,
             "^stdin_b64 must be a string");
    exec_bad("{\"cmd\": \"cat\", \"stdin_b64\": \"YQ=\"}", false, CRL_E_INVALID,
             "^stdin_b64 is not valid base64$");
    exec_bad("{\"cmd\": \"cat\", \"stdin_b64\": \"Y Q==\"}", false, CRL_E_INVALID,
             "^stdin_b64 is not valid base64");
    exec_bad("{\"cmd\": \"cat\", \"stdin_b64\": \"aGVsbG8*\"}", false, CRL_E_INVALID,
             "^stdin_b64 is not valid base64");
    exec_bad("{\"cmd\": \"cat\", \"stdin_b64\": \"=AAA\"}", false, CRL_E_INVALID,
             "^stdin_b64 is not valid base64");
    exec_bad("{\"cmd\": \"cat\", \"stdin_b64\": \"aGVsbG8\"}", false, CRL_E_INVALID,
             "^stdin_b64 is not valid base64");
}

static void user_ok(const char *u, unsigned uid, unsigned gid)
{
    struct crl_user usr = {99, 99, false};
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_user_parse(u, &usr, &e);
    ok(r == 0 && usr.uid == uid && usr.gid == gid, "user '%s' is %u:%u", u, uid, gid);
    if (r < 0)
        diag("refused: %s", e.msg);
}

static void user_bad(const char *u)
{
    struct crl_user usr = {99, 99, false};
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_user_parse(u, &usr, &e);
    ok(r < 0 && e.code == CRL_E_INVALID && strstr(e.msg, "is not valid") &&
           strstr(e.msg, u) != NULL,
       "user '%s' is refused and named", u);
    if (r == 0)
        diag("parsed as %u:%u", (unsigned)usr.uid, (unsigned)usr.gid);
}

static void test_exec_user(void)
{
    user_ok("root", 0, 0);
    user_ok("0", 0, 0);
    user_ok("1000", 1000, 1000);
    user_ok("1000:1000", 1000, 1000);
    user_ok("1000:100", 1000, 100);
    user_ok("0:5", 0, 5);
    user_ok("65535", 65535, 65535);
    user_ok("65535:65535", 65535, 65535);
    user_ok("007", 7, 7);
    user_bad("");
    user_bad("nobody");
    user_bad("Root");
    user_bad("root:root");
    user_bad("65536");
    user_bad("1000:65536");
    user_bad("-1");
    user_bad("-1000");
    user_bad("1000:");
    user_bad(":1000");
    user_bad(":");
    user_bad("1000:1000:1000");
    user_bad(" 1000");
    user_bad("1000 ");
    user_bad("1000x");
    user_bad("0x10");
    user_bad("1e3");
    user_bad("+1000");
    user_bad("99999999999999999999999");
    user_bad("1000:99999999999999999999999");
    user_bad("1000:abc");
    user_bad("1000:-1");
    /* the gid goes through strtoul too, which skips blanks and takes a sign */
    user_bad("1000:+5");
    user_bad("1000: 5");
    user_bad("1000:-0");

    struct crl_exec_req q;
    if (exec_good("{\"cmd\": \"id\", \"user\": \"1000:2000\"}", false, &q)) {
        ok(q.user.uid == 1000 && q.user.gid == 2000, "exec user 1000:2000");
        crl_exec_req_free(&q);
    }
    exec_bad("{\"cmd\": \"id\", \"user\": 1000}", false, CRL_E_INVALID,
             "^user must be a string, not an integer");
    exec_bad("{\"cmd\": \"id\", \"user\": \"nobody\"}", false, CRL_E_INVALID,
             "^user 'nobody' is not valid: expected root, UID or UID:GID");
    char *u = repeat('1', 33);
    char *j = jsonf("{\"cmd\": \"id\", \"user\": \"%s\"}", u);
    exec_bad(j, false, CRL_E_INVALID, "^user is longer than 32 bytes");
    free(j);
    free(u);
}

static void test_exec_limits(void)
{
    struct crl_exec_req q;
    if (exec_good("{\"cmd\": \"x\", \"timeout_s\": 0}", false, &q)) {
        ok(q.timeout_s == 0, "timeout_s 0 (none) is accepted");
        crl_exec_req_free(&q);
    }
    if (exec_good("{\"cmd\": \"x\", \"timeout_s\": 0.25}", false, &q)) {
        ok(q.timeout_s == 0.25, "a fractional timeout_s is kept");
        crl_exec_req_free(&q);
    }
    if (exec_good("{\"cmd\": \"x\", \"timeout_s\": 86400}", false, &q)) {
        ok(q.timeout_s == 86400, "timeout_s 86400 is the most");
        crl_exec_req_free(&q);
    }
    exec_bad("{\"cmd\": \"x\", \"timeout_s\": 86400.5}", false, CRL_E_INVALID,
             "^timeout_s must be between 0 and 86400, not 86400\\.5$");
    exec_bad("{\"cmd\": \"x\", \"timeout_s\": -0.001}", false, CRL_E_INVALID,
             "^timeout_s must be between");
    exec_bad("{\"cmd\": \"x\", \"timeout_s\": -1}", false, CRL_E_INVALID,
             "^timeout_s must be between");
    exec_bad("{\"cmd\": \"x\", \"timeout_s\": \"10\"}", false, CRL_E_INVALID,
             "^timeout_s must be a number .* not a string");
    exec_bad("{\"cmd\": \"x\", \"timeout_s\": null}", false, CRL_E_INVALID,
             "^timeout_s must be a number");

    if (exec_good("{\"cmd\": \"x\", \"max_output_bytes\": 0}", false, &q)) {
        is_int(q.max_output, 0, "max_output_bytes 0 is accepted");
        crl_exec_req_free(&q);
    }
    if (exec_good("{\"cmd\": \"x\", \"max_output_bytes\": 67108864}", false, &q)) {
        is_int(q.max_output, 67108864, "max_output_bytes 64 MiB is the most");
        crl_exec_req_free(&q);
    }
    exec_bad("{\"cmd\": \"x\", \"max_output_bytes\": 67108865}", false, CRL_E_INVALID,
             "^max_output_bytes must be between 0 and 67108864");
    exec_bad("{\"cmd\": \"x\", \"max_output_bytes\": -1}", false, CRL_E_INVALID,
             "^max_output_bytes must be between");
    exec_bad("{\"cmd\": \"x\", \"max_output_bytes\": 1.5}", false, CRL_E_INVALID,
             "^max_output_bytes must be an integer");
    exec_bad("{\"cmd\": \"x\", \"max_output_bytes\": 4294967296}", false, CRL_E_INVALID,
             "^max_output_bytes must be between");

    if (exec_good("{\"cmd\": \"x\", \"stream\": true}", false, &q)) {
        ok(q.stream, "stream true");
        crl_exec_req_free(&q);
    }
    exec_bad("{\"cmd\": \"x\", \"stream\": 1}", false, CRL_E_INVALID,
             "^stream must be a boolean, not an integer");
    exec_bad("{\"cmd\": \"x\", \"stream\": \"true\"}", false, CRL_E_INVALID,
             "^stream must be a boolean");

    if (exec_good("{\"cmd\": \"x\", \"env\": {\"A\": \"1\"}, \"cwd\": \"/tmp\"}", false, &q)) {
        ok(strv_has(q.env, "A=1") && crl_strv_len(q.env) == 1, "exec env");
        is_str(q.cwd, "/tmp", "exec cwd");
        crl_exec_req_free(&q);
    }
    exec_bad("{\"cmd\": \"x\", \"env\": {\"9\": \"1\"}}", false, CRL_E_INVALID,
             "^env: '9' is not a valid");
    exec_bad("{\"cmd\": \"x\", \"env\": {\"A\": 1}}", false, CRL_E_INVALID,
             "^env\\.A must be a string");
    exec_bad("{\"cmd\": \"x\", \"cwd\": \"tmp\"}", false, CRL_E_INVALID,
             "^cwd must be an absolute path");

    exec_bad("", false, CRL_E_JSON, "empty");
    exec_bad("{\"cmd\": \"x\"", false, CRL_E_JSON, "^request body is not valid JSON");
    exec_bad("[\"ls\"]", false, CRL_E_JSON, "must be a JSON object");
    exec_bad("{\"cmd\": \"x\", \"cmd\": \"y\"}", false, CRL_E_JSON, "duplicate");
    exec_bad("{\"cmd\": \"x\", \"stdin\": \"a\\u0000b\"}", false, CRL_E_JSON, "not valid JSON");
}

static void test_exec_session(void)
{
    struct crl_exec_req q;
    if (exec_good("{\"cmd\": \"cd /tmp\", \"timeout_s\": 5, \"max_output_bytes\": 10, "
                  "\"stream\": false}",
                  true, &q)) {
        ok(q.shell && strcmp(q.argv[2], "cd /tmp") == 0, "a session command is a shell string");
        ok(q.timeout_s == 5 && q.max_output == 10, "with its timeout and output limit");
        crl_exec_req_free(&q);
    }
    exec_bad("{\"cmd\": [\"ls\"]}", true, CRL_E_INVALID,
             "^cmd must be a string for a session, not an array");
    exec_bad("{\"cmd\": 1}", true, CRL_E_INVALID, "^cmd must be a string for a session");
    exec_bad("{\"cmd\": \"\"}", true, CRL_E_INVALID, "^cmd must not be empty");
    exec_bad("{\"cmd\": \"x\", \"stdin\": \"a\"}", true, CRL_E_INVALID, "^unknown field 'stdin'$");
    exec_bad("{\"cmd\": \"x\", \"stdin_b64\": \"YQ==\"}", true, CRL_E_INVALID,
             "^unknown field 'stdin_b64'$");
    exec_bad("{\"cmd\": \"x\", \"env\": {}}", true, CRL_E_INVALID, "^unknown field 'env'$");
    exec_bad("{\"cmd\": \"x\", \"cwd\": \"/\"}", true, CRL_E_INVALID, "^unknown field 'cwd'$");
    exec_bad("{\"cmd\": \"x\", \"user\": \"root\"}", true, CRL_E_INVALID, "^unknown field 'user'$");
    exec_bad("{\"timeout_s\": 1}", true, CRL_E_INVALID, "^cmd is required");
    exec_bad("{\"cmd\": \"x\", \"timeout_s\": 90000}", true, CRL_E_INVALID,
             "^timeout_s must be between");
}

static void test_exec_process(void)
{
    struct crl_exec_req q;
    struct crl_err e = CRL_ERR_INIT;
    const char *j = "{\"cmd\": \"top\"}";
    ok(crl_exec_req_parse(j, strlen(j), CRL_EXEC_KIND_PROCESS, &q, &e) == 0, "a bare process");
    ok(q.timeout_s == 0 && !q.tty && !q.tag && q.ring_bytes == CRL_PROCESS_RING_DEFAULT,
       "a process has no timeout, no terminal and the default output buffer");
    crl_exec_req_free(&q);
    j = "{\"cmd\": [\"vi\"], \"tty\": true, \"tag\": \"ed\", \"output_buffer_bytes\": 0}";
    ok(crl_exec_req_parse(j, strlen(j), CRL_EXEC_KIND_PROCESS, &q, &e) == 0, "a terminal");
    ok(q.tty && q.rows == CRL_TTY_DEFAULT_ROWS && q.cols == CRL_TTY_DEFAULT_COLS && q.tag &&
           strcmp(q.tag, "ed") == 0 && q.ring_bytes == 0,
       "tty: true is 24x80; the tag and a buffer of 0 are kept");
    crl_exec_req_free(&q);
    j = "{\"cmd\": \"sh\", \"tty\": {\"rows\": 50, \"cols\": 200}}";
    ok(crl_exec_req_parse(j, strlen(j), CRL_EXEC_KIND_PROCESS, &q, &e) == 0 && q.rows == 50 &&
           q.cols == 200,
       "a terminal's size");
    crl_exec_req_free(&q);

    static const struct {
        const char *json;
        const char *re;
    } bad[] = {
        {"{\"cmd\": \"sh\", \"tty\": {\"rows\": 0}}", "^tty.rows must be between 1 and 4096"},
        {"{\"cmd\": \"sh\", \"tty\": {\"rows\": 5, \"cols\": 100000}}",
         "^tty.cols must be between 1 and 4096"},
        {"{\"cmd\": \"sh\", \"tty\": {\"width\": 5}}", "unknown field 'tty.width'"},
        {"{\"cmd\": \"sh\", \"tty\": 3}", "^tty must be an object"},
        {"{\"cmd\": \"sh\", \"stream\": true}", "^unknown field 'stream'$"},
        {"{\"cmd\": \"sh\", \"output_buffer_bytes\": 1e12}", "^output_buffer_bytes must be"},
        {"{\"cmd\": \"sh\", \"tag\": 7}", "^tag must be a string"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        e = (struct crl_err)CRL_ERR_INIT;
        int rc =
            crl_exec_req_parse(bad[i].json, strlen(bad[i].json), CRL_EXEC_KIND_PROCESS, &q, &e);
        ok(rc < 0 && e.code == CRL_E_INVALID, "process %s: refused", bad[i].json);
        like(e.msg, bad[i].re, "process %s: message matches /%s/", bad[i].json, bad[i].re);
        if (rc == 0)
            crl_exec_req_free(&q);
    }
    j = "{\"cmd\": \"sh\", \"tty\": true}";
    ok(crl_exec_req_parse(j, strlen(j), CRL_EXEC_KIND_EXEC, &q, &e) < 0 &&
           strstr(e.msg, "unknown field 'tty'"),
       "an exec takes no terminal");
}

static void test_session_req(void)
{
    struct crl_session_req r;
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_session_req_parse("", 0, &r, &e) == 0, "an empty body opens a default session");
    is_str(r.shell, "/bin/sh", "the default shell is /bin/sh");
    ok(r.env == NULL && r.cwd == NULL && r.user.uid == 0, "no env, no cwd, root");
    crl_session_req_free(&r);
    const char *j = "{\"env\": {\"A\": \"b\"}, \"cwd\": \"/w\", \"shell\": \"/bin/bash\", "
                    "\"user\": \"5:6\"}";
    ok(crl_session_req_parse(j, strlen(j), &r, &e) == 0, "a full session request");
    ok(strv_has(r.env, "A=b") && r.cwd && strcmp(r.cwd, "/w") == 0 &&
           strcmp(r.shell, "/bin/bash") == 0 && r.user.uid == 5 && r.user.gid == 6,
       "keeps env, cwd, shell and user");
    crl_session_req_free(&r);

    static const struct {
        const char *json;
        enum crl_errc code;
        const char *re;
    } bad[] = {
        {"{\"shell\": \"bash\"}", CRL_E_INVALID, "^shell must be an absolute path"},
        {"{\"shell\": 1}", CRL_E_INVALID, "^shell must be a string"},
        {"{\"cwd\": \"w\"}", CRL_E_INVALID, "^cwd must be an absolute path"},
        {"{\"user\": \"x\"}", CRL_E_INVALID, "^user 'x' is not valid"},
        {"{\"env\": {\"-\": \"x\"}}", CRL_E_INVALID, "^env: '-' is not a valid"},
        {"{\"cmd\": \"ls\"}", CRL_E_INVALID, "^unknown field 'cmd'$"},
        {"{\"timeout_s\": 1}", CRL_E_INVALID, "^unknown field 'timeout_s'$"},
        {"[]", CRL_E_JSON, "must be a JSON object"},
        {"{", CRL_E_JSON, "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        e = (struct crl_err)CRL_ERR_INIT;
        int rc = crl_session_req_parse(bad[i].json, strlen(bad[i].json), &r, &e);
        ok(rc < 0 && e.code == bad[i].code, "session %s: refused as %s", bad[i].json,
           code_name(bad[i].code));
        like(e.msg, bad[i].re, "session %s: message matches /%s/", bad[i].json, bad[i].re);
        if (rc == 0)
            crl_session_req_free(&r);
    }
}

int main(void)
{
    TAP_RUN(test_spec_defaults, 10);
    TAP_RUN(test_spec_full, 10);
    TAP_RUN(test_spec_types, 10);
    TAP_RUN(test_spec_ranges, 10);
    TAP_RUN(test_spec_unknown_fields, 10);
    TAP_RUN(test_spec_unsupported, 6);
    TAP_RUN(test_spec_trajectory, 13);
    TAP_RUN(test_spec_labels, 10);
    TAP_RUN(test_spec_env, 10);
    TAP_RUN(test_spec_json_errors, 10);
    TAP_RUN(test_spec_failure_cleanup, 10);
    TAP_RUN(test_spec_round_trip, 10);
    TAP_RUN(test_exec_cmd, 10);
    TAP_RUN(test_exec_stdin, 10);
    TAP_RUN(test_exec_user, 10);
    TAP_RUN(test_exec_limits, 10);
    TAP_RUN(test_exec_session, 10);
    TAP_RUN(test_exec_process, 10);
    TAP_RUN(test_session_req, 10);
    return done_testing();
}
