/* What checking a schema and validating an instance both need (see
 * jsonschema_values.h): paths and messages, numbers and equality, patterns. */
#include "jsonschema_values.h"

#include <float.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/cleanup.h"

#define PATH_SHOWN 200 /* longest path put in a message */

/* ---- paths and messages ---- */

/* Append at most what fits, never cutting a UTF-8 sequence. */
void crl_js_put(char *buf, size_t cap, size_t *len, const char *s, size_t n)
{
    if (*len + 1 >= cap)
        return;
    if (n > cap - 1 - *len) {
        n = cap - 1 - *len;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(buf + *len, s, n);
    *len += n;
    buf[*len] = 0;
}

static size_t utf8_floor(const char *s, size_t n)
{
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* `s` as shown in a message: quotes, backslashes and control bytes escaped,
 * cut after NAME_SHOWN bytes. */
static void put_escaped(char *buf, size_t cap, size_t *len, const char *s)
{
    size_t n = strlen(s);
    size_t shown = n > NAME_SHOWN ? utf8_floor(s, NAME_SHOWN) : n;
    for (size_t i = 0; i < shown; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '\'' || ch == '\\') {
            e[0] = '\\';
            e[1] = (char)ch;
            crl_js_put(buf, cap, len, e, 2);
        } else if (ch < 0x20 || ch == 0x7f) {
            snprintf(e, sizeof(e), "\\x%02x", ch);
            crl_js_put(buf, cap, len, e, 4);
        } else {
            crl_js_put(buf, cap, len, s + i, 1);
        }
    }
    if (shown < n)
        crl_js_put(buf, cap, len, "...", 3);
}

const char *crl_js_quote(struct quoted *q, const char *name)
{
    size_t len = 0;
    q->s[0] = 0;
    crl_js_put(q->s, sizeof(q->s), &len, "'", 1);
    put_escaped(q->s, sizeof(q->s), &len, name);
    crl_js_put(q->s, sizeof(q->s), &len, "'", 1);
    return q->s;
}

static bool is_ident(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > NAME_SHOWN)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)k[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == '$';
        bool digit = (ch >= '0' && ch <= '9') || ch == '-';
        if (!alpha && !(i > 0 && digit))
            return false;
    }
    return true;
}

/* "args.tags[2]", "schema.properties['a b'].type"; a path longer than
 * PATH_SHOWN keeps its head and its tail around "...". */
static void render_loc(const struct loc *at, char *out, size_t outsz)
{
    const struct loc *chain[3 * MAX_DEPTH + 16];
    size_t n = 0;
    bool cut = false;
    for (const struct loc *l = at; l; l = l->up) {
        if (n == CRL_ARRAY_SIZE(chain)) {
            cut = true;
            break;
        }
        chain[n++] = l;
    }
    char full[4096];
    size_t len = 0;
    full[0] = 0;
    if (cut)
        crl_js_put(full, sizeof(full), &len, "...", 3);
    for (size_t i = n; i-- > 0;) {
        const struct loc *l = chain[i];
        if (!l->up) {
            crl_js_put(full, sizeof(full), &len, l->key, strlen(l->key));
        } else if (!l->key) {
            char ix[32];
            int k = snprintf(ix, sizeof(ix), "[%zu]", l->idx);
            crl_js_put(full, sizeof(full), &len, ix, (size_t)k);
        } else if (is_ident(l->key)) {
            crl_js_put(full, sizeof(full), &len, ".", 1);
            crl_js_put(full, sizeof(full), &len, l->key, strlen(l->key));
        } else {
            crl_js_put(full, sizeof(full), &len, "['", 2);
            put_escaped(full, sizeof(full), &len, l->key);
            crl_js_put(full, sizeof(full), &len, "']", 2);
        }
    }
    if (len < outsz) {
        memcpy(out, full, len + 1);
        return;
    }
    size_t head = utf8_floor(full, outsz / 3);
    size_t tail = len - (outsz - head - 4);
    while (((unsigned char)full[tail] & 0xC0) == 0x80)
        tail++;
    snprintf(out, outsz, "%.*s...%s", (int)head, full, full + tail);
}

/* "<path>: <message>" into *err; returns -1. */
int crl_js_fail_at(struct crl_err *err, enum crl_errc code, const struct loc *at, const char *fmt,
                   ...)
{
    if (!err)
        return -1;
    char path[PATH_SHOWN + 1];
    char msg[sizeof(err->msg)];
    render_loc(at, path, sizeof(path));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return crl_err_set(err, code, "%s: %s", path, msg);
}

/* A message about the same path without the path repeated. */
const char *crl_js_after_path(const char *msg, const struct loc *at)
{
    char path[PATH_SHOWN + 1];
    render_loc(at, path, sizeof(path));
    size_t n = strlen(path);
    if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        return msg + n + 2;
    return msg;
}

const char *crl_js_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "value";
}

/* A JSON value (from the schema) in compact JSON, cut after VALUE_SHOWN bytes. */
const char *crl_js_show_value(struct shown *b, const json_t *v)
{
    size_t need = json_dumpb(v, b->s, VALUE_SHOWN + 1, JSON_COMPACT | JSON_ENCODE_ANY);
    if (need == 0)
        snprintf(b->s, sizeof(b->s), "(a %s)", crl_js_type_name(v));
    else if (need <= VALUE_SHOWN)
        b->s[need] = 0;
    else
        memcpy(b->s + utf8_floor(b->s, VALUE_SHOWN), "...", 4);
    return b->s;
}

/* ---- numbers and equality ---- */

/* An integer, or a real with no fractional part that fits a long long. */
bool crl_js_integral(const json_t *v, long long *out)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == trunc(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
            *out = (long long)d;
            return true;
        }
    }
    return false;
}

/* Exact between integers; long double holds every long long exactly. */
int crl_js_num_cmp(const json_t *a, const json_t *b)
{
    if (json_is_integer(a) && json_is_integer(b)) {
        json_int_t x = json_integer_value(a), y = json_integer_value(b);
        return (x > y) - (x < y);
    }
    long double x = json_is_integer(a) ? (long double)json_integer_value(a) : json_real_value(a);
    long double y = json_is_integer(b) ? (long double)json_integer_value(b) : json_real_value(b);
    return (x > y) - (x < y);
}

const char *crl_js_show_num(struct numtext *b, const json_t *v)
{
    if (json_is_integer(v)) {
        snprintf(b->s, sizeof(b->s), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else {
        double d = json_number_value(v);
        snprintf(b->s, sizeof(b->s), "%.15g", d);
        if (strtod(b->s, NULL) != d)
            snprintf(b->s, sizeof(b->s), "%.17g", d);
    }
    return b->s;
}

bool crl_js_is_multiple(const json_t *x, const json_t *m)
{
    if (json_is_integer(x) && json_is_integer(m))
        return json_integer_value(x) % json_integer_value(m) == 0;
    double q = json_number_value(x) / json_number_value(m);
    if (!isfinite(q))
        return false;
    /* x / m carries the rounding of both: allow a few ulps of q. */
    return fabs(q - nearbyint(q)) <= 8 * DBL_EPSILON * fmax(1.0, fabs(q));
}

/* JSON Schema equality: 1 equals 1.0, objects ignore key order.  The depth
 * is bounded by the scans of instances and of enum/const values. */
bool crl_js_eq(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return crl_js_num_cmp(a, b) == 0;
    if (json_typeof(a) != json_typeof(b))
        return false;
    switch (json_typeof(a)) {
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) &&
               memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    case JSON_ARRAY: {
        size_t n = json_array_size(a);
        if (n != json_array_size(b))
            return false;
        for (size_t i = 0; i < n; i++)
            if (!crl_js_eq(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)a, key, v)
        {
            const json_t *w = json_object_get(b, key);
            if (!w || !crl_js_eq(v, w))
                return false;
        }
        return true;
    }
    default: return true; /* null, true, false: the type is the value */
    }
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t bytes_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return mix(h ^ n);
}

/* Equal values (json_eq) hash equal: integral numbers hash as integers. */
static uint64_t json_hash(const json_t *v)
{
    long long i;
    uint64_t h;
    switch (json_typeof(v)) {
    case JSON_NULL: return 1;
    case JSON_TRUE: return 2;
    case JSON_FALSE: return 3;
    case JSON_INTEGER:
    case JSON_REAL: {
        if (crl_js_integral(v, &i))
            return mix((uint64_t)i ^ 0x6e756d);
        double d = json_real_value(v);
        memcpy(&h, &d, sizeof(h));
        return mix(h ^ 0x7265616c);
    }
    case JSON_STRING: return bytes_hash(json_string_value(v), json_string_length(v));
    case JSON_ARRAY:
        h = 0x617272;
        for (size_t k = 0; k < json_array_size(v); k++)
            h = mix(h + json_hash(json_array_get(v, k)));
        return h;
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        h = 0x6f626a;
        json_object_foreach((json_t *)v, key, val)
        {
            h += mix(bytes_hash(key, strlen(key)) ^ mix(json_hash(val)));
        }
        return h;
    }
    }
    return 0;
}

struct hent {
    uint64_t h;
    size_t i;
};

static int hent_cmp(const void *pa, const void *pb)
{
    const struct hent *a = pa, *b = pb;
    if (a->h != b->h)
        return a->h < b->h ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* 1 if the items of `arr` are pairwise distinct, 0 with the first equal pair
 * (by the later index) in *da < *db, -1 without memory.  Sorting by hash
 * keeps this O(n log n) for arrays of any length. */
int crl_js_all_distinct(const json_t *arr, size_t *da, size_t *db)
{
    size_t n = json_array_size(arr);
    if (n < 2)
        return 1;
    cleanup_free struct hent *t = calloc(n, sizeof(*t));
    if (!t)
        return -1;
    for (size_t i = 0; i < n; i++) {
        t[i].h = json_hash(json_array_get(arr, i));
        t[i].i = i;
    }
    qsort(t, n, sizeof(*t), hent_cmp);
    bool found = false;
    for (size_t s = 0, e; s < n; s = e) {
        for (e = s + 1; e < n && t[e].h == t[s].h;)
            e++;
        for (size_t a = s; a < e; a++)
            for (size_t b = a + 1; b < e; b++)
                if ((!found || t[b].i < *db) &&
                    crl_js_eq(json_array_get(arr, t[a].i), json_array_get(arr, t[b].i))) {
                    *da = t[a].i;
                    *db = t[b].i;
                    found = true;
                }
    }
    return found ? 0 : 1;
}

/* Containers nested more than MAX_DEPTH levels are refused before any
 * recursion over them. */
int crl_js_scan_depth(const json_t *v, const struct loc *at, int level, struct crl_err *err)
{
    if (!json_is_array(v) && !json_is_object(v))
        return 0;
    if (level >= MAX_DEPTH)
        return crl_js_fail_at(err, CRL_E_INVALID, at, "nested deeper than %d levels", MAX_DEPTH);
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            struct loc il = {at, NULL, i};
            if (crl_js_scan_depth(json_array_get(v, i), &il, level + 1, err) < 0)
                return -1;
        }
        return 0;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val)
    {
        struct loc kl = {at, key, 0};
        if (crl_js_scan_depth(val, &kl, level + 1, err) < 0)
            return -1;
    }
    return 0;
}

/* ---- patterns ---- */

/* Patterns compile and run in C.UTF-8 whatever the process's locale, so that
 * `.` and bracket expressions see code points. */
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;
static locale_t utf8_locale;

static void utf8_locale_init(void)
{
    utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

int crl_js_rx_compile(regex_t *re, const char *pattern, char *why, size_t whysz)
{
    pthread_once(&utf8_once, utf8_locale_init);
    if (!utf8_locale) {
        snprintf(why, whysz, "no C.UTF-8 locale to compile it in");
        return -1;
    }
    locale_t old = uselocale(utf8_locale);
    int rc = regcomp(re, pattern, REG_EXTENDED | REG_NOSUB);
    uselocale(old);
    if (rc != 0) {
        regerror(rc, re, why, whysz);
        return -1;
    }
    return 0;
}

/* 0 if it matches anywhere in s[0..len), REG_NOMATCH, or another regexec
 * error.  REG_STARTEND: a string may hold NUL characters. */
int crl_js_rx_search(const regex_t *re, const char *s, size_t len)
{
    regmatch_t m[1] = {{0, (regoff_t)len}};
    locale_t old = uselocale(utf8_locale);
    int rc = regexec(re, s, 1, m, REG_STARTEND);
    uselocale(old);
    return rc;
}

/* Why `p` would not mean in POSIX ERE what it means in ECMA-262 (the dialect
 * JSON Schema names), or NULL.  Errors of syntax are left to regcomp. */
const char *crl_js_pattern_divergence(const char *p)
{
    for (size_t i = 0; p[i]; i++) {
        if (p[i] == '\\') {
            if (!p[i + 1])
                return NULL;
            if (!strchr(".[]()*+?{}|^$\\/-", p[i + 1]))
                return "uses an escape that POSIX ERE does not share with ECMA-262 (\\d, \\w, "
                       "\\s, \\b, a back-reference...); write a bracket expression such as "
                       "[0-9] or [[:space:]]";
            i++;
        } else if (p[i] == '[') {
            size_t j = i + 1;
            if (p[j] == '^')
                j++;
            if (p[j] == ']')
                j++;
            for (; p[j] && p[j] != ']'; j++) {
                if (p[j] == '[' && p[j + 1] && strchr(":.=", p[j + 1])) {
                    const char *end = strchr(p + j + 2, p[j + 1]);
                    while (end && end[1] != ']')
                        end = strchr(end + 1, p[j + 1]);
                    if (!end)
                        return NULL;
                    j = (size_t)(end - p) + 1;
                } else if (p[j] == '\\') {
                    return "has a backslash inside [...], which POSIX ERE takes literally and "
                           "ECMA-262 as an escape; write the character itself ('-' first or "
                           "last, ']' first)";
                }
            }
            if (!p[j])
                return NULL;
            i = j;
        }
    }
    return NULL;
}
