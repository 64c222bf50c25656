/* The JSON Schema validator (jsonschema.h): the keyword table, checking a
 * schema against it and validating an instance, together so that a new
 * keyword is one file's change.  What both need of JSON values (paths and
 * messages, numbers and equality, patterns) is in jsonschema_values.c. */
#include "jsonschema.h"

#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "../util/cleanup.h"
#include "jsonschema_values.h"

#define RX_CACHE 16 /* patterns compiled once per validation */

/* Internal results of validation: a mismatch can be absorbed by anyOf, oneOf
 * and not; a fatal error (a malformed schema, no memory) never is. */
#define MISMATCH (-1)
#define FATAL (-2)

/* ---- checking a schema ---- */

enum kw_kind {
    K_UNSUPPORTED,
    K_TYPE,
    K_ENUM,
    K_CONST,
    K_PROPERTIES,
    K_REQUIRED,
    K_SCHEMA,
    K_ITEMS,
    K_COUNT,
    K_BOOL,
    K_PATTERN,
    K_NUMBER,
    K_MULTIPLE,
    K_SCHEMAS,
    K_STRING,
    K_ANY,
    K_EXAMPLES,
    K_DIALECT,
};

static const struct keyword {
    const char *name;
    enum kw_kind kind;
    const char *hint; /* for K_UNSUPPORTED */
} keywords[] = {
    {"type", K_TYPE, NULL},
    {"enum", K_ENUM, NULL},
    {"const", K_CONST, NULL},
    {"properties", K_PROPERTIES, NULL},
    {"required", K_REQUIRED, NULL},
    {"additionalProperties", K_SCHEMA, NULL},
    {"items", K_ITEMS, NULL},
    {"minItems", K_COUNT, NULL},
    {"maxItems", K_COUNT, NULL},
    {"uniqueItems", K_BOOL, NULL},
    {"minLength", K_COUNT, NULL},
    {"maxLength", K_COUNT, NULL},
    {"pattern", K_PATTERN, NULL},
    {"minimum", K_NUMBER, NULL},
    {"maximum", K_NUMBER, NULL},
    {"exclusiveMinimum", K_NUMBER, NULL},
    {"exclusiveMaximum", K_NUMBER, NULL},
    {"multipleOf", K_MULTIPLE, NULL},
    {"allOf", K_SCHEMAS, NULL},
    {"anyOf", K_SCHEMAS, NULL},
    {"oneOf", K_SCHEMAS, NULL},
    {"not", K_SCHEMA, NULL},
    {"title", K_STRING, NULL},
    {"description", K_STRING, NULL},
    {"$comment", K_STRING, NULL},
    {"$id", K_STRING, NULL},
    {"$schema", K_DIALECT, NULL},
    {"default", K_ANY, NULL},
    {"examples", K_EXAMPLES, NULL},
    {"deprecated", K_BOOL, NULL},
    {"readOnly", K_BOOL, NULL},
    {"writeOnly", K_BOOL, NULL},
    {"$ref", K_UNSUPPORTED, " (references are not resolved): inline the schema it names"},
    {"$defs", K_UNSUPPORTED, " ($ref is not either): inline the schemas where they are used"},
    {"definitions", K_UNSUPPORTED, " ($ref is not either): inline the schemas where they are used"},
    {"$dynamicRef", K_UNSUPPORTED, " (references are not resolved)"},
    {"$dynamicAnchor", K_UNSUPPORTED, " (references are not resolved)"},
    {"$anchor", K_UNSUPPORTED, " (references are not resolved)"},
    {"$vocabulary", K_UNSUPPORTED, ""},
    {"patternProperties", K_UNSUPPORTED, ""},
    {"prefixItems", K_UNSUPPORTED, ""},
    {"additionalItems", K_UNSUPPORTED, ""},
    {"contains", K_UNSUPPORTED, ""},
    {"minContains", K_UNSUPPORTED, ""},
    {"maxContains", K_UNSUPPORTED, ""},
    {"unevaluatedProperties", K_UNSUPPORTED, ""},
    {"unevaluatedItems", K_UNSUPPORTED, ""},
    {"propertyNames", K_UNSUPPORTED, ""},
    {"minProperties", K_UNSUPPORTED, ""},
    {"maxProperties", K_UNSUPPORTED, ""},
    {"dependentRequired", K_UNSUPPORTED, ""},
    {"dependentSchemas", K_UNSUPPORTED, ""},
    {"dependencies", K_UNSUPPORTED, ""},
    {"if", K_UNSUPPORTED, ""},
    {"then", K_UNSUPPORTED, ""},
    {"else", K_UNSUPPORTED, ""},
    {"format", K_UNSUPPORTED, " (it would not be checked): use pattern"},
    {"contentEncoding", K_UNSUPPORTED, ""},
    {"contentMediaType", K_UNSUPPORTED, ""},
    {"contentSchema", K_UNSUPPORTED, ""},
};

static const char *const type_names[] = {"null",   "boolean", "object", "array",
                                         "number", "string",  "integer"};

static const char *const dialects[] = {"https://json-schema.org/draft/2020-12/schema",
                                       "https://json-schema.org/draft/2020-12/schema#"};

static const struct keyword *keyword_find(const char *name)
{
    for (size_t i = 0; i < CRL_ARRAY_SIZE(keywords); i++)
        if (strcmp(keywords[i].name, name) == 0)
            return &keywords[i];
    return NULL;
}

/* A string without NUL characters, so that C string functions see all of it. */
static bool plain_string(const json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

static bool type_known(const json_t *v)
{
    if (!plain_string(v))
        return false;
    for (size_t i = 0; i < CRL_ARRAY_SIZE(type_names); i++)
        if (strcmp(type_names[i], json_string_value(v)) == 0)
            return true;
    return false;
}

static int check_schema(const json_t *s, const struct loc *at, int depth, struct crl_err *err);

static int check_type(const json_t *v, const struct loc *at, struct crl_err *err)
{
    struct quoted q;
    if (json_is_string(v)) {
        if (!type_known(v))
            return crl_js_fail_at(
                err, CRL_E_INVALID, at,
                "%s is not a JSON type (null, boolean, object, array, number, string, "
                "integer)",
                crl_js_quote(&q, json_string_value(v)));
        return 0;
    }
    if (!json_is_array(v))
        return crl_js_fail_at(err, CRL_E_INVALID, at,
                              "must be a type name or an array of them, got %s",
                              crl_js_type_name(v));
    if (json_array_size(v) == 0)
        return crl_js_fail_at(err, CRL_E_INVALID, at, "must not be an empty array");
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *t = json_array_get(v, i);
        struct loc il = {at, NULL, i};
        if (!json_is_string(t))
            return crl_js_fail_at(err, CRL_E_INVALID, &il, "must be a type name, got %s",
                                  crl_js_type_name(t));
        if (check_type(t, &il, err) < 0)
            return -1;
        for (size_t j = 0; j < i; j++)
            if (crl_js_eq(json_array_get(v, j), t))
                return crl_js_fail_at(err, CRL_E_INVALID, &il, "%s is listed twice",
                                      crl_js_quote(&q, json_string_value(t)));
    }
    return 0;
}

static int check_required(const json_t *v, const struct loc *at, struct crl_err *err)
{
    struct quoted q;
    if (!json_is_array(v))
        return crl_js_fail_at(err, CRL_E_INVALID, at, "must be an array of property names, got %s",
                              crl_js_type_name(v));
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *name = json_array_get(v, i);
        struct loc il = {at, NULL, i};
        if (!json_is_string(name))
            return crl_js_fail_at(err, CRL_E_INVALID, &il, "must be a property name, got %s",
                                  crl_js_type_name(name));
        if (!plain_string(name))
            return crl_js_fail_at(err, CRL_E_INVALID, &il, "must not contain a NUL character");
        for (size_t j = 0; j < i; j++)
            if (crl_js_eq(json_array_get(v, j), name))
                return crl_js_fail_at(err, CRL_E_INVALID, &il, "%s is listed twice",
                                      crl_js_quote(&q, json_string_value(name)));
    }
    return 0;
}

static int check_pattern(const json_t *v, const struct loc *at, struct crl_err *err)
{
    struct quoted q;
    if (!json_is_string(v))
        return crl_js_fail_at(err, CRL_E_INVALID, at, "must be a regular expression, got %s",
                              crl_js_type_name(v));
    if (!plain_string(v))
        return crl_js_fail_at(err, CRL_E_INVALID, at, "must not contain a NUL character");
    const char *p = json_string_value(v);
    const char *why = crl_js_pattern_divergence(p);
    if (why)
        return crl_js_fail_at(err, CRL_E_INVALID, at, "%s %s", crl_js_quote(&q, p), why);
    regex_t re;
    char msg[160];
    if (crl_js_rx_compile(&re, p, msg, sizeof(msg)) < 0)
        return crl_js_fail_at(err, CRL_E_INVALID, at,
                              "%s is not a POSIX extended regular expression: %s",
                              crl_js_quote(&q, p), msg);
    regfree(&re);
    return 0;
}

static int check_keyword(const char *name, const json_t *v, const struct loc *schema_at,
                         const struct loc *at, int depth, struct crl_err *err)
{
    struct quoted q;
    struct numtext nt;
    long long n;
    const struct keyword *k = keyword_find(name);
    if (!k)
        return crl_js_fail_at(err, CRL_E_INVALID, schema_at, "unknown keyword %s",
                              crl_js_quote(&q, name));
    switch (k->kind) {
    case K_UNSUPPORTED:
        return crl_js_fail_at(err, CRL_E_INVALID, schema_at, "%s is not supported%s",
                              crl_js_quote(&q, name), k->hint);
    case K_TYPE: return check_type(v, at, err);
    case K_ENUM:
        if (!json_is_array(v) || json_array_size(v) == 0)
            return crl_js_fail_at(err, CRL_E_INVALID, at,
                                  "must be a non-empty array of values, got %s",
                                  json_is_array(v) ? "an empty one" : crl_js_type_name(v));
        return crl_js_scan_depth(v, at, 0, err);
    case K_CONST:
    case K_ANY: return crl_js_scan_depth(v, at, 0, err);
    case K_EXAMPLES:
        if (!json_is_array(v))
            return crl_js_fail_at(err, CRL_E_INVALID, at, "must be an array, got %s",
                                  crl_js_type_name(v));
        return crl_js_scan_depth(v, at, 0, err);
    case K_PROPERTIES: {
        if (!json_is_object(v))
            return crl_js_fail_at(err, CRL_E_INVALID, at, "must be an object of schemas, got %s",
                                  crl_js_type_name(v));
        const char *key;
        json_t *sub;
        json_object_foreach((json_t *)v, key, sub)
        {
            struct loc pl = {at, key, 0};
            if (check_schema(sub, &pl, depth + 1, err) < 0)
                return -1;
        }
        return 0;
    }
    case K_REQUIRED: return check_required(v, at, err);
    case K_ITEMS:
        if (json_is_array(v))
            return crl_js_fail_at(err, CRL_E_INVALID, at,
                                  "must be a schema; the array form is prefixItems, which is not "
                                  "supported");
        return check_schema(v, at, depth + 1, err);
    case K_SCHEMA: return check_schema(v, at, depth + 1, err);
    case K_COUNT:
        if (!json_is_number(v))
            return crl_js_fail_at(err, CRL_E_INVALID, at, "must be a non-negative integer, got %s",
                                  crl_js_type_name(v));
        if (!crl_js_integral(v, &n) || n < 0)
            return crl_js_fail_at(err, CRL_E_INVALID, at, "must be a non-negative integer, not %s",
                                  crl_js_show_num(&nt, v));
        return 0;
    case K_BOOL:
        if (!json_is_boolean(v))
            return crl_js_fail_at(err, CRL_E_INVALID, at, "must be true or false, got %s",
                                  crl_js_type_name(v));
        return 0;
    case K_PATTERN: return check_pattern(v, at, err);
    case K_NUMBER:
        if (json_is_boolean(v) && strncmp(name, "exclusive", 9) == 0)
            return crl_js_fail_at(
                err, CRL_E_INVALID, at,
                "must be a number: the boolean form is draft 4's; write the bound "
                "itself here");
        if (!json_is_number(v))
            return crl_js_fail_at(err, CRL_E_INVALID, at, "must be a number, got %s",
                                  crl_js_type_name(v));
        return 0;
    case K_MULTIPLE:
        if (!json_is_number(v))
            return crl_js_fail_at(err, CRL_E_INVALID, at, "must be a number, got %s",
                                  crl_js_type_name(v));
        if (json_number_value(v) <= 0)
            return crl_js_fail_at(err, CRL_E_INVALID, at, "must be greater than 0, not %s",
                                  crl_js_show_num(&nt, v));
        return 0;
    case K_SCHEMAS:
        if (!json_is_array(v) || json_array_size(v) == 0)
            return crl_js_fail_at(err, CRL_E_INVALID, at,
                                  "must be a non-empty array of schemas, got %s",
                                  json_is_array(v) ? "an empty one" : crl_js_type_name(v));
        for (size_t i = 0; i < json_array_size(v); i++) {
            struct loc il = {at, NULL, i};
            if (check_schema(json_array_get(v, i), &il, depth + 1, err) < 0)
                return -1;
        }
        return 0;
    case K_STRING:
        if (!json_is_string(v))
            return crl_js_fail_at(err, CRL_E_INVALID, at, "must be a string, got %s",
                                  crl_js_type_name(v));
        return 0;
    case K_DIALECT:
        for (size_t i = 0; i < CRL_ARRAY_SIZE(dialects); i++)
            if (plain_string(v) && strcmp(json_string_value(v), dialects[i]) == 0)
                return 0;
        return crl_js_fail_at(err, CRL_E_INVALID, at,
                              "only draft 2020-12 (%s) is supported, not %s", dialects[0],
                              json_is_string(v) ? crl_js_quote(&q, json_string_value(v)) : "that");
    }
    return crl_js_fail_at(err, CRL_E_INTERNAL, at, "keyword kind %d not handled", (int)k->kind);
}

static int check_schema(const json_t *s, const struct loc *at, int depth, struct crl_err *err)
{
    if (depth > MAX_DEPTH)
        return crl_js_fail_at(err, CRL_E_INVALID, at, "subschemas nested deeper than %d levels",
                              MAX_DEPTH);
    if (json_is_boolean(s))
        return 0;
    if (!json_is_object(s))
        return crl_js_fail_at(err, CRL_E_INVALID, at,
                              "a schema must be an object or a boolean, got %s",
                              crl_js_type_name(s));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v)
    {
        struct loc kl = {at, key, 0};
        if (check_keyword(key, v, at, &kl, depth, err) < 0)
            return -1;
    }
    return 0;
}

int crl_jsonschema_check(const json_t *schema, struct crl_err *err)
{
    struct loc root = {NULL, "schema", 0};
    if (!schema)
        return crl_err_set(err, CRL_E_INVALID, "schema: missing");
    return check_schema(schema, &root, 0, err);
}

/* ---- validating an instance ---- */

struct vctx {
    struct crl_err *err; /* where a mismatch is described: a scratch one inside anyOf & co */
    size_t n_rx;
    struct {
        const json_t *pattern;
        regex_t re;
    } rx[RX_CACHE];
};

static int v_node(struct vctx *c, const json_t *s, const json_t *inst, const struct loc *at,
                  int depth);

static int mismatch(struct vctx *c, const struct loc *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int mismatch(struct vctx *c, const struct loc *at, const char *fmt, ...)
{
    if (c->err) {
        char msg[sizeof(c->err->msg)];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        crl_js_fail_at(c->err, CRL_E_INVALID, at, "%s", msg);
    }
    return MISMATCH;
}

/* The schema is not one crl_jsonschema_check() passed. */
static int bad_schema(struct vctx *c, const struct loc *at, const char *keyword)
{
    crl_js_fail_at(c->err, CRL_E_INTERNAL, at, "the schema's '%s' is malformed (was it checked?)",
                   keyword);
    return FATAL;
}

/* A keyword's value, or NULL when absent; *bad when present but not of the
 * JSON type `type`. */
static const json_t *kw(const json_t *s, const char *name, json_type type, bool *bad)
{
    const json_t *v = json_object_get(s, name);
    if (v && !(json_typeof(v) == type || (type == JSON_REAL && json_is_number(v)) ||
               (type == JSON_TRUE && json_is_boolean(v))))
        *bad = true;
    return v;
}

static bool type_matches(const char *t, const json_t *inst)
{
    if (strcmp(t, "integer") == 0)
        return json_is_integer(inst) ||
               (json_is_real(inst) && json_real_value(inst) == trunc(json_real_value(inst)));
    if (strcmp(t, "number") == 0)
        return json_is_number(inst);
    if (strcmp(t, "boolean") == 0)
        return json_is_boolean(inst);
    return strcmp(t, crl_js_type_name(inst)) == 0;
}

static int v_type(struct vctx *c, const json_t *t, const json_t *inst, const struct loc *at)
{
    if (json_is_string(t)) {
        if (type_matches(json_string_value(t), inst))
            return 0;
        return mismatch(c, at, "expected %s, got %s", json_string_value(t), crl_js_type_name(inst));
    }
    if (!json_is_array(t))
        return bad_schema(c, at, "type");
    char want[128];
    size_t len = 0;
    want[0] = 0;
    for (size_t i = 0; i < json_array_size(t); i++) {
        const json_t *name = json_array_get(t, i);
        if (!json_is_string(name))
            return bad_schema(c, at, "type");
        if (type_matches(json_string_value(name), inst))
            return 0;
        if (i > 0)
            crl_js_put(want, sizeof(want), &len, " or ", 4);
        crl_js_put(want, sizeof(want), &len, json_string_value(name), json_string_length(name));
    }
    return mismatch(c, at, "expected %s, got %s", want, crl_js_type_name(inst));
}

static int v_number(struct vctx *c, const json_t *s, const json_t *inst, const struct loc *at)
{
    /* bad[cmp + 1]: whether instance <=> bound = cmp breaks the keyword. */
    static const struct {
        const char *kw, *op;
        bool bad[3];
    } bounds[] = {
        {"minimum", ">=", {true, false, false}},
        {"maximum", "<=", {false, false, true}},
        {"exclusiveMinimum", ">", {true, true, false}},
        {"exclusiveMaximum", "<", {false, true, true}},
    };
    struct numtext a, b;
    bool bad = false;
    for (size_t i = 0; i < CRL_ARRAY_SIZE(bounds); i++) {
        const json_t *bound = kw(s, bounds[i].kw, JSON_REAL, &bad);
        if (bad)
            return bad_schema(c, at, bounds[i].kw);
        if (bound && bounds[i].bad[crl_js_num_cmp(inst, bound) + 1])
            return mismatch(c, at, "must be %s %s, got %s", bounds[i].op,
                            crl_js_show_num(&a, bound), crl_js_show_num(&b, inst));
    }
    const json_t *m = kw(s, "multipleOf", JSON_REAL, &bad);
    if (bad || (m && json_number_value(m) <= 0))
        return bad_schema(c, at, "multipleOf");
    if (m && !crl_js_is_multiple(inst, m))
        return mismatch(c, at, "must be a multiple of %s, got %s", crl_js_show_num(&a, m),
                        crl_js_show_num(&b, inst));
    return 0;
}

/* A count keyword (minLength, maxItems...): 1 if present, 0 if absent, FATAL if malformed. */
static int count_kw(struct vctx *c, const json_t *s, const char *name, const struct loc *at,
                    long long *out)
{
    const json_t *v = json_object_get(s, name);
    if (!v)
        return 0;
    if (!crl_js_integral(v, out) || *out < 0)
        return bad_schema(c, at, name);
    return 1;
}

static size_t code_points(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

static int v_string(struct vctx *c, const json_t *s, const json_t *inst, const struct loc *at)
{
    const char *str = json_string_value(inst);
    size_t len = json_string_length(inst);
    long long lo, hi;
    int has_lo = count_kw(c, s, "minLength", at, &lo);
    int has_hi = has_lo < 0 ? 0 : count_kw(c, s, "maxLength", at, &hi);
    if (has_lo < 0 || has_hi < 0)
        return FATAL;
    if (has_lo || has_hi) {
        size_t n = code_points(str, len);
        if (has_lo && n < (unsigned long long)lo)
            return mismatch(c, at, "expected at least %lld characters, got %zu", lo, n);
        if (has_hi && n > (unsigned long long)hi)
            return mismatch(c, at, "expected at most %lld characters, got %zu", hi, n);
    }
    bool bad = false;
    const json_t *pat = kw(s, "pattern", JSON_STRING, &bad);
    if (bad)
        return bad_schema(c, at, "pattern");
    if (!pat)
        return 0;
    regex_t tmp, *re = NULL;
    for (size_t i = 0; i < c->n_rx && !re; i++)
        if (c->rx[i].pattern == pat)
            re = &c->rx[i].re;
    bool owned = false;
    if (!re) {
        char why[160];
        re = c->n_rx < RX_CACHE ? &c->rx[c->n_rx].re : &tmp;
        if (crl_js_rx_compile(re, json_string_value(pat), why, sizeof(why)) < 0)
            return bad_schema(c, at, "pattern");
        if (re == &tmp)
            owned = true;
        else
            c->rx[c->n_rx++].pattern = pat;
    }
    int rc = crl_js_rx_search(re, str, len);
    if (owned)
        regfree(&tmp);
    struct quoted q;
    if (rc == REG_NOMATCH)
        return mismatch(c, at, "does not match the pattern %s",
                        crl_js_quote(&q, json_string_value(pat)));
    if (rc != 0) {
        crl_js_fail_at(c->err, CRL_E_INTERNAL, at,
                       "matching the pattern %s failed (regexec error %d)",
                       crl_js_quote(&q, json_string_value(pat)), rc);
        return FATAL;
    }
    return 0;
}

static int v_array(struct vctx *c, const json_t *s, const json_t *inst, const struct loc *at,
                   int depth)
{
    size_t n = json_array_size(inst);
    long long lo, hi;
    int r;
    if ((r = count_kw(c, s, "minItems", at, &lo)) < 0)
        return r;
    if (r && n < (unsigned long long)lo)
        return mismatch(c, at, "expected at least %lld items, got %zu", lo, n);
    if ((r = count_kw(c, s, "maxItems", at, &hi)) < 0)
        return r;
    if (r && n > (unsigned long long)hi)
        return mismatch(c, at, "expected at most %lld items, got %zu", hi, n);
    bool bad = false;
    const json_t *uniq = kw(s, "uniqueItems", JSON_TRUE, &bad);
    if (bad)
        return bad_schema(c, at, "uniqueItems");
    if (json_is_true(uniq)) {
        size_t a = 0, b = 0;
        int d = crl_js_all_distinct(inst, &a, &b);
        if (d < 0) {
            crl_js_fail_at(c->err, CRL_E_INTERNAL, at, "out of memory checking uniqueItems");
            return FATAL;
        }
        if (d == 0)
            return mismatch(c, at, "items [%zu] and [%zu] are equal, but uniqueItems is set", a, b);
    }
    const json_t *items = json_object_get(s, "items");
    if (!items)
        return 0;
    for (size_t i = 0; i < n; i++) {
        struct loc il = {at, NULL, i};
        if ((r = v_node(c, items, json_array_get(inst, i), &il, depth + 1)) != 0)
            return r;
    }
    return 0;
}

static int v_object(struct vctx *c, const json_t *s, const json_t *inst, const struct loc *at,
                    int depth)
{
    struct quoted q;
    bool bad = false;
    const json_t *req = kw(s, "required", JSON_ARRAY, &bad);
    if (bad)
        return bad_schema(c, at, "required");
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const json_t *name = json_array_get(req, i);
        if (!json_is_string(name))
            return bad_schema(c, at, "required");
        if (!json_object_get(inst, json_string_value(name)))
            return mismatch(c, at, "missing required property %s",
                            crl_js_quote(&q, json_string_value(name)));
    }
    const json_t *props = kw(s, "properties", JSON_OBJECT, &bad);
    if (bad)
        return bad_schema(c, at, "properties");
    const char *key;
    json_t *v;
    int r;
    if (props) {
        json_object_foreach((json_t *)props, key, v)
        {
            const json_t *val = json_object_get(inst, key);
            struct loc pl = {at, key, 0};
            if (val && (r = v_node(c, v, val, &pl, depth + 1)) != 0)
                return r;
        }
    }
    const json_t *extra = json_object_get(s, "additionalProperties");
    if (!extra)
        return 0;
    json_object_foreach((json_t *)inst, key, v)
    {
        if (props && json_object_get(props, key))
            continue;
        if (json_is_false(extra))
            return mismatch(c, at, "unexpected property %s", crl_js_quote(&q, key));
        struct loc pl = {at, key, 0};
        if ((r = v_node(c, extra, v, &pl, depth + 1)) != 0)
            return r;
    }
    return 0;
}

/* `sub` on `inst` with its message kept in *e instead of the caller's error. */
static int v_branch(struct vctx *c, const json_t *sub, const json_t *inst, const struct loc *at,
                    int depth, struct crl_err *e)
{
    struct crl_err *outer = c->err;
    crl_err_clear(e);
    c->err = e;
    int r = v_node(c, sub, inst, at, depth);
    c->err = outer;
    if (r == FATAL && outer)
        *outer = *e;
    return r;
}

static int v_applicators(struct vctx *c, const json_t *s, const json_t *inst, const struct loc *at,
                         int depth)
{
    bool bad = false;
    const json_t *all = kw(s, "allOf", JSON_ARRAY, &bad);
    const json_t *any = kw(s, "anyOf", JSON_ARRAY, &bad);
    const json_t *one = kw(s, "oneOf", JSON_ARRAY, &bad);
    const json_t *neg = json_object_get(s, "not");
    if (bad)
        return bad_schema(c, at, "allOf/anyOf/oneOf");
    int r;
    for (size_t i = 0; all && i < json_array_size(all); i++)
        if ((r = v_node(c, json_array_get(all, i), inst, at, depth + 1)) != 0)
            return r;

    struct crl_err first = CRL_ERR_INIT, e = CRL_ERR_INIT;
    if (any) {
        size_t n = json_array_size(any), i;
        for (i = 0; i < n; i++) {
            r = v_branch(c, json_array_get(any, i), inst, at, depth + 1, &e);
            if (r == 0)
                break;
            if (r == FATAL)
                return r;
            if (i == 0)
                first = e;
        }
        if (i == n)
            return mismatch(c, at, "matches none of the %zu schemas of anyOf (anyOf[0]: %s)", n,
                            crl_js_after_path(first.msg, at));
    }
    if (one) {
        size_t n = json_array_size(one), hits = 0, hit[2] = {0, 0};
        for (size_t i = 0; i < n && hits < 2; i++) {
            r = v_branch(c, json_array_get(one, i), inst, at, depth + 1, &e);
            if (r == FATAL)
                return r;
            if (r == 0)
                hit[hits++] = i;
            else if (i == 0)
                first = e;
        }
        if (hits == 0)
            return mismatch(c, at, "matches none of the %zu schemas of oneOf (oneOf[0]: %s)", n,
                            crl_js_after_path(first.msg, at));
        if (hits > 1)
            return mismatch(c, at,
                            "matches both oneOf[%zu] and oneOf[%zu], but must match exactly one "
                            "of its %zu schemas",
                            hit[0], hit[1], n);
    }
    if (neg) {
        r = v_branch(c, neg, inst, at, depth + 1, &e);
        if (r == FATAL)
            return r;
        if (r == 0)
            return mismatch(c, at, "must not match the schema of 'not'");
    }
    return 0;
}

static int v_node(struct vctx *c, const json_t *s, const json_t *inst, const struct loc *at,
                  int depth)
{
    if (depth > MAX_DEPTH) {
        crl_js_fail_at(c->err, CRL_E_INTERNAL, at, "the schema nests deeper than %d levels",
                       MAX_DEPTH);
        return FATAL;
    }
    if (json_is_true(s))
        return 0;
    if (json_is_false(s))
        return mismatch(c, at, "not allowed (the schema here is false)");
    if (!json_is_object(s))
        return bad_schema(c, at, "schema");

    struct shown sv;
    const json_t *t = json_object_get(s, "type");
    int r;
    if (t && (r = v_type(c, t, inst, at)) != 0)
        return r;
    const json_t *k = json_object_get(s, "const");
    if (k && !crl_js_eq(inst, k))
        return mismatch(c, at, "must be %s", crl_js_show_value(&sv, k));
    if ((k = json_object_get(s, "enum"))) {
        if (!json_is_array(k))
            return bad_schema(c, at, "enum");
        size_t i, n = json_array_size(k);
        for (i = 0; i < n && !crl_js_eq(inst, json_array_get(k, i)); i++)
            ;
        if (i == n)
            return mismatch(c, at, "must be one of %s", crl_js_show_value(&sv, k));
    }
    switch (json_typeof(inst)) {
    case JSON_INTEGER:
    case JSON_REAL: r = v_number(c, s, inst, at); break;
    case JSON_STRING: r = v_string(c, s, inst, at); break;
    case JSON_ARRAY: r = v_array(c, s, inst, at, depth); break;
    case JSON_OBJECT: r = v_object(c, s, inst, at, depth); break;
    default: r = 0;
    }
    if (r != 0)
        return r;
    return v_applicators(c, s, inst, at, depth);
}

int crl_jsonschema_validate(const json_t *schema, const json_t *instance, const char *what,
                            struct crl_err *err)
{
    struct loc root = {NULL, what && *what ? what : "instance", 0};
    if (!schema || !instance)
        return crl_err_set(err, CRL_E_INTERNAL, "%s: no schema or no value to validate", root.key);
    if (crl_js_scan_depth(instance, &root, 0, err) < 0)
        return -1;
    struct vctx c = {.err = err, .n_rx = 0};
    int r = v_node(&c, schema, instance, &root, 0);
    for (size_t i = 0; i < c.n_rx; i++)
        regfree(&c.rx[i].re);
    return r == 0 ? 0 : -1;
}
